"""Held-out sets from the fourteenth on (``heldout_models.py`` holds the first thirteen and says why each
was written when it was).

The fourteenth (``FOURTEENTH``) was written on 2026-11-28 at 05:14 UTC, on the Xeon (cpu family 6,
model 167), before that CPU's model was retrained on the kinds the other CPUs had gained since
2026-11-23 (1-D convolutions, unfolds, resizes, activations, chains of pointwise operators,
channels-last maps, HuBERT in the tuning set), and before any rule about dilated convolutions: its
MobileViT segmenter's ASPP head convolves with dilations 6, 12 and 18, which no sweep shape has. All
are small ``transformers`` configs with random weights, none in the zoo, ``tests/tiny_models.py``, the
tuning set ``costmodel/tuning_set.py``, ``model_profile.py`` or ``heldout_models.py``. Each factory is a
valid MODEL (``benchmarks/heldout_models_more.py:bit``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def mobilevit_deeplab(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A MobileViT segmenter with a DeepLabV3 head (MobileNet blocks and small transformers on unfolded
    patches, then atrous convolutions at dilations 6, 12 and 18 and a pooled branch), 64×64 images."""
    from transformers import MobileViTConfig, MobileViTForSemanticSegmentation

    config = MobileViTConfig(image_size=64, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 16, 24, 24, 32, 48, 160],
                             aspp_out_channels=32, atrous_rates=[6, 12, 18], num_labels=8)
    return MobileViTForSemanticSegmentation(config), (torch.randn(batch_size, 3, 64, 64),)


def bit(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A BiT (ResNetV2) backbone: weight-standardised convolutions (each weight normalised in every
    forward), group norm with activation, TF-style "SAME" padding, 64×64 images."""
    from transformers import BitConfig, BitModel

    config = BitConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1],
                       layer_type="bottleneck", global_padding="SAME", num_groups=8)
    return BitModel(config), (torch.randn(batch_size, 3, 64, 64),)


def timesformer(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer TimeSformer video transformer (divided attention: over time per patch, then over space
    per frame), 4 frames of 32×32."""
    from transformers import TimesformerConfig, TimesformerModel

    config = TimesformerConfig(image_size=32, patch_size=8, num_frames=4, hidden_size=64, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=128)
    return TimesformerModel(config), (torch.randn(batch_size, 4, 3, 32, 32),)


def cohere(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Cohere decoder (attention and MLP in parallel from one bias-free LayerNorm, grouped-query
    attention, interleaved rotary, scaled logits), 64 tokens."""
    from transformers import CohereConfig, CohereForCausalLM

    config = CohereConfig(vocab_size=2000, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                          pad_token_id=0, bos_token_id=1, eos_token_id=2, use_cache=False)
    return CohereForCausalLM(config), (torch.randint(0, 2000, (batch_size, 64)),)


FOURTEENTH = ("mobilevit_deeplab", "bit", "timesformer", "cohere")
