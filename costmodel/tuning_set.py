"""The tuning set: architectures whose in-model profiles train the learned CPU model.

A per-layer sweep times each layer alone, back to back, with its weights and inputs in cache. Inside
a real forward pass the same layer runs after others that evicted them, and the graph holds glue
operators (views, adds, masks, rotary arithmetic) that no sweep times. So the shipped learned model
is also fitted on layers timed *inside* real passes (:mod:`pipeplan.executor.profile_model`) of the
architectures of :mod:`pipeplan.costmodel.tuning_models` at the sizes below: small configurations of
``transformers`` models and of the zoo, at several widths, sequence lengths, image sizes and batch sizes (and
audio lengths: HuBERT, since 2026-11-25, with 1-D convolutions; mel frames: BigVGAN, since 2026-11-28, with Snake
activations; experts: Mixtral, since 2026-11-29), random weights, nothing downloaded. Each CPU's in-model CSV holds
the families that existed when it was profiled: the Zen 4's, the Zen 5's and both Xeons' have all (the model-167
Xeon's got ``resnet_vd``, ``bigvgan``, ``resnet_basic`` and ``mixtral`` on 2026-11-29, the Zen 5's ``mixtral`` the
same day); the Zen 3's all but ``resnet_basic`` and ``mixtral`` (both added 2026-11-29;
``--only resnet_basic,mixtral --seconds 3`` adds them).

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

from pipeplan.costmodel.tuning_models import (  # each factory is a MODEL here too: tuning_set:opt
    Built,
    albert,
    beit,
    bigvgan,
    bloom,
    convnextv2,
    deit,
    efficientnet,
    electra,
    gptj,
    hubert,
    llama,
    mixtral,
    mobilevit,
    mpnet,
    opt,
    phi,
    poolformer,
    regnet,
    resnet,
    resnet_basic,
    resnet_vd,
    roberta,
    segformer,
)

__all__ = ["ENTRIES", "Entry", "in_model_rows"]


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
# Mixtures: 4-16 experts, so that an expert's matmul gets 4 to 512 rows (tokens × 2 / experts).
_EXPERTS = ({"batch_size": 1, "seq_len": 128, "width": 128, "experts": 8},
            {"batch_size": 2, "seq_len": 64, "width": 256, "experts": 4},
            {"batch_size": 4, "seq_len": 32, "width": 64, "experts": 16},
            {"batch_size": 8, "seq_len": 128, "width": 128, "experts": 8},
            {"batch_size": 2, "seq_len": 16, "width": 64, "experts": 8})
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
    # added 2026-11-29: no entry had a mixture of experts, whose grouped matmul runs one matmul per expert; the
    # Zen 5 priced OLMoE's and Jamba's at about half their time
    *_grid(mixtral, *_EXPERTS),
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
    from pipeplan.costmodel.dataset_files import replace_rows, write_rows

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
