"""Held-out sets from the twenty-eighth on (``heldout_models_24th.py`` holds the twenty-fourth to twenty-seventh,
``heldout_models_21st.py`` the twenty-first to twenty-third, ``heldout_models_more.py`` the fourteenth to the
twentieth, ``heldout_models.py`` the first thirteen).

The twenty-eighth (``TWENTY_EIGHTH``) was written on 2026-11-29 at 16:25 UTC, on the Zen 5 EPYC (cpu family 26,
model 2), before that CPU's model got the Mixtral tuning family it lacked and before anything was scored on it:
architectures of kinds no set has held — XGLM (sinusoidal positions, scaled embeddings), Data2Vec's audio model
(a convolutional feature encoder with layer norms, a stack of positional convolutions), Pixtral's vision encoder
(2-D rotary positions, every image's patches in one sequence), DiffLlama (differential attention: two softmax
maps subtracted, a group norm per head), Falcon-H1 (Mamba-2 and attention side by side in each layer, scaled by
multipliers) and CodeGen (GPT-J's parallel block, queries, keys and values from one projection split by groups).
Each was checked to build and capture; none was timed or predicted before it went in. Longformer and
Nystromformer were tried first and dropped before anything was scored: ``torch.export`` cannot trace either
(``pipeplan graph`` says so); EnCodec's and Mimi's encoders too (EnCodec does not export, Mimi's small config
did not build).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _ids(batch_size: int, seq_len: int = 64) -> tuple[torch.Tensor]:
    return (torch.randint(0, 1000, (batch_size, seq_len)),)


def xglm(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer XGLM decoder over 64 tokens: sinusoidal positions added to embeddings scaled by √width, pre-norm
    blocks with a GELU feed-forward of 4× the width."""
    from transformers import XGLMConfig, XGLMModel

    config = XGLMConfig(vocab_size=1000, d_model=128, num_layers=3, attention_heads=4, ffn_dim=512, use_cache=False)
    return XGLMModel(config), _ids(batch_size)


def data2vec_audio(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """Data2Vec's audio model, 2 layers over half a second at 16 kHz: seven strided 1-D convolutions each with a
    layer norm, a stack of five grouped positional convolutions, post-norm attention blocks."""
    from transformers import Data2VecAudioConfig, Data2VecAudioModel

    config = Data2VecAudioConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
                                 conv_dim=(64,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    return Data2VecAudioModel(config), (torch.randn(batch_size, 8000),)


def pixtral_vision(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """Pixtral's 3-layer vision encoder on 112×112 images: 16-pixel patches, 2-D rotary positions, every image's
    patches concatenated into one sequence under a block-diagonal mask, RMS norms, a SwiGLU feed-forward."""
    from transformers import PixtralVisionConfig, PixtralVisionModel

    config = PixtralVisionConfig(hidden_size=128, intermediate_size=352, num_hidden_layers=3, num_attention_heads=4,
                                 image_size=112, patch_size=16, head_dim=32)
    return PixtralVisionModel(config), (torch.randn(batch_size, 3, 112, 112),)


def diffllama(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer DiffLlama over 64 tokens: differential attention (two softmax maps, the second scaled by a learned
    λ and subtracted), a group norm per head, grouped-query attention, rotary positions, SwiGLU."""
    from transformers import DiffLlamaConfig, DiffLlamaModel

    config = DiffLlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=2, use_cache=False)
    return DiffLlamaModel(config), _ids(batch_size)


def falcon_h1(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer Falcon-H1 over 64 tokens: in each layer a Mamba-2 mixer (PyTorch chunked scan) and grouped-query
    attention run side by side on the same input, their outputs scaled by multipliers and summed; a SwiGLU
    feed-forward."""
    from transformers import FalconH1Config, FalconH1Model

    config = FalconH1Config(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, mamba_d_ssm=128, mamba_n_heads=8,
                            mamba_d_head=16, mamba_d_state=16, mamba_chunk_size=32, use_cache=False)
    return FalconH1Model(config), _ids(batch_size)


def codegen(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer CodeGen over 64 tokens: attention and feed-forward in parallel off one layer norm, queries, keys
    and values from one projection split into groups, rotary positions on the first 16 dimensions of each head."""
    from transformers import CodeGenConfig, CodeGenModel

    config = CodeGenConfig(vocab_size=1000, n_embd=128, n_layer=3, n_head=4, rotary_dim=16, n_positions=256,
                           use_cache=False)
    return CodeGenModel(config), _ids(batch_size)


TWENTY_EIGHTH = ("xglm", "data2vec_audio", "pixtral_vision", "diffllama", "falcon_h1", "codegen")
