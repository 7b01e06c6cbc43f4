"""The twenty-eighth to thirtieth held-out sets (``heldout_models_31st.py`` holds those after,
``heldout_models_24th.py`` the twenty-fourth to twenty-seventh, ``heldout_models_21st.py`` the twenty-first to
twenty-third, ``heldout_models_more.py`` the fourteenth to the twentieth, ``heldout_models.py`` the first thirteen).

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

The twenty-ninth (``TWENTY_NINTH``) was written on 2026-11-29 at 19:05 UTC, on the Xeon of cpu family 6, model
207, before that CPU was profiled again and before anything was scored on it: Apertus (xIELU, a learned
piecewise activation, in Python), BitNet (squared ReLU, a sub-norm before each output projection; weights as
plain floats), Gemma 3n's text model (AltUp's four predicted streams, a low-rank "laurel" branch, per-layer
input embeddings, sliding and full attention alternating), Qwen3-Next (Gated DeltaNet linear attention in
PyTorch's chunked form, one gated full-attention layer in four, routed experts), CLAP's audio encoder (HTSAT: a
Swin transformer over a mel spectrogram folded into a square), V-JEPA 2's video encoder (3-D rotary
positions over tubelets) and LongT5's encoder (blocked local attention). Each was checked to build and capture;
none was timed or predicted before it went in. Autoformer was tried and dropped before anything was scored
(its factory's inputs did not trace); LongT5's transient-global attention does not trace at batch 2, so its
local attention is used.

The thirtieth (``THIRTIETH``) was written on 2026-11-29 at 21:40 UTC, on a fourth VM of the model-207 Xeon design
(running whole models about 1.75× slower than the VM that design was last profiled on), before anything was
scored on it: SAM 2's Hiera (query pooling where a stage begins), Kimi Linear (Kimi Delta Attention beside
multi-head latent attention, routed experts), Cohere 2 (parallel attention and feed-forward, a full-attention
layer without positions), TimesFM (a time-series decoder over patches), MiniMax (lightning attention
alternating with softmax attention, routed experts) and ESM C (a protein encoder with normed queries and keys).
Each was checked to build and capture; none was timed or predicted before it went in. ImageGPT (GPT-2's
blocks), PP-OCRv5's recogniser (HGNetV2, already held out) and DBRX (its small config did not build) were left
out before anything was scored.
SAM's image encoder was in it too, until its first scoring showed that the eleventh set holds it already
(``heldout_models.py``): it was taken out, not swapped for another, so the set has six architectures.
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


def apertus(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer Apertus over 64 tokens: xIELU activations (transformers' Python fallback), a two-matrix
    feed-forward, RMS norms on queries and keys, grouped-query attention, rotary positions."""
    from transformers import ApertusConfig, ApertusModel

    config = ApertusConfig(vocab_size=1000, hidden_size=128, intermediate_size=512, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, use_cache=False)
    return ApertusModel(config), _ids(batch_size)


