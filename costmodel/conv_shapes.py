"""The geometry of the sweep's grouped convolutions: which draws are real layers, their outputs, their FLOPs.

The 1-D kinds (``conv1d``: dense or ``g`` groups; ``dwconv1d``: one filter per channel) and the 2-D
``dwconv2d`` (``cpg`` input channels per group, 1 for depthwise) of :mod:`pipeplan.costmodel.layerspecs`,
whose builders pad by ``k // 2`` on each side. The CPU sweep and the GPU sweep bound their draws by these.
"""

from __future__ import annotations

__all__ = ["conv1d_steps", "conv2d_side", "grouped_conv_flops", "grouped_conv_ok"]


def grouped_conv_ok(kind: str, p: dict[str, int]) -> bool:
    """Whether a grouped convolution draw is a real layer (true for other kinds): a stride no wider than the
    kernel, a 1-D kernel no longer than the input, groups that divide the channels. A 2-D kernel may be wider
    than its map, as OCR backbones run 5×5 kernels on 4×4 maps, over the padding.

    >>> grouped_conv_ok("dwconv2d", {"c": 96, "cpg": 16, "k": 3, "s": 2})  # 96 channels in groups of 16
    True
    >>> grouped_conv_ok("dwconv2d", {"c": 24, "cpg": 16, "k": 3, "s": 1})
    False
    """
    if kind == "dwconv1d":
        return p["s"] <= p["k"] <= p["l"]
    if kind == "conv1d":
        return p["s"] <= p["k"] <= p["l"] and p["cin"] % p["g"] == 0 and p["cout"] % p["g"] == 0
    if kind == "dwconv2d":
        return p["c"] % p["cpg"] == 0 and (p["s"] <= p["k"] or p["k"] == 1)
    return True


def conv1d_steps(p: dict[str, int]) -> int:
    """The output length of a ``conv1d`` or ``dwconv1d``: the builder pads by ``k // 2`` on each side,
    so an even kernel adds a step."""
    return (p["l"] + 2 * (p["k"] // 2) - p["k"]) // p["s"] + 1


def conv2d_side(p: dict[str, int]) -> int:
    """The output side of a ``dwconv2d`` on its ``hw``×``hw`` map.

    >>> conv2d_side({"hw": 7, "k": 3, "s": 2}), conv2d_side({"hw": 4, "k": 5, "s": 1})
    (4, 4)
    """
    return (p["hw"] + 2 * (p["k"] // 2) - p["k"]) // p["s"] + 1


def grouped_conv_flops(kind: str, p: dict[str, int]) -> int:
    """Multiply-adds × 2 of a ``conv1d``, ``dwconv1d`` or ``dwconv2d`` at these parameters (0 for other kinds)."""
    if kind == "dwconv1d":  # one k-tap filter per channel
        return 2 * p["b"] * p["c"] * p["k"] * conv1d_steps(p)
    if kind == "conv1d":
        return 2 * p["b"] * p["cout"] * (p["cin"] // p["g"]) * p["k"] * conv1d_steps(p)
    if kind == "dwconv2d":  # each output reads cpg channels of a k×k window
        return 2 * p["b"] * p["c"] * p["cpg"] * p["k"] ** 2 * conv2d_side(p) ** 2
    return 0
