"""What a drawn layer shape means, for the sweep's later kinds: whether it is a layer real models
have, its FLOPs, and its largest tensor, so that the CPU sweep (:mod:`pipeplan.costmodel.layerspecs`)
and the GPU sweep (:mod:`pipeplan.costmodel.gpu_sweep`) bound it alike.

The kinds added after the first sweep each have their geometry here: 1-D convolutions (``conv1d``,
``dwconv1d``), patch unfolds and folds (``unfold``, ``fold``), resizing (``resize``) and transposed
convolutions (``convtranspose1d``, ``convtranspose2d``). Each function takes a kind and its integer
parameters, as a :class:`~pipeplan.costmodel.layerspecs.LayerSpec` holds them.

>>> convtranspose_steps({"l": 32, "k": 8, "s": 4})  # HiFi-GAN: 4× upsampling, padding (k - s) / 2
128
>>> unfold_blocks({"h": 64, "w": 1, "kh": 9, "kw": 1, "s": 1})  # ConvBERT: a 9-token window per token
64
"""

from __future__ import annotations

__all__ = [
    "RESIZE_MODES",
    "conv1d_flops",
    "conv1d_ok",
    "conv1d_steps",
    "convtranspose_padding",
    "convtranspose_steps",
    "draw_flops",
    "draw_ok",
    "largest_tensor",
    "resize_mode",
    "unfold_blocks",
    "unfold_ok",
    "unfold_padding",
]

# resize's ``mode`` parameter: what F.interpolate is asked for (align_corners for the bilinear ones)
RESIZE_MODES = (("nearest", None), ("bilinear", False), ("bilinear", True))


def conv1d_ok(kind: str, p: dict[str, int]) -> bool:
    """Whether a 1-D convolution draw is a real layer (true for other kinds): a stride no wider than the
    kernel, a kernel no longer than the input, groups that divide both channel counts."""
    if kind == "dwconv1d":
        return p["s"] <= p["k"] <= p["l"]
    if kind == "conv1d":
        return p["s"] <= p["k"] <= p["l"] and p["cin"] % p["g"] == 0 and p["cout"] % p["g"] == 0
    return True


def conv1d_steps(p: dict[str, int]) -> int:
    """The output length of a ``conv1d`` or ``dwconv1d``: the builder pads by ``k // 2`` on each side,
    so an even kernel adds a step."""
    return (p["l"] + 2 * (p["k"] // 2) - p["k"]) // p["s"] + 1


def conv1d_flops(kind: str, p: dict[str, int]) -> int:
    """Multiply-adds × 2 of a ``conv1d`` or ``dwconv1d`` at these parameters (0 for other kinds)."""
    if kind == "dwconv1d":  # one k-tap filter per channel
        return 2 * p["b"] * p["c"] * p["k"] * conv1d_steps(p)
    if kind == "conv1d":
        return 2 * p["b"] * p["cout"] * (p["cin"] // p["g"]) * p["k"] * conv1d_steps(p)
    return 0


def unfold_padding(p: dict[str, int]) -> tuple[int, int]:
    """An ``unfold``/``fold`` draw's padding: half the kernel for sliding windows (stride 1, as ConvBERT
    pads its token windows), none for patches cut at a stride."""
    return (p["kh"] // 2, p["kw"] // 2) if p["s"] == 1 else (0, 0)


def unfold_blocks(p: dict[str, int]) -> int:
    """How many kh×kw patches an ``unfold`` cuts from an h×w image (a ``fold`` sums back): the columns
    of the patch matrix."""
    (ph, pw), s = unfold_padding(p), p["s"]
    return max(0, (p["h"] + 2 * ph - p["kh"]) // s + 1) * max(0, (p["w"] + 2 * pw - p["kw"]) // s + 1)


def unfold_ok(kind: str, p: dict[str, int]) -> bool:
    """Whether an ``unfold``/``fold`` draw is one real models make (true for other kinds): a kernel
    inside the image, a stride no longer than the kernel (patches that leave no pixel out)."""
    if kind not in ("unfold", "fold"):
        return True
    return p["kh"] <= p["h"] and p["kw"] <= p["w"] and p["s"] <= min(p["kh"], p["kw"]) and unfold_blocks(p) > 0


def resize_mode(p: dict[str, int]) -> tuple[str, bool | None]:
    """A ``resize`` draw's interpolation mode and ``align_corners`` (None for nearest)."""
    return RESIZE_MODES[p["mode"]]


def convtranspose_padding(p: dict[str, int]) -> int:
    """A transposed convolution's padding: ``(k - s) // 2``, as upsampling decoders pad so that the
    output is ``s`` times the input (HiFi-GAN, DPT)."""
    return (p["k"] - p["s"]) // 2


def convtranspose_steps(p: dict[str, int]) -> int:
    """The output length (per spatial side) of a ``convtranspose1d``/``convtranspose2d`` draw."""
    side = p["l"] if "l" in p else p["hw"]
    return (side - 1) * p["s"] - 2 * convtranspose_padding(p) + p["k"]


def draw_ok(kind: str, p: dict[str, int]) -> bool:
    """Whether a draw of any kind is a layer real models have (the older kinds: always)."""
    if kind in ("convtranspose1d", "convtranspose2d"):
        return p["s"] <= p["k"]  # a stride past the kernel leaves output positions no input reaches
    if kind == "resize":
        return p["o"] != p["hw"]
    return conv1d_ok(kind, p) and unfold_ok(kind, p)


def draw_flops(kind: str, p: dict[str, int]) -> int:
    """FLOPs of a draw of the later kinds (0 for the rest, and for resizes, unfolds and folds)."""
    if kind == "convtranspose1d":  # every input step scatters a k-tap filter per output channel
        return 2 * p["b"] * p["cin"] * p["cout"] * p["k"] * p["l"]
    if kind == "convtranspose2d":
        return 2 * p["b"] * p["cin"] * p["cout"] * p["k"] ** 2 * p["hw"] ** 2
    return conv1d_flops(kind, p)


def largest_tensor(kind: str, p: dict[str, int]) -> int | None:
    """Elements of the largest tensor a draw of the kinds since the unfolds reads or writes; None for
    the older kinds, whose bounds are their sweeps' own (and left as they were, so that their seeded
    samples stay the same)."""
    if kind in ("unfold", "fold"):  # the patch matrix, kh·kw copies of the image
        return p["b"] * p["c"] * p["kh"] * p["kw"] * unfold_blocks(p)
    if kind == "resize":
        return p["b"] * p["c"] * max(p["hw"], p["o"]) ** 2
    if kind == "convtranspose1d":
        return p["b"] * max(p["cin"] * p["l"], p["cout"] * convtranspose_steps(p))
    if kind == "convtranspose2d":
        return p["b"] * max(p["cin"] * p["hw"] ** 2, p["cout"] * convtranspose_steps(p) ** 2)
    return None
