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

The fifteenth (``FIFTEENTH``) was written on 2026-11-28 at 08:10 UTC, on the Zen 4 EPYC (cpu family 25,
model 17), before that CPU's model was trained on activations, pointwise chains, channels-last maps and
HuBERT: a VideoMAE (3-D convolution tubelets, which no sweep times), a CLIP vision tower (quick GELU, a
sigmoid chain), TextNet (asymmetric 3×1 and 1×3 kernels), Gemma 2 (tanh GELU and tanh logit
soft-capping) and WavLM (gated relative position bias over a 1-D convolution stem).

The sixteenth (``SIXTEENTH``) was written on 2026-11-28 at 10:00 UTC, on the Zen 4, after
``layers_alone.py`` found the sweep's ``conv2d`` grid stops at 256 channels and 7×7 maps, and before any
wider convolution was profiled: RT-DETR's ResNet-vd backbones end with 512–2,048 channels on 2×2 and 3×3 maps.
Scored that day, its architecture has been a tuning family since (``resnet_vd`` in ``costmodel/tuning_set.py``,
at other sizes): it no longer counts as held out.

The seventeenth (``SEVENTEENTH``) was written on 2026-11-28 at 10:53 UTC, on the Zen 4, after the sixteenth
had been scored and before any wide convolution or tuning family for them entered a model: DETR and
MaskFormer on bottleneck ResNets up to 2,048 and 1,024 channels (2×2 maps last), Conditional DETR on a
basic-block ResNet to 512 channels (3×3), YOLOS (a ViT with detection tokens), a SigLIP vision tower and a
Qwen3 decoder (RMSNorm on queries and keys).

The eighteenth (``EIGHTEENTH``) was written on 2026-11-28 at 11:50 UTC, on the Zen 4, after the sweep had
timed small Snake chains and found DAC's priced right alone but raised 2.6× by the in-model correction, and
before any tuning family with Snake activations: the DAC-style audio encoder of Perception Encoder Audio
(Snake1d) and Xcodec2's acoustic encoder (BigVGAN-style anti-aliased SnakeBeta: each activation between a
2× upsampling and a 2× downsampling filter).

The nineteenth (``NINETEENTH``) was written on 2026-11-28 at 12:46 UTC, on the Zen 4, after 20 of the
Zen 4's ``conv2d`` sweep shapes of 2026-11-23, timed again idle, ran 0.68× their recorded time, and before
any of those rows was replaced: BEiT with a UperNet segmentation head (3×3 convolutions on pyramid maps),
MobileNetV2 with a DeepLabV3 head (dilated and pooled branches) and ViViT (3-D tubelets).

