"""Held-out sets: architectures no rule, cost model or benchmark of pipeplan had seen before.

``model_profile.py``'s seven models have been scored by several rules since 2026-11-23 (cost models,
the wake model, the as-run choice), so a rule fixed after looking at them cannot be judged on them.
The first three here (Qwen2, DINOv2, SqueezeBERT) were written on 2026-11-24 after the as-run
choice's last change (a message to or from a loaded core waits for both ends,
``executor/as_run.py``), and scored once with it; the second three (``THIRD``:
GPTBigCode, ConvBERT, PVTv2) while the wake model's share of the credit in a pipeline was being
measured, and scored once after it was fixed; the fourth (``FOURTH``: a Whisper encoder,
Wav2Vec2-Conformer, Mamba, LFM2) before the sweep had 1-D convolutions, the fifth (``FIFTH``) to
judge the 1-D rows on 2-D depthwise convolutions, the sixth (``SIXTH``) before the sweep timed
unfolds, the seventh (``SEVENTH``) before it timed resizing and transposed convolutions, the eighth
(``EIGHTH``) before the Zen 4's profile had 1-D convolution and unfold rows, the ninth (``NINTH``)
before resizes became layers of their own, the tenth (``TENTH``) before the sweep timed activations
on 3-D and 4-D maps, the eleventh (``ELEVENTH``) before layers recorded their input's memory layout,
the twelfth (``TWELFTH``) before the tuning set held a model with 1-D convolutions, the thirteenth
(``THIRTEENTH``) before the sweep timed chains of pointwise operators. All are small
``transformers`` configs with random weights, none in the zoo, ``tests/tiny_models.py``, the tuning
set ``costmodel/tuning_set.py`` or ``model_profile.py``. Each factory is a valid MODEL
(``benchmarks/heldout_models.py:qwen2``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

SEQ = 64


def qwen2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Qwen2 decoder (grouped-query attention with biased q/k/v, SwiGLU, RMSNorm), 64 tokens."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=2000, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, use_cache=False)
    return Qwen2ForCausalLM(config), (torch.randint(0, 2000, (batch_size, SEQ)),)


def dinov2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer DINOv2 vision transformer (layer scale, interpolated position embeddings), 64×64 images."""
    from transformers import Dinov2Config, Dinov2Model

    config = Dinov2Config(image_size=64, patch_size=8, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                          mlp_ratio=4)
    return Dinov2Model(config), (torch.randn(batch_size, 3, 64, 64),)


