"""Held-out sets from the thirty-sixth on (``heldout_models_31st.py`` holds the thirty-first to thirty-fifth, and
names the files of the earlier ones).

The thirty-sixth (``THIRTY_SIXTH``) was written on 2026-11-30 at 12:48 UTC, on a Xeon of cpu family 6, model 207,
before anything was scored on it and before the change this session judges was shipped (layers of more operators
than the sweep timed, priced past the sweep's count at the device's dispatch floor; that change had been scored on
the older sets' stored tables only): Granite 4's hybrid decoder (Mamba-2 layers beside one attention layer, every
layer's MLP a mixture of experts beside a shared expert), HRM-Text (a hierarchical recurrent decoder: one low-level
and one high-level stack of blocks, applied in cycles over the same weights), YOSO (a BERT whose attention is the
expectation of locality-sensitive-hashing collisions, a power of the angle between keys and queries), MLCD's vision
encoder (a CLIP-style ViT with 2-D rotary positions) and SLANeXt's backbone (a SAM-style ViT of windowed attention
with relative positions and two global layers, then a convolutional neck). Each was checked to build and capture;
none was timed or predicted before it went in. FastSpeech 2 with its conformer (its length regulator repeats each
phoneme a data-dependent number of times), WavTokenizer (a data-dependent guard) and the Time Series Transformer (its
decoder's cache) did not capture; RADIO's ViT captured and was left out for a set with fewer ViTs. All five were
dropped before anything was scored.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _ids(batch_size: int, seq_len: int = 64) -> tuple[torch.Tensor]:
    return (torch.randint(3, 1000, (batch_size, seq_len)),)


def granitemoe_hybrid(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Granite 4 hybrid decoder over 64 tokens, 128 wide: three Mamba-2 layers (8 heads of 32, state 16,
    chunks of 32) and one grouped-query attention layer, each followed by 4 experts (2 per token) beside a
    shared MLP."""
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridModel

    config = GraniteMoeHybridConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                                    num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                    num_experts_per_tok=2, shared_intermediate_size=256,
                                    layer_types=["mamba", "mamba", "attention", "mamba"], mamba_n_heads=8,
                                    mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1, mamba_chunk_size=32,
                                    use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return GraniteMoeHybridModel(config), _ids(batch_size)


def hrm_text(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """HRM-Text over 64 tokens, 128 wide: a low-level and a high-level stack of one block each, run 2 high-level
    cycles of 2 low-level steps and one high-level step, the same weights each time."""
    from transformers import HrmTextConfig, HrmTextModel

    config = HrmTextConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                           num_attention_heads=4, num_key_value_heads=4, H_cycles=2, L_cycles=2, use_cache=False,
                           pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return HrmTextModel(config), _ids(batch_size)


def yoso(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer YOSO encoder over 64 tokens, 128 wide: attention weights are the expected hash collisions of unit
    keys and queries, ``(1 - arccos(q·k)/π)^τ``, not a softmax."""
    from transformers import YosoConfig, YosoModel

    config = YosoConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=256, max_position_embeddings=130, use_expectation=True)
    return YosoModel(config), _ids(batch_size)


def mlcd_vision(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """MLCD's 4-layer vision encoder on a 112×112 image, 14×14 patches, 128 wide: a class token and 2-D rotary
    positions in every attention."""
    from transformers import MLCDVisionConfig, MLCDVisionModel

    config = MLCDVisionConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                              image_size=112, patch_size=14)
    return MLCDVisionModel(config), (torch.randn(batch_size, 3, 112, 112),)


def slanext_backbone(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """SLANeXt's backbone on a 128×128 table image: a 4-layer SAM-style ViT (windows of 4×4 patches with decomposed
    relative positions, layers 1 and 3 global), a convolutional neck to 64 channels, then a post convolution."""
    from transformers import SLANeXtConfig, SLANeXtVisionConfig
    from transformers.models.slanext.modeling_slanext import SLANeXtBackbone

    vision = SLANeXtVisionConfig(hidden_size=128, output_channels=64, num_hidden_layers=4, num_attention_heads=4,
                                 image_size=128, patch_size=16, window_size=4, global_attn_indexes=[1, 3],
                                 mlp_dim=256)
    config = SLANeXtConfig(vision_config=vision, post_conv_in_channels=64, post_conv_out_channels=128)
    return SLANeXtBackbone(config), (torch.randn(batch_size, 3, 128, 128),)


THIRTY_SIXTH = ("granitemoe_hybrid", "hrm_text", "yoso", "mlcd_vision", "slanext_backbone")