The twentieth (``TWENTIETH``) was written on 2026-11-28 at 19:46 UTC, on the Zen 4, before the Zen 4's
remaining rows of 2026-11-23 (sweep and in-model, taken beside other engineers' tests) were timed again:
SwinV2 (cosine attention, a log-spaced continuous position bias MLP), FNet (Fourier token mixing: an
``aten.fft_fftn`` and a real part in place of attention), an Audio Spectrogram Transformer (overlapping
16×16 patches of a mel spectrogram), Persimmon (squared-ReLU MLP, LayerNorm on queries and keys, partial
rotary), PatchTSMixer (MLP mixing over patches, features and channels of a time series) and SuperPoint's
encoder (VGG-style 3×3 convolutions, 64-128 channels, on 96×96 grey images).
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


def videomae(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer VideoMAE encoder: 8 frames of 32×32 cut into 2×8×8 tubelets by a 3-D convolution, then
    joint space-time attention over 32 tokens."""
    from transformers import VideoMAEConfig, VideoMAEModel

    config = VideoMAEConfig(image_size=32, patch_size=8, num_frames=8, tubelet_size=2, hidden_size=96,
                            num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
    return VideoMAEModel(config), (torch.randn(batch_size, 8, 3, 32, 32),)


def clip_vision(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer CLIP vision tower (pre-LayerNorm, quick GELU ``x·sigmoid(1.702x)``, class token), 64×64
    images in 8×8 patches."""
    from transformers import CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(image_size=64, patch_size=8, hidden_size=128, intermediate_size=512,
                              num_hidden_layers=4, num_attention_heads=4, hidden_act="quick_gelu")
    return CLIPVisionModel(config), (torch.randn(batch_size, 3, 64, 64),)


def textnet(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A TextNet backbone (re-parameterisable conv-BN-ReLU blocks with 3×3, 3×1 and 1×3 kernels), 96×96
    images."""
    from transformers import TextNetConfig, TextNetModel

    config = TextNetConfig(stem_out_channels=32,
                           conv_layer_kernel_sizes=[[[3, 3], [3, 3]], [[3, 3], [1, 3], [3, 1]],
                                                    [[3, 3], [3, 1], [1, 3]], [[3, 3], [1, 3]]],
                           conv_layer_strides=[[1, 2], [2, 1, 1], [2, 1, 1], [2, 1]],
                           hidden_sizes=[32, 32, 64, 128, 256])
    return TextNetModel(config), (torch.randn(batch_size, 3, 96, 96),)


def gemma2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Gemma 2 decoder (sandwich RMSNorms, tanh-approximated GELU gate, attention and logit
    soft-capping by tanh, alternating sliding-window layers), 64 tokens."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(vocab_size=2000, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=32,
                          max_position_embeddings=256, use_cache=False)
    return Gemma2ForCausalLM(config), (torch.randint(0, 2000, (batch_size, 64)),)


def wavlm(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer WavLM encoder (strided 1-D convolution stem, grouped positional convolution, gated
    relative position bias in attention), 0.5 s of 16 kHz audio."""
    from transformers import WavLMConfig, WavLMModel

    config = WavLMConfig(hidden_size=96, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                         conv_dim=(64, 64, 64, 64, 64, 64, 64), num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=4, num_buckets=64, max_bucket_distance=200)
    return WavLMModel(config), (torch.randn(batch_size, 8000),)


FIFTEENTH = ("videomae", "clip_vision", "textnet", "gemma2", "wavlm")


def rt_detr_resnet50(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """RT-DETR's ResNet-vd backbone, bottleneck blocks up to 2,048 channels (a 3-convolution stem, average
    pooled shortcuts), 64×64 images: its last stage runs on 2×2 maps."""
    from transformers import RTDetrResNetBackbone, RTDetrResNetConfig

    config = RTDetrResNetConfig(embedding_size=32, hidden_sizes=[256, 512, 1024, 2048], depths=[1, 1, 2, 1],
                                layer_type="bottleneck", out_features=["stage4"])
    return RTDetrResNetBackbone(config), (torch.randn(batch_size, 3, 64, 64),)


def rt_detr_resnet18(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """RT-DETR's ResNet-vd backbone with basic blocks up to 512 channels, 96×96 images (3×3 maps last)."""
    from transformers import RTDetrResNetBackbone, RTDetrResNetConfig

    config = RTDetrResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2],
                                layer_type="basic", out_features=["stage4"])
    return RTDetrResNetBackbone(config), (torch.randn(batch_size, 3, 96, 96),)


SIXTEENTH = ("rt_detr_resnet50", "rt_detr_resnet18")


def detr_resnet50(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """DETR on a bottleneck ResNet to 2,048 channels (2×2 maps last), then a 2+2-layer encoder-decoder with
    20 object queries and box and class heads, 64×64 images."""
    from transformers import DetrConfig, DetrForObjectDetection, ResNetConfig

    backbone = ResNetConfig(embedding_size=32, hidden_sizes=[256, 512, 1024, 2048], depths=[1, 1, 1, 1],
                            layer_type="bottleneck", out_features=["stage4"])
    config = DetrConfig(use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False,
                        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=20,
                        num_labels=10)
    return DetrForObjectDetection(config), (torch.randn(batch_size, 3, 64, 64),)


def conditional_detr_resnet34(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """Conditional DETR (conditional spatial queries) on a basic-block ResNet to 512 channels (3×3 maps
    last), 96×96 images."""
    from transformers import ConditionalDetrConfig, ConditionalDetrForObjectDetection, ResNetConfig

    backbone = ResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2],
                            layer_type="basic", out_features=["stage4"])
    config = ConditionalDetrConfig(use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False,
                                   d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                   decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                   num_queries=20, num_labels=10)
    return ConditionalDetrForObjectDetection(config), (torch.randn(batch_size, 3, 96, 96),)


def maskformer_resnet(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """MaskFormer on a bottleneck ResNet to 1,024 channels: an FPN pixel decoder over all four stages, a
    2-layer DETR decoder of 10 mask queries, 64×64 images."""
    from transformers import DetrConfig, MaskFormerConfig, MaskFormerForInstanceSegmentation, ResNetConfig

    backbone = ResNetConfig(embedding_size=32, hidden_sizes=[128, 256, 512, 1024], depths=[1, 1, 1, 1],
                            layer_type="bottleneck", out_features=["stage1", "stage2", "stage3", "stage4"])
    decoder = DetrConfig(d_model=64, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=128,
                         encoder_layers=1, num_queries=10)
    config = MaskFormerConfig(backbone_config=backbone, decoder_config=decoder, fpn_feature_size=64,
                              mask_feature_size=64, num_queries=10, num_labels=10)
    return MaskFormerForInstanceSegmentation(config), (torch.randn(batch_size, 3, 64, 64),)


def yolos(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """YOLOS: a 3-layer ViT that carries 10 detection tokens beside its patches, 64×64 images."""
    from transformers import YolosConfig, YolosForObjectDetection

    config = YolosConfig(image_size=[64, 64], patch_size=8, hidden_size=96, num_hidden_layers=3,
                         num_attention_heads=4, intermediate_size=256, num_detection_tokens=10, num_labels=10)
    return YolosForObjectDetection(config), (torch.randn(batch_size, 3, 64, 64),)


def siglip_vision(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer SigLIP vision tower (tanh GELU, attention-pooled head), 64×64 images in 8×8 patches."""
    from transformers import SiglipVisionConfig, SiglipVisionModel

    config = SiglipVisionConfig(image_size=64, patch_size=8, hidden_size=128, intermediate_size=512,
                                num_hidden_layers=3, num_attention_heads=4)
    return SiglipVisionModel(config), (torch.randn(batch_size, 3, 64, 64),)


def qwen3(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Qwen3 decoder (RMSNorm on queries and keys, grouped-query attention, SwiGLU), 64 tokens."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=2000, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                         use_cache=False)
    return Qwen3ForCausalLM(config), (torch.randint(0, 2000, (batch_size, 64)),)


SEVENTEENTH = ("detr_resnet50", "conditional_detr_resnet34", "maskformer_resnet", "yolos", "siglip_vision", "qwen3")


def pe_audio_dac(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """Perception Encoder Audio's DAC-style encoder: strided 1-D convolutions, residual units with Snake
    activations (``x + 1/α·sin²(αx)``), 0.25 s of 16 kHz audio."""
    from transformers import DacConfig
    from transformers.models.pe_audio.modeling_pe_audio import PeAudioDacEncoder

    config = DacConfig(encoder_hidden_size=16, downsampling_ratios=[2, 4, 4], hidden_size=128)
    return PeAudioDacEncoder(config), (torch.randn(batch_size, 1, 4000),)


def xcodec2_encoder(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """Xcodec2's acoustic encoder: 1-D convolutions with anti-aliased SnakeBeta activations (2× up, Snake,
    2× down by fixed filters), 0.25 s of 16 kHz audio."""
    from transformers import Xcodec2Config
    from transformers.models.xcodec2.modeling_xcodec2 import Xcodec2Encoder

    config = Xcodec2Config(encoder_hidden_size=16, downsampling_ratios=[2, 4, 4], hidden_size=128)
    return Xcodec2Encoder(config), (torch.randn(batch_size, 1, 4000),)


EIGHTEENTH = ("pe_audio_dac", "xcodec2_encoder")


def beit_segmentation(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer BEiT (relative position biases) with a UperNet head: a pyramid of its layers' maps, pooled
    at scales 1-3, fused by 3×3 convolutions, 64×64 images."""
    from transformers import BeitConfig, BeitForSemanticSegmentation

    config = BeitConfig(image_size=64, patch_size=8, hidden_size=96, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=256, out_indices=[1, 2, 3, 4], use_relative_position_bias=True,
                        pool_scales=[1, 2, 3], auxiliary_channels=64, num_labels=8, use_auxiliary_head=False)
    return BeitForSemanticSegmentation(config), (torch.randn(batch_size, 3, 64, 64),)


def mobilenet_v2_deeplab(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """MobileNetV2 at width 0.75 with a DeepLabV3 head (atrous and pooled branches), 96×96 images."""
    from transformers import MobileNetV2Config, MobileNetV2ForSemanticSegmentation

    config = MobileNetV2Config(image_size=96, depth_multiplier=0.75, num_labels=8)
    return MobileNetV2ForSemanticSegmentation(config), (torch.randn(batch_size, 3, 96, 96),)


def vivit(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer ViViT: 8 frames of 32×32 cut into 2×8×8 tubelets by a 3-D convolution, a class token."""
    from transformers import VivitConfig, VivitModel

    config = VivitConfig(image_size=32, num_frames=8, tubelet_size=[2, 8, 8], hidden_size=96, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=256)
    return VivitModel(config), (torch.randn(batch_size, 8, 3, 32, 32),)


NINETEENTH = ("beit_segmentation", "mobilenet_v2_deeplab", "vivit")


def swinv2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-stage SwinV2 (cosine attention in 4×4 windows, continuous position bias MLP), 64×64 images."""
    from transformers import Swinv2Config, Swinv2Model

    config = Swinv2Config(image_size=64, patch_size=4, embed_dim=48, depths=[2, 2, 2], num_heads=[2, 4, 8],
                          window_size=4)
    return Swinv2Model(config), (torch.randn(batch_size, 3, 64, 64),)


def fnet(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer FNet encoder: a 2-D FFT over tokens and features (real part kept) mixes tokens, 64 tokens."""
    from transformers import FNetConfig, FNetModel

    config = FNetConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=4, intermediate_size=512,
                        max_position_embeddings=128, use_tpu_fourier_optimizations=False)
    return FNetModel(config), (torch.randint(0, 1000, (batch_size, 64)),)


def audio_spectrogram_transformer(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-layer Audio Spectrogram Transformer: 128 frames × 64 mel bins cut into overlapping 16×16 patches
    (stride 10), two class tokens."""
    from transformers import ASTConfig, ASTModel

    config = ASTConfig(hidden_size=96, num_hidden_layers=3, num_attention_heads=4, intermediate_size=256,
                       max_length=128, num_mel_bins=64, frequency_stride=10, time_stride=10)
    return ASTModel(config), (torch.randn(batch_size, 128, 64),)


def persimmon(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Persimmon decoder (squared-ReLU MLP, LayerNorm on queries and keys, partial rotary), 64
    tokens."""
    from transformers import PersimmonConfig, PersimmonForCausalLM

    config = PersimmonConfig(vocab_size=1000, hidden_size=128, intermediate_size=512, num_hidden_layers=4,
                             num_attention_heads=4, max_position_embeddings=256, use_cache=False)
    return PersimmonForCausalLM(config), (torch.randint(0, 1000, (batch_size, 64)),)


def patchtsmixer(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer PatchTSMixer (gated MLPs mixing patches, features and channels), 256 steps of 7 channels in
    patches of 16."""
    from transformers import PatchTSMixerConfig, PatchTSMixerModel

    config = PatchTSMixerConfig(context_length=256, patch_length=16, patch_stride=8, num_input_channels=7,
                                d_model=64, num_layers=4, mode="mix_channel")
    return PatchTSMixerModel(config), (torch.randn(batch_size, 256, 7),)


def superpoint_encoder(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """SuperPoint's encoder: four VGG-style blocks of two 3×3 convolutions (64-128 channels) and max pools,
    96×96 grey images."""
    from transformers import SuperPointConfig, SuperPointForKeypointDetection

    return SuperPointForKeypointDetection(SuperPointConfig()).encoder, (torch.randn(batch_size, 1, 96, 96),)


TWENTIETH = ("swinv2", "fnet", "audio_spectrogram_transformer", "persimmon", "patchtsmixer", "superpoint_encoder")