def squeezebert(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer SqueezeBERT masked LM (grouped 1-D convolutions in place of dense projections), 64 tokens."""
    from transformers import SqueezeBertConfig, SqueezeBertForMaskedLM

    config = SqueezeBertConfig(vocab_size=2000, hidden_size=128, embedding_size=128, num_hidden_layers=4,
                               num_attention_heads=4, intermediate_size=512, max_position_embeddings=256)
    return SqueezeBertForMaskedLM(config), (torch.randint(0, 2000, (batch_size, SEQ)),)


MODELS = ("qwen2", "dinov2", "squeezebert")


# A third held-out set, written on 2026-11-24 at 14:20 UTC while the wake probe measured the share of
# its credit a loaded stage earns in a pipeline (``costmodel/wake_pipeline.py``), and scored once
# after that rule was fixed on the development models: the two sets above had been run by then.


def gpt_bigcode(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer GPTBigCode decoder (multi-query attention, learned positions, GELU MLP), 64 tokens."""
    from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM

    config = GPTBigCodeConfig(vocab_size=2000, n_positions=256, n_embd=128, n_layer=4, n_head=4,
                              multi_query=True, use_cache=False)
    return GPTBigCodeForCausalLM(config), (torch.randint(0, 2000, (batch_size, SEQ)),)


def convbert(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer ConvBERT masked LM (span-based dynamic convolution heads beside self-attention), 64 tokens."""
    from transformers import ConvBertConfig, ConvBertForMaskedLM

    config = ConvBertConfig(vocab_size=2000, hidden_size=128, embedding_size=128, num_hidden_layers=4,
                            num_attention_heads=4, intermediate_size=512, max_position_embeddings=256)
    return ConvBertForMaskedLM(config), (torch.randint(0, 2000, (batch_size, SEQ)),)


def pvt_v2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-stage PVTv2 (overlapping patch embeddings, spatial-reduction attention, depthwise-conv MLP), 64×64 images."""
    from transformers import PvtV2Config, PvtV2Model

    config = PvtV2Config(image_size=64, hidden_sizes=[32, 64, 128, 160], depths=[1, 1, 1, 1],
                         num_attention_heads=[1, 2, 4, 5])
    return PvtV2Model(config), (torch.randn(batch_size, 3, 64, 64),)


THIRD = ("gpt_bigcode", "convbert", "pvt_v2")


# A fourth held-out set, written on 2026-11-24 at 19:45 UTC before the sweep had any 1-D convolution
# (``costmodel/layerspecs.py``'s ``conv1d``): architectures built on them — strided stems over audio,
# depthwise convolutions inside conformer and state-space blocks. ConvBERT and SqueezeBERT, whose misses
# led to that sweep, are its development models; these were scored without it, and with the two versions
# of it (80 and 240 dense or grouped shapes) that the development models chose between (benchmarks/README.md).


def whisper_encoder(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer Whisper encoder (two 1-D convolutions over 80 mel bins, the second strided), 128 frames."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(num_mel_bins=80, d_model=128, encoder_layers=2, encoder_attention_heads=4,
                           encoder_ffn_dim=512, max_source_positions=64)
    return WhisperEncoder(config), (torch.randn(batch_size, 80, 128),)


def wav2vec2_conformer(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer Wav2Vec2-Conformer (strided 1-D convolutions over raw audio, grouped positional
    convolution, conformer blocks with a depthwise 1-D convolution), 0.25 s of 16 kHz audio."""
    from transformers import Wav2Vec2ConformerConfig, Wav2Vec2ConformerModel

    config = Wav2Vec2ConformerConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=512, conv_dim=(64, 64, 64), conv_stride=(5, 2, 2),
                                     conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                                     num_conv_pos_embedding_groups=8, conv_depthwise_kernel_size=15,
                                     position_embeddings_type="rotary")
    return Wav2Vec2ConformerModel(config), (torch.randn(batch_size, 4000),)


def mamba(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer Mamba language model (depthwise causal 1-D convolution, selective scan on the
    reference path), 32 tokens."""
    from transformers import MambaConfig, MambaForCausalLM

    config = MambaConfig(vocab_size=2000, hidden_size=128, state_size=16, num_hidden_layers=2, expand=2,
                         conv_kernel=4, use_cache=False)
    return MambaForCausalLM(config), (torch.randint(0, 2000, (batch_size, 32)),)


def lfm2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer LFM2 decoder (gated short depthwise 1-D convolutions and grouped-query attention), 64 tokens."""
    from transformers import Lfm2Config, Lfm2ForCausalLM

    config = Lfm2Config(vocab_size=2000, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                        layer_types=["conv", "full_attention", "conv", "full_attention"], use_cache=False)
    return Lfm2ForCausalLM(config), (torch.randint(0, 2000, (batch_size, SEQ)),)


FOURTH = ("whisper_encoder", "wav2vec2_conformer", "mamba", "lfm2")


# A fifth held-out set, written on 2026-11-24 at 20:47 UTC after training's cross-validation showed the
# 1-D depthwise rows pulling 2-D depthwise predictions up (ConvNeXt V2 held out): architectures built on
# 2-D depthwise convolutions, to judge the Zen 5's model with and without the 1-D rows on them.


def focalnet(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-stage FocalNet (focal modulation: stacked depthwise 3×3 convolutions with gates), 64×64 images."""
    from transformers import FocalNetConfig, FocalNetModel

    config = FocalNetConfig(image_size=64, patch_size=4, embed_dim=32, depths=[1, 1, 2, 1], focal_levels=[2, 2, 2, 2])
    return FocalNetModel(config), (torch.randn(batch_size, 3, 64, 64),)


def swiftformer(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A SwiftFormer (depthwise 3×3 convolutional encoders and efficient additive attention), 64×64 images."""
    from transformers import SwiftFormerConfig, SwiftFormerModel

    config = SwiftFormerConfig(image_size=64, depths=[1, 1, 2, 1], embed_dims=[24, 48, 96, 160])
    return SwiftFormerModel(config), (torch.randn(batch_size, 3, 64, 64),)


def mobilevitv2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A MobileViTV2 (inverted residuals with depthwise 3×3 convolutions, separable self-attention), 64×64."""
    from transformers import MobileViTV2Config, MobileViTV2Model

    config = MobileViTV2Config(image_size=64, width_multiplier=0.5)
    return MobileViTV2Model(config), (torch.randn(batch_size, 3, 64, 64),)


FIFTH = ("focalnet", "swiftformer", "mobilevitv2")


# A sixth held-out set, written on 2026-11-24 at 21:47 UTC before the sweep timed ``aten.im2col`` and
# ``aten.col2im`` (``nn.Unfold``/``nn.Fold``), the glue that ConvBERT's miss comes from: two architectures
# that unfold images into patches, and two that do not, to see whether retraining moves anything else.
# ConvBERT (overlapping 9×1 unfolds) is the development model.


def llama4_vision(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Llama 4 vision encoder (an ``nn.Unfold`` patch embedding, 2-D rotary attention, a
    pixel-shuffle MLP), 64×64 images."""
    from transformers import Llama4VisionConfig
    from transformers.models.llama4.modeling_llama4 import Llama4VisionModel

    config = Llama4VisionConfig(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
                                image_size=64, patch_size=8, vision_output_dim=128, projector_input_dim=128,
                                projector_output_dim=128, pixel_shuffle_ratio=0.5)
    return Llama4VisionModel(config), (torch.randn(batch_size, 3, 64, 64),)


def depth_pro(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A DepthPro (overlapping image patches by ``F.unfold`` through a shared DINOv2 patch encoder, an
    image encoder, a feature fusion decoder), 2-layer 64-wide encoders, 64×64 images."""
    from transformers import DepthProConfig, DepthProModel

    encoder = dict(model_type="dinov2", hidden_size=64, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
                   image_size=32, patch_size=8)
    config = DepthProConfig(fusion_hidden_size=32, patch_size=32, intermediate_hook_ids=[1],
                            intermediate_feature_dims=[32], scaled_images_ratios=[0.5, 1.0],
                            scaled_images_overlap_ratios=[0.0, 0.25], scaled_images_feature_dims=[32, 32],
                            image_model_config=encoder, patch_model_config=encoder, fov_model_config=encoder,
                            use_fov_model=False)
    return DepthProModel(config), (torch.randn(batch_size, 3, 64, 64),)


def funnel(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 3-block Funnel Transformer (the sequence pooled between blocks, relative attention), 64 tokens."""
    from transformers import FunnelConfig, FunnelModel

    config = FunnelConfig(vocab_size=2000, block_sizes=[1, 1, 1], d_model=128, n_head=4, d_head=32, d_inner=512)
    return FunnelModel(config), (torch.randint(0, 2000, (batch_size, SEQ)),)


def gemma(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Gemma decoder (multi-query attention, GeGLU, RMSNorm with a unit offset), 64 tokens."""
    from transformers import GemmaConfig, GemmaForCausalLM

    config = GemmaConfig(vocab_size=2000, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=1, head_dim=32, use_cache=False)
    return GemmaForCausalLM(config), (torch.randint(0, 2000, (batch_size, SEQ)),)


SIXTH = ("llama4_vision", "depth_pro", "funnel", "gemma")


# A seventh held-out set, written on 2026-11-24 at 22:29 UTC before the sweep timed resizing
# (``F.interpolate``) and transposed convolutions, which DepthPro's miss in the sixth set comes from:
# DepthPro is that change's development model; these decoders upsample with both.


def dpt(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A DPT depth estimator (a 4-layer ViT, reassembled by transposed convolutions, fused with
    bilinear upsampling), 64×64 images."""
    from transformers import DPTConfig, DPTForDepthEstimation

    config = DPTConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=2, intermediate_size=128, image_size=64,
                       patch_size=8, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[16, 32, 64, 64],
                       fusion_hidden_size=32, head_in_index=-1)
    return DPTForDepthEstimation(config), (torch.randn(batch_size, 3, 64, 64),)


def glpn(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A GLPN depth estimator (a 4-stage hierarchical encoder, a decoder of bilinear upsampling and
    selective feature fusion), 64×64 images."""
    from transformers import GLPNConfig, GLPNForDepthEstimation

    config = GLPNConfig(num_encoder_blocks=4, depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 64, 128],
                        decoder_hidden_size=32, num_attention_heads=[1, 1, 2, 4])
    return GLPNForDepthEstimation(config), (torch.randn(batch_size, 3, 64, 64),)


def hifigan(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A SpeechT5 HiFi-GAN vocoder (1-D transposed convolutions upsampling 16×, dilated residual
    blocks), 32 mel frames."""
    from transformers import SpeechT5HifiGan, SpeechT5HifiGanConfig

    config = SpeechT5HifiGanConfig(model_in_dim=80, upsample_initial_channel=64, upsample_rates=[4, 4],
                                   upsample_kernel_sizes=[8, 8], resblock_kernel_sizes=[3, 7],
                                   resblock_dilation_sizes=[[1, 3], [1, 3]])
    return SpeechT5HifiGan(config), (torch.randn(batch_size, 32, 80),)


SEVENTH = ("dpt", "glpn", "hifigan")


# An eighth held-out set, written on 2026-11-25 before the Zen 4's profile got 1-D convolution and
# unfold rows (until then only the Zen 5's had them) and before any change to how glue is priced.
# 1-D convolutions (SEW's feature extractor and positional convolution), depthwise 2-D convolutions in
# attention (CvT), pixel-shuffle upsampling (Swin2SR) and a decoder with a plain GELU MLP
# (Starcoder2).


def sew(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A SEW speech encoder (a 1-D convolutional feature extractor, a grouped positional convolution,
    a sequence squeezed 2× through a 3-layer transformer and upsampled back), 0.25 s of 16 kHz audio."""
    from transformers import SEWConfig, SEWModel

    config = SEWConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=2, intermediate_size=128,
                       conv_dim=(32, 32, 32, 32, 32), conv_stride=(5, 2, 2, 2, 2), conv_kernel=(10, 3, 3, 3, 2),
                       num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, squeeze_factor=2)
    return SEWModel(config), (torch.randn(batch_size, 4000),)


def cvt(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A CvT classifier (3 stages of convolutional token embeddings, attention whose queries, keys and
    values come from depthwise 3×3 convolutions), 64×64 images."""
    from transformers import CvtConfig, CvtForImageClassification

    config = CvtConfig(embed_dim=[16, 32, 64], num_heads=[1, 2, 4], depth=[1, 2, 3], num_labels=10)
    return CvtForImageClassification(config), (torch.randn(batch_size, 3, 64, 64),)


def swin2sr(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A Swin2SR super-resolver (2 stages of shifted-window attention, pixel-shuffle upsampling 2×),
    32×32 images."""
    from transformers import Swin2SRConfig, Swin2SRForImageSuperResolution

    config = Swin2SRConfig(image_size=32, embed_dim=32, depths=[2, 2], num_heads=[2, 2], window_size=8,
                           upscale=2, upsampler="pixelshuffle")
    return Swin2SRForImageSuperResolution(config), (torch.randn(batch_size, 3, 32, 32),)


def starcoder2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Starcoder2 decoder (grouped-query attention, rotary, layer norm, a GELU MLP with
    biases), 64 tokens."""
    from transformers import Starcoder2Config, Starcoder2ForCausalLM

    config = Starcoder2Config(vocab_size=2000, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                              num_key_value_heads=2, intermediate_size=512, max_position_embeddings=256,
                              bos_token_id=0, eos_token_id=0, use_cache=False)
    return Starcoder2ForCausalLM(config), (torch.randint(0, 2000, (batch_size, SEQ)),)


EIGHTH = ("sew", "cvt", "swin2sr", "starcoder2")


# A ninth held-out set, written on 2026-11-25 before resizes (``F.interpolate``, ``nn.Upsample``)
# became layers of their own with a sweep kind: GLPN, DPT and DepthPro are that change's development
# models, these decoders upsample too.


def upernet(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A UperNet segmenter (a 4-stage ConvNeXt backbone, a pyramid pooling module and a feature
    pyramid fused by bilinear upsampling), 64×64 images."""
    from transformers import ConvNextConfig, UperNetConfig, UperNetForSemanticSegmentation

    backbone = ConvNextConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                              out_features=["stage1", "stage2", "stage3", "stage4"])
    config = UperNetConfig(backbone_config=backbone, hidden_size=32, use_auxiliary_head=False, num_labels=8)
    return UperNetForSemanticSegmentation(config), (torch.randn(batch_size, 3, 64, 64),)


def depth_anything(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A Depth Anything estimator (a 4-layer DINOv2 backbone, a DPT-style neck and head that resize
    and fuse by bilinear interpolation), 56×56 images."""
    from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config

    backbone = Dinov2Config(hidden_size=64, num_hidden_layers=4, num_attention_heads=2, image_size=56,
                            patch_size=14, out_features=["stage1", "stage2", "stage3", "stage4"],
                            reshape_hidden_states=False)
    config = DepthAnythingConfig(backbone_config=backbone, patch_size=14, reassemble_hidden_size=64,
                                 neck_hidden_sizes=[16, 32, 64, 64], fusion_hidden_size=32, head_hidden_size=16)
    return DepthAnythingForDepthEstimation(config), (torch.randn(batch_size, 3, 56, 56),)


def vitmatte(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A ViTMatte matting model (a 2-layer ViTDet backbone, a convolutional detail stream, fusion
    blocks that upsample bilinearly), 64×64 images with a trimap channel."""
    from transformers import VitDetConfig, VitMatteConfig, VitMatteForImageMatting

    backbone = VitDetConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=64,
                            pretrain_image_size=64, patch_size=16, num_channels=4, out_features=["stage2"])
    config = VitMatteConfig(backbone_config=backbone, hidden_size=64, convstream_hidden_sizes=[16, 32, 48],
                            fusion_hidden_sizes=[64, 32, 16, 8])
    return VitMatteForImageMatting(config), (torch.randn(batch_size, 4, 64, 64),)


NINTH = ("upernet", "depth_anything", "vitmatte")


# A tenth held-out set, written on 2026-11-25 before the sweep timed activations other than ReLU and GELU
# on 3-D and 4-D maps (ReLU6, SiLU, Hardswish, sigmoid, tanh): MobileNetV2's ReLU6 layers were that change's
# reason, these use such activations too.


def mobilenet_v1(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A MobileNetV1 classifier (depthwise-separable convolutions, each followed by batch norm and ReLU6),
    width ×0.5, 96×96 images."""
    from transformers import MobileNetV1Config, MobileNetV1ForImageClassification

    config = MobileNetV1Config(depth_multiplier=0.5, image_size=96, num_labels=10)
    return MobileNetV1ForImageClassification(config), (torch.randn(batch_size, 3, 96, 96),)


def hgnet_v2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """An HGNetV2 classifier (stems and stages of light convolution blocks with ReLU, aggregated by
    concatenation), 64×64 images."""
    from transformers import HGNetV2Config, HGNetV2ForImageClassification

    config = HGNetV2Config(num_labels=10)
    return HGNetV2ForImageClassification(config), (torch.randn(batch_size, 3, 64, 64),)


def hiera(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A Hiera classifier (a hierarchical vision transformer with mask-unit attention and pooled
    queries), 64×64 images."""
    from transformers import HieraConfig, HieraForImageClassification

    config = HieraConfig(embed_dim=32, image_size=[64, 64], patch_size=[7, 7], patch_stride=[4, 4],
                         patch_padding=[3, 3], depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8], num_labels=10)
    return HieraForImageClassification(config), (torch.randn(batch_size, 3, 64, 64),)


def olmo2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """An OLMo 2 decoder (RMS-normed queries and keys, post-norm blocks, a SiLU-gated MLP), 4 layers."""
    from transformers import Olmo2Config, Olmo2ForCausalLM

    config = Olmo2Config(vocab_size=2048, hidden_size=128, intermediate_size=512, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2, use_cache=False)
    return Olmo2ForCausalLM(config), (torch.randint(0, 2048, (batch_size, SEQ)),)


TENTH = ("mobilenet_v1", "hgnet_v2", "hiera", "olmo2")


# An eleventh held-out set, written on 2026-11-25 before captured layers recorded their input's memory
# layout (a 4-D map in channels-last strides, as a model leaves it after turning tokens back into an
# image, runs a resize or max-pool 5–20× faster and a GELU 1.5× slower): DPT was that change's reason,
# these turn tokens into maps too.


def vitpose(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A ViTPose keypoint estimator (a 2-layer ViT backbone, a simple decoder that upsamples the
    token map and convolves it), 64×48 images."""
    from transformers import VitPoseBackboneConfig, VitPoseConfig, VitPoseForPoseEstimation

    backbone = VitPoseBackboneConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=[64, 48],
                                     patch_size=[8, 8], intermediate_size=128, out_indices=[2])
    config = VitPoseConfig(backbone_config=backbone, use_simple_decoder=True, num_labels=8)
    return VitPoseForPoseEstimation(config), (torch.randn(batch_size, 3, 64, 48),)


def sam_vision(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """SAM's image encoder (a 2-layer windowed ViT with relative positions, a convolutional neck on
    the token map), 64×64 images."""
    from transformers import SamVisionConfig, SamVisionModel

    config = SamVisionConfig(hidden_size=64, output_channels=32, num_hidden_layers=2, num_attention_heads=2,
                             image_size=64, patch_size=8, mlp_dim=128, window_size=4, global_attn_indexes=[1])
    return SamVisionModel(config), (torch.randn(batch_size, 3, 64, 64),)


def pvt(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A PVT (v1) classifier (four stages of patch embeddings and attention whose keys and values
    are spatially reduced by a strided convolution on the token map), 64×64 images."""
    from transformers import PvtConfig, PvtForImageClassification

    config = PvtConfig(image_size=64, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                       num_attention_heads=[1, 2, 2, 4], num_labels=10)
    return PvtForImageClassification(config), (torch.randn(batch_size, 3, 64, 64),)


def dinov3_convnext(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A DINOv3 ConvNeXt backbone (depthwise 7×7 convolutions, channels-last norms and MLPs),
    64×64 images."""
    from transformers import DINOv3ConvNextConfig, DINOv3ConvNextModel

    config = DINOv3ConvNextConfig(hidden_sizes=[24, 48, 96, 192], depths=[1, 1, 2, 1])
    return DINOv3ConvNextModel(config), (torch.randn(batch_size, 3, 64, 64),)


ELEVENTH = ("vitpose", "sam_vision", "pvt", "dinov3_convnext")


# A twelfth held-out set, written on 2026-11-25 before the tuning set (costmodel/tuning_set.py) held any
# model with 1-D convolutions: its in-model correction extrapolated to them from 2-D ones. These convolve
# along time too.


def dac_encoder(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A DAC audio codec's encoder (weight-normed 1-D convolutions, Snake activations, strided
    downsampling), 0.1 s of 16 kHz audio."""
    from transformers import DacConfig, DacModel

    config = DacConfig(encoder_hidden_size=8, downsampling_ratios=[2, 4, 4], decoder_hidden_size=32,
                       hidden_size=64, codebook_dim=8)
    return DacModel(config).encoder, (torch.randn(batch_size, 1, 1600),)


def speech2text_encoder(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A Speech2Text encoder (two strided 1-D convolutions with GLU subsample 80 filterbank frames, then
    2 transformer layers), 200 frames."""
    from transformers import Speech2TextConfig, Speech2TextModel

    config = Speech2TextConfig(d_model=64, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                               decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
                               conv_channels=64, max_source_positions=256)
    return Speech2TextModel(config).get_encoder(), (torch.randn(batch_size, 200, 80),)


def moonshine_encoder(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A Moonshine speech encoder (a stem of 1-D convolutions, kernel 127 stride 64, then 7 and 3,
    then 2 transformer layers with rotary positions), 0.5 s of 16 kHz audio."""
    from transformers import MoonshineConfig, MoonshineModel

    config = MoonshineConfig(hidden_size=64, intermediate_size=128, encoder_num_hidden_layers=2,
                             decoder_num_hidden_layers=1, encoder_num_attention_heads=2,
                             decoder_num_attention_heads=2, use_cache=False)
    return MoonshineModel(config).get_encoder(), (torch.randn(batch_size, 8000),)


TWELFTH = ("dac_encoder", "speech2text_encoder", "moonshine_encoder")


# Thirteenth: models whose glue is chains of pointwise operators (Snake-like gates, written-out norms,
# state-space discretisation), written before the sweep timed such chains.

def mamba2(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 2-layer Mamba2 language model (chunked state-space scan on the reference path: softplus, exp,
    cumulative sums; a gated RMSNorm), 32 tokens."""
    from transformers import Mamba2Config, Mamba2ForCausalLM

    config = Mamba2Config(vocab_size=2000, hidden_size=128, state_size=16, num_hidden_layers=2, expand=2,
                          num_heads=8, head_dim=32, n_groups=1, conv_kernel=4, chunk_size=16, use_cache=False)
    return Mamba2ForCausalLM(config), (torch.randint(0, 2000, (batch_size, 32)),)


def patchtst(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A PatchTST forecaster (per-series scaling, patches of 16 steps, 2 transformer layers with batch
    norm), 7 series of 512 steps."""
    from transformers import PatchTSTConfig, PatchTSTForPrediction

    config = PatchTSTConfig(num_input_channels=7, context_length=512, patch_length=16, patch_stride=8,
                            d_model=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                            prediction_length=96)
    return PatchTSTForPrediction(config), (torch.randn(batch_size, 512, 7),)


def nemotron(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer Nemotron decoder (squared-ReLU MLP, LayerNorm1P, partial rotary), 64 tokens."""
    from transformers import NemotronConfig, NemotronForCausalLM

    config = NemotronConfig(vocab_size=2000, hidden_size=128, intermediate_size=512, num_hidden_layers=4,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                            use_cache=False)
    return NemotronForCausalLM(config), (torch.randint(0, 2000, (batch_size, SEQ)),)


def univnet(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A UnivNet vocoder (location-variable convolutions whose kernels a predictor makes from the mel
    frames, gated tanh·sigmoid, leaky ReLU), 32 mel frames."""
    from transformers import UnivNetConfig, UnivNetModel

    config = UnivNetConfig(num_mel_bins=32, resblock_stride_sizes=[8, 8], resblock_kernel_sizes=[3, 3],
                           resblock_dilation_sizes=[[1, 3, 9], [1, 3, 9]])
    noise = torch.randn(batch_size, 24, config.model_in_channels)
    return UnivNetModel(config), (torch.randn(batch_size, 24, 32), noise)


THIRTEENTH = ("mamba2", "patchtst", "nemotron", "univnet")
