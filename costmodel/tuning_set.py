"""The tuning set: architectures whose in-model profiles train the learned CPU model.

A per-layer sweep times each layer alone, back to back, with its weights and inputs in cache. Inside
a real forward pass the same layer runs after others that evicted them, and the graph holds glue
operators (views, adds, masks, rotary arithmetic) that no sweep times. So the shipped learned model
is also fitted on layers timed *inside* real passes (:mod:`pipeplan.executor.profile_model`) of the
architectures below: small configurations of ``transformers`` models and of the zoo, at several
widths, sequence lengths, image sizes and batch sizes (and audio lengths: HuBERT, since 2026-11-25, with
1-D convolutions; mel frames: BigVGAN, since 2026-11-28, with Snake activations), random weights, nothing
downloaded. Each CPU's in-model CSV holds the families that existed when it was profiled: the Zen 4's and
the Zen 5's have all; the Zen 3's all but ``resnet_basic`` (added 2026-11-29); the Xeon's lacks ``resnet_vd``,
``bigvgan`` and ``resnet_basic`` (``--only resnet_vd,bigvgan,resnet_basic`` adds them).

The evaluation set that issue 16's targets are measured on (``benchmarks/model_profile.py``:
GPT-NeoX, DistilBERT, MobileNetV2, Swin) is kept out of this list, and nothing here is tuned on it.

    python -m pipeplan.costmodel.tuning_set --out costmodel/data/inmodel-cpu-xeon.csv [--only opt,resnet] [--replace]

Every entry is also a MODEL for ``pipeplan profile``: ``pipeplan.costmodel.tuning_set:opt``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = ["ENTRIES", "Entry", "in_model_rows"]

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


@dataclass(frozen=True)
class Entry:
    """One profiled configuration: an architecture at one size."""

    factory: Callable[..., Built]
    options: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return "-".join([self.factory.__name__, *(f"{k[0]}{v}" for k, v in self.options.items())])

    def config(self, layer: str) -> str:
        """The ``config`` of this entry's row for ``layer`` (its source is ``in-model:`` and :attr:`name`)."""
        return f"{self.name}/{layer}"

    def built(self) -> tuple[nn.Module, tuple[Any, ...], Any]:
        """The model in eval mode (seeded: the same weights every time), its inputs, and its capture: the
        same graph, layer names included, as the profile that measured its rows."""
        from pipeplan.costmodel.capture import capture_program

        torch.manual_seed(0)
        model, args = self.factory(**self.options)
        model.eval()
        return model, args, capture_program(model, args, name=self.name)


def _grid(factory: Callable[..., Built], *sizes: dict[str, int]) -> list[Entry]:
    return [Entry(factory, s) for s in sizes]


# The last size of each is tiny (16 tokens, 32² images): test-sized models and the thin stages of
# small models run layers of a few microseconds, whose dispatch cost the larger sizes do not show.
_TEXT = ({"batch_size": 1, "seq_len": 128, "width": 128}, {"batch_size": 2, "seq_len": 64, "width": 256},
         {"batch_size": 4, "seq_len": 32, "width": 64}, {"batch_size": 8, "seq_len": 128, "width": 384},
         {"batch_size": 2, "seq_len": 16, "width": 64})
_IMAGE = ({"batch_size": 1, "image_size": 64, "width": 32}, {"batch_size": 2, "image_size": 128, "width": 16},
          {"batch_size": 4, "image_size": 96, "width": 48}, {"batch_size": 2, "image_size": 32, "width": 16})
_VISION_TRANSFORMERS = tuple({**s, "width": 64 * (i + 1)} for i, s in enumerate(_IMAGE))
# Wide channels on small maps: 1,024-3,072 channels on 1-3 px maps last.
_WIDE = ({"batch_size": 1, "image_size": 48, "width": 64}, {"batch_size": 2, "image_size": 64, "width": 96},
         {"batch_size": 4, "image_size": 32, "width": 48}, {"batch_size": 2, "image_size": 96, "width": 32})
# Basic blocks: ResNet-18/34 widths (64-512 channels) and thinner ones, on 2-40 px maps.
_BASIC = ({"batch_size": 1, "image_size": 128, "width": 64}, {"batch_size": 2, "image_size": 64, "width": 32},
          {"batch_size": 4, "image_size": 48, "width": 48}, {"batch_size": 2, "image_size": 160, "width": 16})
# Raw audio: 0.125-1 s at 16 kHz, so the convolutional stem's 1-D maps run 50-3,200 steps wide.
_AUDIO = ({"batch_size": 1, "samples": 16000, "width": 64}, {"batch_size": 2, "samples": 8000, "width": 128},
          {"batch_size": 4, "samples": 4000, "width": 32}, {"batch_size": 2, "samples": 2000, "width": 64})
