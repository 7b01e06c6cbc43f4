"""GPU-sized layer shapes for the profiler: what GPUs run, not what fits one CPU core.

The CPU sweep (:func:`pipeplan.costmodel.layerspecs.default_sweep`) keeps each call under ~50 ms on one
core, so on an H100 its median layer takes 21 µs and every layer is launch-bound. This grid spans
what inference on a GPU runs: 128 to 32k tokens, hidden sizes 512 to 8192, convolutions at real
image sizes (224–512 pixels, 64–2048 channels), batches of 1 to 64. Shapes are capped so that one
call stays under about 100 ms on a large GPU in fp32.

>>> specs = gpu_sweep(per_kind=4, kinds=("linear",))
>>> len(specs), all(s.kind == "linear" for s in specs)
(4, True)
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeplan.costmodel.conv_shapes import conv1d_steps, grouped_conv_flops, grouped_conv_ok
from pipeplan.costmodel.layerspecs import (
    DRAWN_AS,
    KINDS,
    LayerSpec,
    resize_elements,
    resize_ok,
    sample_specs,
    unfold_ok,
    unfold_patch_elements,
)
from pipeplan.costmodel.pointwise_chains import CHAINS

__all__ = ["GPU_GRIDS", "gpu_sweep"]

_TOKENS = [128, 512, 1024, 2048, 4096, 8192, 16384, 32768]
_HIDDEN = [512, 768, 1024, 2048, 4096, 8192]
# Patches of real images (ViT-style 14/16-pixel patches, MobileViT's 2×2) and sliding token windows (w = 1).
_UNFOLD = {"b": [1, 8, 32, 64], "c": [3, 64, 256, 768, 1024], "h": [14, 56, 224, 384, 512, 1024],
           "w": [1, 14, 56, 224, 384, 512], "kh": [1, 2, 3, 9, 14, 16], "kw": [1, 2, 3, 14, 16], "s": [1, 2, 14, 16]}
GPU_GRIDS: dict[str, dict[str, list[int]]] = {
    "linear": {"m": _TOKENS, "k": _HIDDEN, "n": [*_HIDDEN, 3 * 768, 4 * 4096]},
    "conv2d": {"b": [1, 8, 32, 64], "cin": [3, 64, 128, 256, 512, 1024, 2048], "cout": [64, 128, 256, 512, 2048],
               "k": [1, 3, 7], "s": [1, 2], "hw": [7, 14, 28, 56, 112, 224, 384, 512]},
    "bmm": {"b": [1, 8, 32, 64], "m": [128, 512, 2048], "k": [64, 128, 512], "n": [128, 512, 2048]},
    "attention": {"b": [1, 8, 32, 64], "h": [8, 12, 16, 32], "t": [128, 512, 1024, 2048, 4096], "d": [64, 128],
                  "causal": [0, 1]},
    "layernorm": {"m": _TOKENS, "c": _HIDDEN},
    "batchnorm": {"b": [1, 8, 32, 64], "c": [64, 256, 512, 2048], "hw": [7, 14, 28, 56, 112]},
    "relu": {"m": _TOKENS, "c": _HIDDEN},
    "gelu": {"m": _TOKENS, "c": [*_HIDDEN, 4 * 4096]},
    "maxpool": {"b": [1, 8, 32, 64], "c": [64, 128, 256], "hw": [56, 112, 224], "k": [2, 3]},
    "avgpool": {"b": [1, 8, 32, 64], "c": [512, 1024, 2048], "hw": [7, 14, 28]},
    "embedding": {"v": [32000, 50257, 128256], "c": [768, 2048, 4096], "b": [1, 8, 32, 64], "t": [128, 512, 2048]},
    "conv1d": {"b": [1, 8, 32, 64], "cin": [1, 80, 128, 512, 1024, 2048], "cout": [128, 512, 1024, 2048],
               "k": [1, 3, 5, 10], "s": [1, 2, 5], "g": [1, 1, 4], "l": [128, 1024, 4096, 16000, 65536]},
    "dwconv1d": {"b": [1, 8, 32, 64], "c": [512, 1024, 2048, 4096], "k": [3, 4, 15, 31], "s": [1, 2],
                 "l": [128, 1024, 4096, 16384]},
    "unfold": _UNFOLD,
    "fold": _UNFOLD,
    "resize": {"b": [1, 8, 32, 64], "c": [1, 3, 64, 256, 512], "hw": [14, 28, 56, 112, 224, 384],
               "o": [56, 112, 224, 384, 512, 1024], "mode": [0, 1, 1, 2, 3]},
    "activation": {"b": [1, 8, 32, 64], "c": [64, 256, 768, 1024, 2048, 4096], "hw": [7, 14, 28, 56, 112],
                   "rank": [3, 4, 4], "op": [0, 0, 1, 1, 2, 3, 4, 5, 6]},
    "pointwise": {"b": [1, 8, 32, 64], "c": _HIDDEN, "t": _TOKENS, "chain": list(range(len(CHAINS)))},
    "softmax": {"b": [1, 8, 32, 64], "m": _TOKENS, "c": [8, 64, 512, 2048, 4096, 32000]},
    "dwconv2d": {"b": [1, 8, 32, 64], "c": [64, 128, 256, 512, 768, 1024], "k": [1, 3, 5, 7], "s": [1, 2],
                 "hw": [7, 14, 28, 56, 112], "cpg": [1, 1, 1, 4, 16]},
}
_MAX_FLOPS = 5e12  # ~100 ms at the fp32 peak of an H100
_MAX_BYTES = 8 * 2**30  # per input tensor in fp32, well inside any inference GPU's memory


def _fits(kind: str, p: dict[str, int]) -> bool:
    out_hw = p.get("hw", 0) // max(1, p.get("s", 1))
    flops = {
        "linear": 2 * p.get("m", 0) * p.get("k", 0) * p.get("n", 0),
        "conv2d": 2 * p.get("b", 0) * p.get("cin", 0) * p.get("cout", 0) * p.get("k", 0) ** 2 * out_hw**2,
        "bmm": 2 * p.get("b", 0) * p.get("m", 0) * p.get("k", 0) * p.get("n", 0),
        "attention": 4 * p.get("b", 0) * p.get("h", 0) * p.get("t", 0) ** 2 * p.get("d", 0),
    }.get(kind, grouped_conv_flops(kind, p))
    first_input = {
        "linear": p.get("m", 0) * p.get("k", 0), "layernorm": p.get("m", 0) * p.get("c", 0),
        "relu": p.get("m", 0) * p.get("c", 0), "gelu": p.get("m", 0) * p.get("c", 0),
        "attention": p.get("b", 0) * p.get("h", 0) * p.get("t", 0) * p.get("d", 0),
        "bmm": p.get("b", 0) * p.get("m", 0) * max(p.get("k", 0), p.get("n", 0)),
        "conv1d": p.get("b", 0) * p.get("cin", 0) * p.get("l", 0),
        "dwconv1d": p.get("b", 0) * p.get("c", 0) * p.get("l", 0),
        "pointwise": p.get("b", 0) * p.get("c", 0) * p.get("t", 0),
        "softmax": p.get("b", 0) * p.get("m", 0) * p.get("c", 0),
    }.get(kind, p.get("b", 1) * max(p.get("c", 0), p.get("cin", 0)) * p.get("hw", 1) ** 2)
    if kind == "conv2d" and (p["hw"] < p["k"] or (p["cin"] == 3 and p["hw"] < 224)):
        return False  # RGB input only at real image sizes
    if not (grouped_conv_ok(kind, p) and unfold_ok(kind, p)):
        return False
    if kind in ("unfold", "fold"):  # the patch matrix is the large side
        first_input = unfold_patch_elements(p)
    if kind == "resize":
        if not resize_ok(p):
            return False
        first_input = resize_elements(p)  # an upsample's output is the large side
    if kind in ("conv1d", "dwconv1d"):  # a one-channel input can still have a huge output
        first_input = max(first_input, p["b"] * p.get("cout", p.get("c", 0)) * conv1d_steps(p))
    return flops <= _MAX_FLOPS and 4 * first_input <= _MAX_BYTES


def gpu_sweep(per_kind: int = 24, kinds: Iterable[str] = KINDS, seed: int = 0) -> list[LayerSpec]:
    """``per_kind`` distinct GPU-sized shapes of each layer type, sampled reproducibly. The CPU sweep's
    ``conv2d_large`` is this sweep's ``conv2d``, whose maps already reach 512 px.

    >>> gpu_sweep(per_kind=3, kinds=["conv2d", "conv2d_large"]) == gpu_sweep(per_kind=3, kinds=["conv2d"])
    True
    """
    kinds = list(dict.fromkeys(DRAWN_AS.get(kind, kind) for kind in kinds))
    return sample_specs(GPU_GRIDS, _fits, per_kind, kinds, seed, tries=100)
