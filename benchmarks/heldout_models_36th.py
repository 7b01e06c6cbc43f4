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

The thirty-seventh (``THIRTY_SEVENTH``) was written on 2026-11-30 at 15:45 UTC, on the Zen 4 EPYC (cpu family 25,
model 17), before anything was scored on it and before this session changed anything: ZAYA (a decoder whose
attention compresses queries and keys and convolves them over time, with one routed expert per token), Granite
Speech's conformer encoder (block-local attention with Shaw relative positions, a depthwise convolution module and a
CTC side branch fed back into the stack), the Decision Transformer (a GPT-2 over interleaved return, state and action
embeddings of continuous inputs), CLIPSeg (a CLIP ViT and text encoder, FiLM-conditioned decoder over three of the
ViT's layers, then transposed convolutions back to the image) and PP-OCRv5's server text detector (an HGNetV2
backbone, a neck of asymmetric 7×1/1×7 convolutions on every scale, upsampled to 32×32 and a DB head of transposed
convolutions to the full 128×128 map). Each was checked to build and capture; none was timed or predicted before it
went in. No candidate was dropped.
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


def zaya(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """A 4-layer ZAYA decoder over 64 tokens, 128 wide: compressed convolutional attention (4 heads of 32, 2 key and
    value heads) and a router over 4 experts, one per token."""
    from transformers import ZayaConfig, ZayaModel

    config = ZayaConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=32, moe_intermediate_size=128, num_experts=4,
                        num_experts_per_tok=1, router_hidden_size=64, use_cache=False, pad_token_id=0,
                        bos_token_id=1, eos_token_id=2)
    return ZayaModel(config), _ids(batch_size)


def granite_speech_encoder(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """Granite Speech's 4-layer conformer encoder over 128 frames of 80 features, 128 wide: attention within blocks
    of 32 frames, Shaw relative positions, and a CTC projection added back halfway up the stack."""
    from transformers import GraniteSpeechEncoderConfig
    from transformers.models.granite_speech.modeling_granite_speech import GraniteSpeechCTCEncoder

    config = GraniteSpeechEncoderConfig(input_dim=80, num_layers=4, hidden_dim=128, feedforward_mult=2, num_heads=4,
                                        dim_head=32, output_dim=64, context_size=32)
    return GraniteSpeechCTCEncoder(config), (torch.randn(batch_size, 128, 80),)


def decision_transformer(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    """A 4-layer Decision Transformer, 128 wide, over 20 steps of returns, 17-dimensional states and 6-dimensional
    actions (60 tokens), with its timestep embedding."""
    from transformers import DecisionTransformerConfig, DecisionTransformerModel

    config = DecisionTransformerConfig(state_dim=17, act_dim=6, hidden_size=128, n_layer=4, n_head=4, n_inner=256,
                                       max_ep_len=1000, use_cache=False)
    steps = 20
    inputs = {"states": torch.randn(batch_size, steps, 17), "actions": torch.randn(batch_size, steps, 6),
              "rewards": torch.randn(batch_size, steps, 1), "returns_to_go": torch.randn(batch_size, steps, 1),
              "timesteps": torch.arange(steps).repeat(batch_size, 1),
              "attention_mask": torch.ones(batch_size, steps, dtype=torch.long)}
    return DecisionTransformerModel(config), (), inputs


def clipseg(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """CLIPSeg on a 112×112 image and a 16-token prompt: a 4-layer ViT (16×16 patches) and a 2-layer text encoder,
    both 128 wide, and a decoder of 32 channels over layers 1–3, FiLM-conditioned on the prompt."""
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation, CLIPSegTextConfig, CLIPSegVisionConfig

    text = CLIPSegTextConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                             num_attention_heads=4, max_position_embeddings=32, bos_token_id=1, eos_token_id=2)
    vision = CLIPSegVisionConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                                 image_size=112, patch_size=16)
    config = CLIPSegConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=64,
                           extract_layers=[1, 2, 3], reduce_dim=32)
    images = torch.randn(batch_size, 3, 112, 112)
    return CLIPSegForImageSegmentation(config), (torch.randint(3, 1000, (batch_size, 16)), images)


def pp_ocrv5_server_det(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    """PP-OCRv5's server text detector on a 128×128 image: a small HGNetV2 (64–1024 channels), a 96-channel neck
    of intra-class blocks (7×1, 1×7 and square kernels) on every scale, upsampled to 32×32, and a DB head of two
    transposed convolutions to a 128×128 probability map."""
    from transformers import HGNetV2Config, PPOCRV5ServerDetConfig, PPOCRV5ServerDetForObjectDetection

    backbone = HGNetV2Config(stem_channels=[3, 16, 16], stage_in_channels=[16, 64, 256, 512],
                             stage_mid_channels=[16, 32, 64, 128], stage_out_channels=[64, 256, 512, 1024],
                             stage_num_blocks=[1, 1, 2, 1], stage_numb_of_layers=[3, 3, 3, 3],
                             stage_downsample=[False, True, True, True], stage_light_block=[False, False, True, True],
                             stage_kernel_size=[3, 3, 5, 5], out_features=["stage1", "stage2", "stage3", "stage4"],
                             hidden_sizes=[64, 256, 512, 1024], depths=[1, 1, 2, 1])
    block = {"reduce_channel": [1, 1, 0], "return_channel": [1, 1, 0],
             "vertical_long_to_small_conv_longratio": [[7, 1], 1, [3, 0]],
             "vertical_long_to_small_conv_midratio": [[5, 1], 1, [2, 0]],
             "vertical_long_to_small_conv_shortratio": [[3, 1], 1, [1, 0]],
             "horizontal_small_to_long_conv_longratio": [[1, 7], 1, [0, 3]],
             "horizontal_small_to_long_conv_midratio": [[1, 5], 1, [0, 2]],
             "horizontal_small_to_long_conv_shortratio": [[1, 3], 1, [0, 1]],
             "symmetric_conv_long_longratio": [7, 1, 3], "symmetric_conv_long_midratio": [5, 1, 2],
             "symmetric_conv_long_shortratio": [3, 1, 1]}
    config = PPOCRV5ServerDetConfig(backbone_config=backbone, neck_out_channels=96, intraclass_block_config=block,
                                    scale_factor_list=[1, 2, 4, 8], kernel_list=[3, 2, 2])
    return PPOCRV5ServerDetForObjectDetection(config), (torch.randn(batch_size, 3, 128, 128),)


THIRTY_SEVENTH = ("zaya", "granite_speech_encoder", "decision_transformer", "clipseg", "pp_ocrv5_server_det")