# Mel frames to waveform: 8-64 frames become 256-2,048 samples, over 4-128 channels.
_VOCODER = ({"batch_size": 1, "frames": 64, "width": 128}, {"batch_size": 2, "frames": 32, "width": 64},
            {"batch_size": 4, "frames": 16, "width": 96}, {"batch_size": 2, "frames": 8, "width": 32})
ENTRIES: list[Entry] = [
    *(e for f in (opt, llama, bloom, phi, gptj, roberta, albert, electra, mpnet) for e in _grid(f, *_TEXT)),
    *(e for f in (deit, beit) for e in _grid(f, *_VISION_TRANSFORMERS)),
    *(e for f in (resnet, regnet, efficientnet, convnextv2, poolformer, mobilevit, segformer)
      for e in _grid(f, *_IMAGE)),
    # added 2026-11-25: until then no entry had a 1-D convolution, and the correction extrapolated to
    # them (SqueezeBERT's, SEW's, HiFi-GAN's) from 2-D ones
    *_grid(hubert, *_AUDIO),
    # added 2026-11-28: no entry had convolutions with more than 512 channels or on maps under 4×4, and the
    # correction, fitted without them, lowered what a sweep with such shapes priced right (the sixteenth
    # held-out set, scored the session before, is RT-DETR's ResNet-vd at another size: no longer held out)
    *_grid(resnet_vd, *_WIDE),
    # added 2026-11-28: no entry had a chain of pointwise operators as an activation, and the correction
    # raised DAC's Snake layers, which the sweep prices right, 2.6× as it raises residual adds
    *_grid(bigvgan, *_VOCODER),
    # added 2026-11-29: no entry had a basic block (only bottlenecks, whose 3×3 convolution sits between
    # 1×1 ones), and on the Zen 4 the model priced ResNet-18's 3×3 convolutions 1.5× their in-model time
    *_grid(resnet_basic, *_BASIC),
]


def in_model_rows(entry: Entry, seconds: float = 1.0) -> Iterator[dict[str, Any]]:
    """Dataset rows (:data:`pipeplan.costmodel.dataset.COLUMNS`) of every layer of ``entry`` timed idle inside
    real forward passes on core 0, one thread, with the device's measured figures."""
    from pipeplan.costmodel.dataset import contention_features, layer_features
    from pipeplan.costmodel.hardware import Contention, cpu_model
    from pipeplan.executor.profile_model import ModelProfileSettings, profile_built

    device = _core0()
    model, args, captured = entry.built()
    table = profile_built(model, args, name=entry.name, settings=ModelProfileSettings(seconds_per_level=seconds),
                          captured=captured)
    by_name = {la.name: la for la in captured.graph.layers}
    idle = table.levels[0]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    for layer, seconds_taken, raw in zip(table.layers, idle.layer_s, idle.raw_s or idle.layer_s, strict=True):
        graph_layer = by_name[layer.name]
        yield {
            "config": entry.config(layer.name), "source": f"in-model:{entry.name}", **layer_features(graph_layer),
            "device_type": "cpu-core", "device_name": cpu_model(), "peak_flops": device.peak_flops,
            "mem_bandwidth": device.mem_bandwidth, "threads": 1, "cores": "0",
            **contention_features(Contention()), "time_s": max(seconds_taken, 1e-7), "time_min_s": seconds_taken,
            "time_max_s": raw, "spread": 0.0, "repeats": idle.passes, "iterations": 1,
            "loadavg": idle.loadavg, "torch_version": torch.__version__, "measured_at": stamp,
        }


@functools.cache
def _core0() -> Any:
    """Core 0 measured once per process: the rows of every entry share its figures."""
    from pipeplan.costmodel.profile import ProfileSettings, measure_device

    return measure_device(ProfileSettings(cores=[0]))


def main(argv: list[str] | None = None) -> int:
    from pipeplan.costmodel.dataset import replace_rows, write_rows

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="CSV to write (appends when it exists)")
    parser.add_argument("--replace", action="store_true",
                        help="drop every earlier row of each entry it profiles (profiling entries again)")
    parser.add_argument("--only", default="", help="comma-separated architectures (default: all)")
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per model (1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    wanted = {s.strip() for s in args.only.split(",") if s.strip()}
    entries = [e for e in ENTRIES if not wanted or e.factory.__name__ in wanted]
    for i, entry in enumerate(entries, 1):
        started = time.perf_counter()
        if args.replace:
            # by source: a layer renamed since (transformers moves modules) must not keep its stale rows
            dropped, count = replace_rows(args.out, in_model_rows(entry, args.seconds), by=("source",))
            replaced = f", in place of {dropped} earlier rows"
        else:
            count, replaced = write_rows(args.out, in_model_rows(entry, args.seconds), append=True), ""
        print(f"[{i}/{len(entries)}] {entry.name}: {count} layers in {time.perf_counter() - started:.0f} s{replaced}",
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
