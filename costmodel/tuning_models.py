"""The architectures of the tuning set (:mod:`pipeplan.costmodel.tuning_set`): small ``transformers`` models
with random weights, each a factory ``(batch_size, size options…) -> (model, inputs)``, nothing downloaded.

Kept apart from the sizes they are profiled at and the profiling itself, which :mod:`~pipeplan.costmodel.tuning_set`
holds; every factory is still a MODEL there (``pipeplan.costmodel.tuning_set:opt``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

Built = tuple[nn.Module, tuple[Any, ...]]


def _ids(batch_size: int, seq_len: int, vocab: int = 1000) -> torch.Tensor:
    return torch.randint(0, vocab, (batch_size, seq_len))


def _images(batch_size: int, image_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 3, image_size, image_size)


def opt(batch_size: int = 2, seq_len: int = 64, width: int = 128) -> Built:
    """OPT decoder (learned positions, ReLU MLP), 3 layers."""
    from transformers import OPTConfig, OPTForCausalLM

    config = OPTConfig(vocab_size=1000, hidden_size=width, num_hidden_layers=3, ffn_dim=4 * width,
                       num_attention_heads=max(2, width // 64), max_position_embeddings=512,
                       word_embed_proj_dim=width, use_cache=False)
    return OPTForCausalLM(config), (_ids(batch_size, seq_len),)


def llama(batch_size: int = 2, seq_len: int = 64, width: int = 128) -> Built:
    """Llama decoder (RMSNorm, rotary, SwiGLU, grouped-query attention), 3 layers."""
    from transformers import LlamaConfig, LlamaForCausalLM

    heads = max(2, width // 32)
    config = LlamaConfig(vocab_size=1000, hidden_size=width, intermediate_size=int(2.75 * width),
                         num_hidden_layers=3, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                         max_position_embeddings=512, use_cache=False)
    return LlamaForCausalLM(config), (_ids(batch_size, seq_len),)


def bloom(batch_size: int = 2, seq_len: int = 64, width: int = 128) -> Built:
    """BLOOM decoder (ALiBi attention biases, fused QKV), 3 layers."""
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(vocab_size=1000, hidden_size=width, n_layer=3, n_head=max(2, width // 64),
                         use_cache=False)
    return BloomForCausalLM(config), (_ids(batch_size, seq_len),)


def phi(batch_size: int = 2, seq_len: int = 64, width: int = 128) -> Built:
    """Phi decoder (partial rotary, parallel attention and MLP), 3 layers."""
    from transformers import PhiConfig, PhiForCausalLM

    config = PhiConfig(vocab_size=1000, hidden_size=width, intermediate_size=4 * width, num_hidden_layers=3,
                       num_attention_heads=max(2, width // 32), max_position_embeddings=512, use_cache=False)
    return PhiForCausalLM(config), (_ids(batch_size, seq_len),)


def hubert(batch_size: int = 2, samples: int = 8000, width: int = 64) -> Built:
    """HuBERT: seven strided 1-D convolutions over raw audio (group norm, GELU), a grouped, weight-normed
    positional 1-D convolution, then 2 transformer layers."""
    from transformers import HubertConfig, HubertModel

    config = HubertConfig(hidden_size=width, num_hidden_layers=2, num_attention_heads=2, intermediate_size=2 * width,
                          conv_dim=(width,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    return HubertModel(config), (torch.randn(batch_size, samples),)


def bigvgan(batch_size: int = 2, frames: int = 32, width: int = 128) -> Built:
    """Qwen2.5-Omni's BigVGAN vocoder: transposed 1-D convolutions up 32×, residual blocks of dilated 1-D
    convolutions whose SnakeBeta activations (``x + 1/β·sin²(αx)``) run between a 2× upsampling and a 2×
    downsampling filter, from a 32-band mel spectrogram."""
    from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniBigVGANConfig
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniToken2WavBigVGANModel

    config = Qwen2_5OmniBigVGANConfig(mel_dim=32, upsample_initial_channel=width, resblock_kernel_sizes=[3, 7],
                                      resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5]], upsample_rates=[4, 4, 2],
                                      upsample_kernel_sizes=[8, 8, 4])
    return Qwen2_5OmniToken2WavBigVGANModel(config), (torch.randn(batch_size, 32, frames),)


def mixtral(batch_size: int = 2, seq_len: int = 64, width: int = 128, experts: int = 8) -> Built:
    """Mixtral decoder (each token routed to 2 of ``experts`` SwiGLU experts, grouped-query attention), 2 layers."""
    from transformers import MixtralConfig, MixtralForCausalLM

    heads = max(2, width // 32)
    config = MixtralConfig(vocab_size=1000, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2,
                           num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                           num_local_experts=experts, num_experts_per_tok=2, max_position_embeddings=512,
                           use_cache=False)
    return MixtralForCausalLM(config), (_ids(batch_size, seq_len),)


def roberta(batch_size: int = 2, seq_len: int = 64, width: int = 128) -> Built:
    """RoBERTa encoder with a masked-LM head, 3 layers."""
    from transformers import RobertaConfig, RobertaForMaskedLM

    config = RobertaConfig(vocab_size=1000, hidden_size=width, num_hidden_layers=3,
                           num_attention_heads=max(2, width // 64), intermediate_size=4 * width,
                           max_position_embeddings=520)
    return RobertaForMaskedLM(config), (_ids(batch_size, seq_len),)


def albert(batch_size: int = 2, seq_len: int = 64, width: int = 128) -> Built:
    """ALBERT encoder (factorised embeddings, one shared layer run 3 times)."""
    from transformers import AlbertConfig, AlbertForMaskedLM

    config = AlbertConfig(vocab_size=1000, embedding_size=64, hidden_size=width, num_hidden_layers=3,
                          num_attention_heads=max(2, width // 64), intermediate_size=4 * width)
    return AlbertForMaskedLM(config), (_ids(batch_size, seq_len),)


def electra(batch_size: int = 2, seq_len: int = 64, width: int = 128) -> Built:
    """ELECTRA discriminator, 3 layers."""
    from transformers import ElectraConfig, ElectraForPreTraining

    config = ElectraConfig(vocab_size=1000, embedding_size=width, hidden_size=width, num_hidden_layers=3,
                           num_attention_heads=max(2, width // 64), intermediate_size=4 * width)
    return ElectraForPreTraining(config), (_ids(batch_size, seq_len),)


def deit(batch_size: int = 2, image_size: int = 64, width: int = 128) -> Built:
    """DeiT (ViT with a distillation token), patch 8, 3 layers."""
    from transformers import DeiTConfig, DeiTForImageClassification

    config = DeiTConfig(image_size=image_size, patch_size=8, hidden_size=width, num_hidden_layers=3,
                        num_attention_heads=max(2, width // 64), intermediate_size=4 * width)
    return DeiTForImageClassification(config), (_images(batch_size, image_size),)


def beit(batch_size: int = 2, image_size: int = 64, width: int = 128) -> Built:
    """BEiT (relative position biases, layer scale), patch 8, 3 layers."""
    from transformers import BeitConfig, BeitForImageClassification

    config = BeitConfig(image_size=image_size, patch_size=8, hidden_size=width, num_hidden_layers=3,
                        num_attention_heads=max(2, width // 64), intermediate_size=4 * width,
                        use_relative_position_bias=True)
    return BeitForImageClassification(config), (_images(batch_size, image_size),)


def resnet(batch_size: int = 2, image_size: int = 96, width: int = 32) -> Built:
    """ResNet with bottleneck blocks, 3 stages."""
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(embedding_size=width, hidden_sizes=[2 * width, 4 * width, 8 * width], depths=[1, 1, 1],
                          layer_type="bottleneck")
    return ResNetForImageClassification(config), (_images(batch_size, image_size),)


def resnet_basic(batch_size: int = 2, image_size: int = 64, width: int = 64) -> Built:
    """ResNet with basic blocks (two 3×3 convolutions each, as ResNet-18 and -34), 4 stages to 8 × ``width``
    channels: 3×3 convolutions of 64-512 channels on maps of 2-40 px."""
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(embedding_size=width, hidden_sizes=[width, 2 * width, 4 * width, 8 * width],
                          depths=[1, 1, 1, 1], layer_type="basic")
    return ResNetForImageClassification(config), (_images(batch_size, image_size),)


def resnet_vd(batch_size: int = 2, image_size: int = 64, width: int = 64) -> Built:
    """RT-DETR's ResNet-vd backbone (a 3-convolution stem, average-pooled shortcuts), bottleneck blocks to
    32 × ``width`` channels: its last stage runs on 1-3 px maps, where a convolution is ten times slower per
    FLOP than on 4×4 ones."""
    from transformers import RTDetrResNetBackbone, RTDetrResNetConfig

    config = RTDetrResNetConfig(embedding_size=width // 2, hidden_sizes=[4 * width, 8 * width, 16 * width, 32 * width],
                                depths=[1, 1, 2, 1], layer_type="bottleneck")  # the last stage's map out
    return RTDetrResNetBackbone(config), (_images(batch_size, image_size),)


def regnet(batch_size: int = 2, image_size: int = 96, width: int = 32) -> Built:
    """RegNet-Y (grouped convolutions, squeeze-excitation), 3 stages."""
    from transformers import RegNetConfig, RegNetForImageClassification

    config = RegNetConfig(embedding_size=width, hidden_sizes=[width, 2 * width, 4 * width], depths=[1, 2, 1],
                          groups_width=8, layer_type="y")
    return RegNetForImageClassification(config), (_images(batch_size, image_size),)


def efficientnet(batch_size: int = 2, image_size: int = 96, width: int = 32) -> Built:
    """EfficientNet (depthwise MBConv blocks, squeeze-excitation, SiLU), shrunk."""
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    # The head's width is round_filters(1280) as the model computes it: a multiple of 8 of 1280 × width.
    config = EfficientNetConfig(image_size=image_size, width_coefficient=width / 64, depth_coefficient=0.4,
                                hidden_dim=max(8, int(1280 * width / 64 + 4) // 8 * 8))
    return EfficientNetForImageClassification(config), (_images(batch_size, image_size),)


def convnextv2(batch_size: int = 2, image_size: int = 64, width: int = 32) -> Built:
    """ConvNeXt V2 (7×7 depthwise convolutions, global response norm), 3 stages."""
    from transformers import ConvNextV2Config, ConvNextV2ForImageClassification

    config = ConvNextV2Config(image_size=image_size, hidden_sizes=[width, 2 * width, 4 * width], depths=[1, 1, 2],
                              num_stages=3)
    return ConvNextV2ForImageClassification(config), (_images(batch_size, image_size),)


def poolformer(batch_size: int = 2, image_size: int = 64, width: int = 32) -> Built:
    """PoolFormer (pooling as the token mixer, group norm), 3 stages."""
    from transformers import PoolFormerConfig, PoolFormerForImageClassification

    config = PoolFormerConfig(hidden_sizes=[width, 2 * width, 4 * width], depths=[1, 1, 2],
                              num_encoder_blocks=3, patch_sizes=[7, 3, 3], strides=[4, 2, 2], padding=[2, 1, 1])
    return PoolFormerForImageClassification(config), (_images(batch_size, image_size),)


def gptj(batch_size: int = 2, seq_len: int = 64, width: int = 128) -> Built:
    """GPT-J decoder (interleaved rotary, parallel attention and MLP), 3 layers."""
    from transformers import GPTJConfig, GPTJForCausalLM

    heads = max(2, width // 64)
    config = GPTJConfig(vocab_size=1000, n_embd=width, n_layer=3, n_head=heads, rotary_dim=width // heads // 2,
                        n_positions=512, bos_token_id=0, eos_token_id=0, use_cache=False)
    return GPTJForCausalLM(config), (_ids(batch_size, seq_len),)


def mpnet(batch_size: int = 2, seq_len: int = 64, width: int = 128) -> Built:
    """MPNet encoder (relative position buckets), 3 layers."""
    from transformers import MPNetConfig, MPNetForMaskedLM

    config = MPNetConfig(vocab_size=1000, hidden_size=width, num_hidden_layers=3,
                         num_attention_heads=max(2, width // 64), intermediate_size=4 * width)
    return MPNetForMaskedLM(config), (_ids(batch_size, seq_len),)


def mobilevit(batch_size: int = 2, image_size: int = 64, width: int = 32) -> Built:
    """MobileViT (inverted residuals with depthwise convolutions, then transformer blocks on patches)."""
    from transformers import MobileViTConfig, MobileViTForImageClassification

    config = MobileViTConfig(image_size=image_size, hidden_sizes=[width, 2 * width, 3 * width],
                             neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 128], num_attention_heads=2)
    return MobileViTForImageClassification(config), (_images(batch_size, image_size),)


def segformer(batch_size: int = 2, image_size: int = 64, width: int = 32) -> Built:
    """SegFormer (overlapping patch merges, reduced-key attention, depthwise MLP convs), classifier."""
    from transformers import SegformerConfig, SegformerForImageClassification

    config = SegformerConfig(num_encoder_blocks=3, depths=[1, 1, 1], sr_ratios=[4, 2, 1],
                             hidden_sizes=[width, 2 * width, 4 * width], num_attention_heads=[1, 2, 4],
                             patch_sizes=[7, 3, 3], strides=[4, 2, 2], mlp_ratios=[4, 4, 4])
    return SegformerForImageClassification(config), (_images(batch_size, image_size),)
