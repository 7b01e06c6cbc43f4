"""The layers the profiler times: single operators at chosen shapes, and the layers of zoo models.

A :class:`LayerSpec` names one layer configuration (``linear:m=128,k=768,n=3072``); ``build()``
makes the module and its inputs.  :func:`default_sweep` is the shape sweep shipped with pipeplan:
per layer type, a seeded sample of a grid that covers the shapes of the zoo models (GPT-2/BERT/ViT
widths 768 and 3072, ResNet/ConvNeXt channels 64–2048) scaled so one call stays under ~50 ms on a
single CPU core.  :func:`model_layers` takes every leaf module of a zoo model with the inputs it
receives in a real forward pass, so whole layers of real architectures are profiled too.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pipeplan.costmodel.conv_shapes import grouped_conv_flops, grouped_conv_ok
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.pointwise_chains import CHAINS, build_chain

__all__ = ["CHANNELS_LAST_KINDS", "DRAWN_AS", "KINDS", "LayerSpec", "ModelLayer", "channels_last_twin", "default_sweep",
           "model_layers", "parse_spec"]


class _Attention(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class _BatchedMatmul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _map(p: dict[str, int], *shape: int) -> torch.Tensor:
    """A random 4-D map, laid out channels-last when the spec says ``cl=1`` (an optional parameter of the
    kinds in :data:`CHANNELS_LAST_KINDS`: the same shapes timed on the layout a model leaves behind when
    it turns tokens back into an image)."""
    x = torch.randn(*shape)
    return x.contiguous(memory_format=torch.channels_last) if p.get("cl") and len(shape) == 4 else x


# kind → (builder of (module, inputs) from the spec's integer parameters, grid to sample from)
_Builder = Callable[[dict[str, int]], tuple[nn.Module, tuple[Any, ...]]]
_BUILDERS: dict[str, _Builder] = {
    "linear": lambda p: (nn.Linear(p["k"], p["n"]), (_randn(p["m"], p["k"]),)),
    "conv2d": lambda p: (nn.Conv2d(p["cin"], p["cout"], p["k"], stride=p["s"], padding=p["k"] // 2),
                         (_map(p, p["b"], p["cin"], p["hw"], p["hw"]),)),
    "bmm": lambda p: (_BatchedMatmul(), (_randn(p["b"], p["m"], p["k"]), _randn(p["b"], p["k"], p["n"]))),
    "attention": lambda p: (_Attention(bool(p["causal"])),
                            tuple(_randn(p["b"], p["h"], p["t"], p["d"]) for _ in range(3))),
    "layernorm": lambda p: (nn.LayerNorm(p["c"]), (_randn(p["m"], p["c"]),)),
    "batchnorm": lambda p: (nn.BatchNorm2d(p["c"]).eval(), (_map(p, p["b"], p["c"], p["hw"], p["hw"]),)),
    "relu": lambda p: (nn.ReLU(), (_randn(p["m"], p["c"]),)),
    "gelu": lambda p: (nn.GELU(), (_randn(p["m"], p["c"]),)),
    "maxpool": lambda p: (nn.MaxPool2d(p["k"], stride=p["k"]), (_map(p, p["b"], p["c"], p["hw"], p["hw"]),)),
    "avgpool": lambda p: (nn.AdaptiveAvgPool2d(1), (_map(p, p["b"], p["c"], p["hw"], p["hw"]),)),
    "embedding": lambda p: (nn.Embedding(p["v"], p["c"]),
                            (torch.randint(0, p["v"], (p["b"], p["t"])),)),
    # 1-D convolutions come last, so that adding them left the seeded shapes of the kinds above as they
    # were: dense or grouped (``g`` groups) as in audio stems (strided, wide kernels) and SqueezeBERT
    # (grouped, kernel 1); depthwise (one filter per channel) as in conformer and state-space blocks.
    "conv1d": lambda p: (nn.Conv1d(p["cin"], p["cout"], p["k"], stride=p["s"], padding=p["k"] // 2, groups=p["g"]),
                         (_randn(p["b"], p["cin"], p["l"]),)),
    "dwconv1d": lambda p: (nn.Conv1d(p["c"], p["c"], p["k"], stride=p["s"], padding=p["k"] // 2, groups=p["c"]),
                           (_randn(p["b"], p["c"], p["l"]),)),
    # Patch rearrangement (``aten.im2col`` / ``aten.col2im``), after the 1-D convolutions for the same reason: no
    # FLOPs, yet on a CPU core it moves a few GB/s at best. ConvBERT unfolds 9×1 token windows (w = 1), vision
    # encoders cut images into patches (stride = kernel), MobileViT folds them back.
    "unfold": lambda p: (nn.Unfold((p["kh"], p["kw"]), padding=unfold_padding(p), stride=p["s"]),
                         (_randn(p["b"], p["c"], p["h"], p["w"]),)),
    "fold": lambda p: (nn.Fold((p["h"], p["w"]), (p["kh"], p["kw"]), padding=unfold_padding(p), stride=p["s"]),
                       (_randn(p["b"], p["c"] * p["kh"] * p["kw"], unfold_blocks(p)),)),
    # Resizing (``F.interpolate``, ``nn.Upsample``: ``aten.upsample_*``), last for the same reason: depth,
    # segmentation and matting decoders upsample c×hw×hw feature maps to an o×o side, nearest, bilinear
    # (with or without align_corners) or bicubic; a gather of 1–16 pixels per output, no FLOPs counted.
    "resize": lambda p: (nn.Upsample(size=(p["o"], p["o"]), mode=RESIZE_MODES[p["mode"]][0],
                                     align_corners=RESIZE_MODES[p["mode"]][1]),
                         (_map(p, p["b"], p["c"], p["hw"], p["hw"]),)),
    # Activations beyond the 2-D ReLU and GELU above, last for the same reason: ReLU6 (``aten.hardtanh``:
    # MobileNets), SiLU (gated MLPs, EfficientNets), Hardswish, sigmoid (squeeze-excitation gates), tanh,
    # and ReLU and GELU again, on the maps real models apply them to: a CNN's b×c×hw×hw (rank 4) or a
    # transformer's b×tokens×c (rank 3). Without them an operator no sweep timed was priced by whatever
    # kinds a retrain put beside it (MobileNetV2's 35 ReLU6 layers moved 2.7 → 3.7 ms in one retrain).
    "activation": lambda p: (ACTIVATIONS[p["op"]][1](), (_map(p, *activation_shape(p)),)),
    # Chains of pointwise operators as models write them (Snake, an RMSNorm written out, rotary positions, a
    # residual add, …: :mod:`pipeplan.costmodel.pointwise_chains`), last for the same reason.
    "pointwise": build_chain,
    # Softmax over the last dim of b×m×c, last for the same reason. Attention fused by SDPA hides its own, but
    # gated blocks (PatchTSMixer's gating over 7 input channels), routers and eager attention run it as a layer
    # of its own, and on a CPU core a row shorter than one vector costs more than a long one (the Zen 4: 130-150 ns
    # a row of 7 or 8 values, 22 ns one of 16, 85 ns one of 128). Added 2026-11-28: until then training said "no
    # rows at all for softmax" and PatchTSMixer's were priced at a fifth of their time.
    "softmax": lambda p: (nn.Softmax(dim=-1), (_randn(p["b"], p["m"], p["c"]),)),
    # Depthwise and grouped 2-D convolutions (``cpg`` input channels per group; 1: depthwise), last for the same
    # reason: MobileNets, EfficientNets, ConvNeXts, RegNets and OCR backbones run them, and until 2026-11-30 no
    # sweep had one, so each was priced from dense convolutions of its FLOPs. On one CPU thread PyTorch runs a
    # grouped 1×1 convolution (unstrided, batch under 16) as one small convolution per group, outside oneDNN:
    # 1.1 ms for 384 channels on a 4×4 map on the Zen 5, where the same layer with a 5×5 kernel takes 44 µs.
    "dwconv2d": lambda p: (nn.Conv2d(p["c"], p["c"], p["k"], stride=p["s"], padding=p["k"] // 2,
                                     groups=p["c"] // p["cpg"]),
                           (_map(p, p["b"], p["c"], p["hw"], p["hw"]),)),
}
# activation's ``op``: a name for it and the module that applies it. The tanh-approximated GELU (op 7, the
# GELU of GPT-BigCode, Gemma and Starcoder2; added 2026-11-28) is given by key only: putting it in the grid's
# ``op`` list would change every seeded draw of the kind, and so the shapes CPUs profiled by name.
ACTIVATIONS: tuple[tuple[str, Callable[[], nn.Module]], ...] = (
    ("relu6", nn.ReLU6), ("silu", nn.SiLU), ("hardswish", nn.Hardswish), ("sigmoid", nn.Sigmoid),
    ("tanh", nn.Tanh), ("relu", nn.ReLU), ("gelu", nn.GELU), ("gelu_tanh", lambda: nn.GELU(approximate="tanh")))
# resize's ``mode``: F.interpolate's mode and align_corners (None for nearest)
RESIZE_MODES: tuple[tuple[str, bool | None], ...] = (("nearest", None), ("bilinear", False), ("bilinear", True),
                                                     ("bicubic", False))
# Sweep kinds drawn from a grid of their own and built, keyed and priced as another kind: dense convolutions on
# 64–128 px maps (added 2026-11-30), which ``conv2d``'s grid (maps to 56) does not reach and which CNN stems,
# keypoint encoders and dense-prediction heads run. Once grouped shapes of those sizes were in a profile, such
# dense layers were priced from them, 1.4–2× their time (SuperPoint, DPT, CHMv2 on the Zen 5). A grid of their
# own leaves every seeded ``conv2d`` draw, and so the shapes CPUs profiled by name, as it was.
DRAWN_AS = {"conv2d_large": "conv2d"}
KINDS = (*_BUILDERS, *DRAWN_AS)
# Kinds whose input is a 4-D map (an activation's when its rank is 4), which ``cl=1`` lays out channels-last.
CHANNELS_LAST_KINDS = ("conv2d", "batchnorm", "maxpool", "avgpool", "resize", "activation")


def channels_last_twin(spec: LayerSpec) -> LayerSpec | None:
    """The same shape with its input laid out channels-last (``cl=1``), or ``None`` for a spec whose
    input is not a 4-D map.

    >>> channels_last_twin(parse_spec("maxpool:b=2,c=64,hw=28,k=2")).key
    'maxpool:b=2,c=64,hw=28,k=2,cl=1'
    >>> channels_last_twin(parse_spec("linear:m=4,k=8,n=16")) is None
    True
    """
    p = dict(spec.params)
    if spec.kind not in CHANNELS_LAST_KINDS or p.get("rank", 4) != 4:
        return None
    return LayerSpec(spec.kind, {**p, "cl": 1})

# Both directions over one grid: b×c×h×w images (w = 1: a token sequence), kh×kw kernels, stride s.
_UNFOLD_GRID = {"b": [1, 2, 4, 8], "c": [3, 16, 32, 64, 128, 256, 512, 768], "h": [8, 16, 32, 64, 128, 224],
                "w": [1, 1, 8, 16, 32, 64, 128, 224], "kh": [1, 2, 3, 5, 8, 9, 15, 16], "kw": [1, 1, 2, 3, 8, 16],
                "s": [1, 1, 1, 2, 4, 8, 16]}
_GRIDS: dict[str, dict[str, list[int]]] = {
    "linear": {"m": [1, 4, 16, 64, 128, 256, 512], "k": [128, 256, 512, 768, 1024, 2048, 3072],
               "n": [128, 256, 512, 768, 1024, 2048, 3072]},
    "conv2d": {"b": [1, 2, 4], "cin": [3, 16, 32, 64, 128, 256], "cout": [16, 32, 64, 128, 256],
               "k": [1, 3, 7], "s": [1, 2], "hw": [7, 14, 28, 56]},
    "bmm": {"b": [1, 4, 12, 24, 48], "m": [16, 64, 128, 256], "k": [32, 64, 128, 256],
            "n": [16, 64, 128, 256]},
    "attention": {"b": [1, 2, 4], "h": [2, 4, 8, 12], "t": [16, 32, 64, 128, 256], "d": [32, 64],
                  "causal": [0, 1]},
    "layernorm": {"m": [1, 16, 64, 128, 256, 512, 1024], "c": [128, 256, 384, 768, 1024, 2048]},
    "batchnorm": {"b": [1, 2, 4], "c": [16, 64, 128, 256, 512], "hw": [7, 14, 28, 56]},
    "relu": {"m": [1, 16, 64, 256, 1024, 4096], "c": [64, 256, 768, 1024, 3072]},
    "gelu": {"m": [1, 16, 64, 256, 1024, 4096], "c": [64, 256, 768, 1024, 3072]},
    "maxpool": {"b": [1, 2, 4], "c": [16, 64, 128, 256], "hw": [14, 28, 56, 112], "k": [2, 3]},
    "avgpool": {"b": [1, 2, 4], "c": [64, 256, 512, 1024, 2048], "hw": [7, 14, 28]},
    "embedding": {"v": [1000, 10000, 50257], "c": [128, 256, 768], "b": [1, 2, 4, 8], "t": [16, 64, 128, 256]},
    "conv1d": {"b": [1, 2, 4, 8], "cin": [1, 16, 64, 128, 256, 512, 768], "cout": [16, 64, 128, 256, 512, 768],
               "k": [1, 3, 5, 10, 15], "s": [1, 1, 2, 5], "g": [1, 1, 4], "l": [16, 64, 128, 512, 2048, 8192]},
    "dwconv1d": {"b": [1, 2, 4, 8], "c": [64, 128, 256, 512, 768, 1024], "k": [3, 4, 7, 9, 15, 31], "s": [1, 1, 2],
                 "l": [16, 32, 64, 128, 256, 512, 2048]},
    "unfold": _UNFOLD_GRID,
    "fold": _UNFOLD_GRID,
    # bilinear drawn twice as often as each other mode, as decoders use it most
    "resize": {"b": [1, 2, 4, 8], "c": [1, 3, 16, 32, 64, 128, 256, 512], "hw": [4, 7, 8, 14, 16, 28, 32, 56, 64, 128],
               "o": [8, 14, 16, 28, 32, 56, 64, 112, 128, 224, 256], "mode": [0, 1, 1, 2, 3]},
    # ReLU6 and SiLU drawn twice as often as each other activation (the most common unswept ones); CNN maps
    # (rank 4) twice as often as token sequences
    "activation": {"b": [1, 2, 4, 8], "c": [16, 24, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024],
                   "hw": [4, 7, 8, 14, 16, 28, 32, 56, 64, 112], "rank": [3, 4, 4], "op": [0, 0, 1, 1, 2, 3, 4, 5, 6]},
    # b×t×c tokens (b×c×t for the channel-first chains), each chain of pointwise_chains.CHAINS alike
    "pointwise": {"b": [1, 2, 4, 8], "c": [16, 32, 64, 128, 256, 384, 512, 768, 1024, 2048],
                  "t": [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192], "chain": list(range(len(CHAINS)))},
    # rows of 2 to 4,096 values, short rows (gates over a few channels or experts) drawn as often as long ones
    "softmax": {"b": [1, 2, 4, 8], "m": [1, 8, 16, 64, 256, 1024, 4096],
                "c": [2, 4, 7, 8, 16, 31, 64, 128, 256, 512, 1024, 2048, 4096]},
    # depthwise drawn four times in eight; maps down to 4×4, where OCR backbones run 5×5 kernels on padding
    "dwconv2d": {"b": [1, 2, 4, 8], "c": [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 960],
                 "k": [1, 3, 3, 5, 7], "s": [1, 1, 2], "hw": [4, 7, 8, 14, 16, 28, 32, 56, 64, 112],
                 "cpg": [1, 1, 1, 1, 2, 4, 8, 16]},
    "conv2d_large": {"b": [1, 2, 4], "cin": [1, 3, 16, 32, 64, 128], "cout": [16, 32, 64, 128, 256],
                     "k": [1, 3, 5, 7], "s": [1, 2], "hw": [64, 80, 96, 112, 128]},
}
# Above these a single call takes too long on one core for a sweep that fits in minutes.
_MAX_FLOPS = 3e9
_MAX_ELEMENTS = 16 * 2**20


@dataclass(frozen=True)
class LayerSpec:
    """One layer type at one shape: ``LayerSpec("linear", {"m": 128, "k": 768, "n": 3072})``.

    >>> spec = parse_spec("linear:m=4,k=8,n=16")
    >>> spec.key, spec.build()[0]
    ('linear:m=4,k=8,n=16', Linear(in_features=8, out_features=16, bias=True))
    """

    kind: str
    params: tuple[tuple[str, int], ...]

    def __init__(self, kind: str, params: dict[str, int] | Iterable[tuple[str, int]]) -> None:
        if kind not in _BUILDERS:
            raise ValueError(f"unknown layer type {kind!r}: choose from {', '.join(_BUILDERS)}")
        items = tuple(params.items() if isinstance(params, dict) else params)
        missing = set(_GRIDS[kind]) - {k for k, _ in items}
        if missing:
            raise ValueError(f"layer {kind!r} needs {', '.join(sorted(missing))}")
        allowed = set(_GRIDS[kind]) | ({"cl"} if kind in CHANNELS_LAST_KINDS else set())
        unknown = {k for k, _ in items} - allowed
        if unknown:
            raise ValueError(f"layer {kind!r} has no parameter {', '.join(sorted(unknown))}: it takes "
                             f"{', '.join(sorted(allowed))}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "params", items)

    @property
    def key(self) -> str:
        return f"{self.kind}:" + ",".join(f"{k}={v}" for k, v in self.params)

    def build(self) -> tuple[nn.Module, tuple[Any, ...]]:
        torch.manual_seed(0)
        module, inputs = _BUILDERS[self.kind](dict(self.params))
        return module.eval(), inputs


@dataclass
class ModelLayer:
    """A leaf module of a real model with the inputs it got in a real forward pass."""

    key: str  # "model:gpt2/transformer.h.0.mlp.c_fc"
    layer: Layer  # its features, from the captured graph
    module: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def parse_spec(text: str) -> LayerSpec:
    """Read ``kind:a=1,b=2`` (the :attr:`LayerSpec.key` format)."""
    kind, _, rest = text.partition(":")
    try:
        params = {k.strip(): int(v) for k, v in (item.split("=") for item in rest.split(",") if item)}
    except ValueError:
        raise ValueError(f"cannot read layer {text!r}: write kind:name=int,name=int") from None
    return LayerSpec(kind.strip(), params)


def _size_ok(kind: str, p: dict[str, int]) -> bool:
    flops = {
        "linear": 2 * p.get("m", 0) * p.get("k", 0) * p.get("n", 0),
        "conv2d": 2 * p.get("b", 0) * p.get("cin", 0) * p.get("cout", 0) * p.get("k", 0) ** 2
        * (p.get("hw", 0) // p.get("s", 1)) ** 2,
        "bmm": 2 * p.get("b", 0) * p.get("m", 0) * p.get("k", 0) * p.get("n", 0),
        "attention": 4 * p.get("b", 0) * p.get("h", 0) * p.get("t", 0) ** 2 * p.get("d", 0),
    }.get(kind, grouped_conv_flops(kind, p))
    elements = 1
    for name in ("b", "m", "c", "cin", "hw", "t", "h", "d", "l"):
        elements *= p.get(name, 1) * (p.get("hw", 1) if name == "hw" else 1)
    if kind in ("unfold", "fold"):  # the patch matrix, kh·kw copies of the image, is the large side
        return unfold_ok(kind, p) and unfold_patch_elements(p) <= _MAX_ELEMENTS
    if kind == "resize":
        return resize_ok(p) and resize_elements(p) <= _MAX_ELEMENTS
    return (flops <= _MAX_FLOPS and elements <= _MAX_ELEMENTS and not (kind == "conv2d" and p["hw"] < p["k"])
            and grouped_conv_ok(kind, p))


def activation_shape(p: dict[str, int]) -> tuple[int, ...]:
    """The input of an ``activation`` draw: b×c×hw×hw for rank 4, b×(hw·hw)×c (tokens × channels) for rank 3.

    >>> p = {"b": 2, "c": 64, "hw": 14}
    >>> activation_shape({**p, "rank": 4}), activation_shape({**p, "rank": 3})
    ((2, 64, 14, 14), (2, 196, 64))
    """
    if p["rank"] == 4:
        return p["b"], p["c"], p["hw"], p["hw"]
    return p["b"], p["hw"] * p["hw"], p["c"]


def resize_ok(p: dict[str, int]) -> bool:
    """Whether a ``resize`` draw is one decoders make: a change of size, up to 16× larger or 4× smaller
    on a side."""
    return p["o"] != p["hw"] and p["hw"] <= 4 * p["o"] and p["o"] <= 16 * p["hw"]


def resize_elements(p: dict[str, int]) -> int:
    """Elements of a ``resize`` draw's larger side (the output of an upsample, the input of a shrink),
    by which both sweeps bound a draw."""
    return p["b"] * p["c"] * max(p["hw"], p["o"]) ** 2


def unfold_padding(p: dict[str, int]) -> tuple[int, int]:
    """An ``unfold``/``fold`` draw's padding: half the kernel for sliding windows (stride 1, as ConvBERT
    pads its token windows), none for patches cut at a stride."""
    return (p["kh"] // 2, p["kw"] // 2) if p["s"] == 1 else (0, 0)


def unfold_blocks(p: dict[str, int]) -> int:
    """How many kh×kw patches an ``unfold`` cuts from an h×w image (a ``fold`` sums back): the columns
    of the patch matrix."""
    (ph, pw), s = unfold_padding(p), p["s"]
    return max(0, (p["h"] + 2 * ph - p["kh"]) // s + 1) * max(0, (p["w"] + 2 * pw - p["kw"]) // s + 1)


def unfold_patch_elements(p: dict[str, int]) -> int:
    """Elements of an ``unfold``'s output (a ``fold``'s input): b × c·kh·kw × :func:`unfold_blocks`,
    the largest tensor of either, by which both sweeps bound a draw."""
    return p["b"] * p["c"] * p["kh"] * p["kw"] * unfold_blocks(p)


def unfold_ok(kind: str, p: dict[str, int]) -> bool:
    """Whether an ``unfold``/``fold`` draw is one the sweep takes (true for other kinds): a kernel no
    larger than the unpadded image, a stride no longer than the kernel (no pixel skipped between
    patches; the trailing edge may still be left out, as a strided convolution leaves it)."""
    if kind not in ("unfold", "fold"):
        return True
    return p["kh"] <= p["h"] and p["kw"] <= p["w"] and p["s"] <= min(p["kh"], p["kw"]) and unfold_blocks(p) > 0


def sample_specs(grids: Mapping[str, Mapping[str, Sequence[int]]], fits: Callable[[str, dict[str, int]], bool],
                 per_kind: int, kinds: Iterable[str], seed: int, tries: int,
                 drawn_as: Mapping[str, str] | None = None) -> list[LayerSpec]:
    """``per_kind`` distinct shapes of each layer type drawn reproducibly from ``grids[kind]``,
    keeping those ``fits(kind, params)`` accepts (at most ``tries × per_kind`` draws a type). A grid named in
    ``drawn_as`` gives specs of the kind it maps to, judged by ``fits`` as that kind."""
    rng = random.Random(seed)
    specs: list[LayerSpec] = []
    for kind in kinds:
        if kind not in grids:
            raise ValueError(f"unknown layer type {kind!r}: choose from {', '.join(grids)}")
        grid, seen, built = grids[kind], set(), (drawn_as or {}).get(kind, kind)
        for _ in range(per_kind * tries):
            p = {name: rng.choice(values) for name, values in grid.items()}
            key = tuple(sorted(p.items()))
            if key in seen or not fits(built, p):
                continue
            seen.add(key)
            specs.append(LayerSpec(built, p))
            if len(seen) == per_kind:
                break
    return specs


def default_sweep(per_kind: int = 16, kinds: Iterable[str] = KINDS, seed: int = 0) -> list[LayerSpec]:
    """``per_kind`` distinct shapes of each layer type, sampled reproducibly from the grids; a kind of
    :data:`DRAWN_AS` gives specs of the kind it builds as.

    >>> {s.key.split(":")[0] for s in default_sweep(per_kind=2, kinds=["conv2d_large"])}
    {'conv2d'}
    """
    return sample_specs(_GRIDS, _size_ok, per_kind, kinds, seed, tries=50, drawn_as=DRAWN_AS)


def model_layers(name: str, batch_size: int = 1, seq_len: int | None = None,
                 image_size: int | None = None) -> list[ModelLayer]:
    """Every leaf layer of zoo model ``name`` that the captured graph names after a module.

    Layers are taken with the inputs they receive in a real forward pass (recorded by hooks), so
    each can be timed on its own.  Functional glue (``scope:op`` layers) has no module and is skipped;
    so is a module called more than once.
    """
    from pipeplan.costmodel.capture import capture
    from pipeplan.costmodel.zoo import build_model

    built = build_model(name, batch_size, seq_len=seq_len, image_size=image_size)
    graph = capture(built.model, built.args, name=name)
    # Identical layers (the 12 blocks of GPT-2) are timed once: the first of each signature is kept.
    kinds: dict[str, Layer] = {}
    seen = set()
    for layer in graph.layers:
        signature = (layer.module_type, str(layer.input_shapes), layer.flops, layer.param_bytes, layer.bytes_read)
        if signature not in seen:
            seen.add(signature)
            kinds[layer.name] = layer
    calls: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {}

    def record(path: str) -> Callable[..., None]:
        def hook(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            calls.setdefault(path, []).append((args, kwargs))
        return hook

    handles = [m.register_forward_pre_hook(record(path), with_kwargs=True)
               for path, m in built.model.named_modules() if path in kinds]
    try:
        with torch.no_grad():
            built.model(*built.args)
    finally:
        for h in handles:
            h.remove()
    return [ModelLayer(f"model:{name}/{path}", kinds[path], built.model.get_submodule(path), *got[0])
            for path, got in calls.items() if len(got) == 1]