def bitnet(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer BitNet over 64 tokens with its weights as plain floats: squared-ReLU gated feed-forward, an RMS
    norm before each block's output projection, grouped-query attention, rotary positions."""
    from transformers import BitNetConfig, BitNetModel

    config = BitNetConfig(vocab_size=1000, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, use_cache=False)
    return BitNetModel(config), _ids(batch_size)


def gemma3n_text(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """Gemma 3n's 4-layer text model over 64 tokens: four AltUp streams predicted and corrected around each layer,
    a rank-16 laurel branch beside attention, per-layer input embeddings, sliding (32) and full attention
    alternating, a tanh-GELU gated feed-forward."""
    from transformers import Gemma3nTextConfig, Gemma3nTextModel

    config = Gemma3nTextConfig(vocab_size=1000, vocab_size_per_layer_input=1000, hidden_size=128,
                               hidden_size_per_layer_input=32, intermediate_size=256, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_kv_shared_layers=0,
                               laurel_rank=16, altup_num_inputs=4, activation_sparsity_pattern=[0.0] * 4,
                               layer_types=["sliding_attention", "full_attention"] * 2, sliding_window=32,
                               use_cache=False)
    return Gemma3nTextModel(config), _ids(batch_size)


def qwen3_next(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Qwen3-Next over 64 tokens: three Gated DeltaNet layers (a short causal convolution, the delta
    rule in PyTorch's chunked form, a gated RMS norm) and one gated full-attention layer; every layer's
    feed-forward routes to 2 of 4 experts beside a shared one."""
    from transformers import Qwen3NextConfig, Qwen3NextModel

    config = Qwen3NextConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_value_heads=4,
                             linear_num_key_heads=2, linear_key_head_dim=32, linear_value_head_dim=32, num_experts=4,
                             num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=64,
                             use_cache=False)
    return Qwen3NextModel(config), _ids(batch_size)


def clap_audio(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """CLAP's audio encoder (HTSAT) on 256 frames of a 64-bin mel spectrogram folded into a 128×128 square: a
    batch norm over the bins, 4-pixel patches, four Swin stages (windows of 4) with patch merging."""
    from transformers import ClapAudioConfig, ClapAudioModel

    config = ClapAudioConfig(spec_size=128, patch_size=4, num_mel_bins=64, hidden_size=256,
                             patch_embeds_hidden_size=32, depths=[1, 1, 2, 1], num_attention_heads=[2, 2, 4, 8],
                             window_size=4, enable_fusion=False)
    return ClapAudioModel(config), (torch.randn(batch_size, 1, 256, 64),)


def vjepa2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """V-JEPA 2's 2-layer video encoder on 4 frames of 64×64 (the predictor skipped): 2×16×16 tubelets from a 3-D
    convolution, rotary positions split over time, height and width."""
    from transformers import VJEPA2Config, VJEPA2Model

    config = VJEPA2Config(crop_size=64, frames_per_clip=4, tubelet_size=2, patch_size=16, hidden_size=128,
                          num_hidden_layers=2, num_attention_heads=4, mlp_ratio=4.0, pred_hidden_size=64,
                          pred_num_hidden_layers=1, pred_num_attention_heads=4)
    return VJEPA2Model(config), (torch.randn(batch_size, 4, 3, 64, 64), None, None, True)


def longt5_encoder(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """LongT5's 2-layer encoder over 128 tokens: local attention in blocks of 16 that see their neighbours,
    relative position buckets, T5's RMS norm and ReLU feed-forward."""
    from transformers import LongT5Config, LongT5EncoderModel

    config = LongT5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=512, num_layers=2, num_heads=4,
                          local_radius=16, encoder_attention_type="local", use_cache=False)
    (ids,) = _ids(batch_size, 128)
    return LongT5EncoderModel(config), (ids, torch.ones_like(ids))


TWENTY_NINTH = ("apertus", "bitnet", "gemma3n_text", "qwen3_next", "clap_audio", "vjepa2", "longt5_encoder")


def sam2_hiera(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """SAM 2's Hiera image encoder on 128×128: four stages of 1, 2, 3, 1 blocks (32 to 256 channels), windowed
    attention with max-pooled queries where a stage begins, one global block."""
    from transformers import Sam2HieraDetConfig, Sam2HieraDetModel

    config = Sam2HieraDetConfig(hidden_size=32, num_attention_heads=1, blocks_per_stage=[1, 2, 3, 1],
                                image_size=[128, 128], window_size_per_stage=[4, 4, 4, 4], global_attention_blocks=[5],
                                embed_dim_per_stage=[32, 64, 128, 256], num_attention_heads_per_stage=[1, 2, 4, 8])
    return Sam2HieraDetModel(config), (torch.randn(batch_size, 3, 128, 128),)


def kimi_linear(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Kimi Linear over 64 tokens: three Kimi Delta Attention layers (the gated delta rule in PyTorch's
    chunked form, short convolutions) and one multi-head latent attention layer; routed experts after the first."""
    from transformers import KimiLinearConfig, KimiLinearModel

    config = KimiLinearConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=4, moe_intermediate_size=64, kv_lora_rank=32,
                              q_lora_rank=None, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=32,
                              num_local_experts=4, num_experts_per_tok=2, linear_head_dim=32, linear_num_heads=4,
                              layer_types=["linear_attention"] * 3 + ["full_attention"], pad_token_id=0,
                              bos_token_id=1, eos_token_id=2, use_cache=False)
    return KimiLinearModel(config), _ids(batch_size)


def cohere2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Cohere 2 over 64 tokens: attention and feed-forward in parallel off one layer norm, three
    sliding-window layers (32) then a full one without rotary positions."""
    from transformers import Cohere2Config, Cohere2Model

    config = Cohere2Config(vocab_size=1000, hidden_size=128, intermediate_size=512, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=32, use_cache=False)
    return Cohere2Model(config), _ids(batch_size)


def timesfm(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """TimesFM's 3-layer decoder on 512 past values: patches of 32 normalised and embedded by a residual MLP,
    a frequency embedding, causal attention with a learned per-dimension query scale."""
    from transformers import TimesFmConfig, TimesFmModel

    config = TimesFmConfig(patch_length=32, context_length=512, horizon_length=128, hidden_size=128,
                           intermediate_size=256, num_hidden_layers=3, num_attention_heads=4, head_dim=32)
    return TimesFmModel(config), (torch.randn(batch_size, 512), torch.zeros(batch_size, 512),
                                  torch.zeros(batch_size, 1, dtype=torch.long))


def minimax(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer MiniMax over 64 tokens: lightning attention (linear attention with decay, in blocks of 16) and
    softmax attention alternating, residuals scaled per kind, routed experts (2 of 4) in every layer."""
    from transformers import MiniMaxConfig, MiniMaxModel

    config = MiniMaxConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_local_experts=4,
                           num_experts_per_tok=2, block_size=16, use_cache=False)
    return MiniMaxModel(config), _ids(batch_size)


def esmc(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """ESM C's 3-layer protein encoder over 64 residues: a 64-token vocabulary, layer norms on queries and keys,
    rotary positions, a SwiGLU feed-forward, residuals scaled by depth."""
    from transformers import EsmcConfig, EsmcModel

    config = EsmcConfig(hidden_size=128, intermediate_size=512, head_dim=32, num_hidden_layers=3, num_attention_heads=4)
    return EsmcModel(config), (torch.randint(4, 20, (batch_size, 64)),)


THIRTIETH = ("sam2_hiera", "kimi_linear", "cohere2", "timesfm", "minimax", "esmc")
