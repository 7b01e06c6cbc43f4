"""The tidy profile dataset: one row per measurement, and the features the learned models read.

A row holds the layer's features (type, FLOPs, bytes, parameters, intensity, batch), the device
(type, peak FLOP/s, bandwidth), the contention (co-runners, kind, utilisation, the shares they take)
and the measured forward time (median, spread) with the settings it was measured under. The same
feature functions turn a captured :class:`~pipeplan.costmodel.graph.Layer` on a planner
:class:`~pipeplan.costmodel.hardware.Device` into a row at prediction time, so training and prediction can
never disagree on what a feature means.
"""

from __future__ import annotations

import math
from typing import Any

from pipeplan.costmodel.analytic import DEFAULT_OVERHEAD
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention, Device
from pipeplan.costmodel.kept_apart import APART_OPS, TORCH_NAMESPACES

__all__ = [
    "CATEGORICAL", "COLUMNS", "DTYPES", "NUMERIC", "OPTIONAL", "contention_features", "contention_from_row",
    "device_features", "layer_features", "main_op", "model_inputs", "op_base", "roofline_s",
]

# Features the models see. Sizes enter as log10(1 + x) so that 1 kB and 1 GB layers are comparable.
CATEGORICAL = ("layer_kind", "main_op", "contention_kind")
NUMERIC = ("log_flops", "log_bytes_read", "log_bytes_written", "log_param_bytes", "log_intensity",
           "log_batch", "kernels", "log_roofline_s", "input_rank", "log_last_dim", "log_outer_numel",
           "log_min_dim", "log_conv_out_hw", "log_conv_out_channels", "log_conv_kernel_area", "log_conv_stride_area",
           "log_conv_in_channels", "corunners", "utilization", "compute_share", "memory_share", "channels_last",
           "log_conv_reduction")
# Numeric features are only ever appended: a model file trained before one was added predicts with the
# ones it has (``estimators.numeric_of``), the new one absent from its matrix.

# Every column of the CSV, in order.
COLUMNS = (
    # what was measured
    "config", "source", "layer_kind", "main_op", "module_type", "input_shapes",
    "flops", "bytes_read", "bytes_written", "param_bytes", "kernels", "batch", "dtype",
    # where
    "device_type", "device_name", "peak_flops", "mem_bandwidth", "threads", "cores",
    # under what load
    "contention", "corunners", "contention_kind", "utilization", "compute_share", "memory_share",
    # the measurement
    "time_s", "time_min_s", "time_max_s", "spread", "repeats", "iterations", "event_time_s",
    "loadavg", "torch_version", "measured_at",
    # added later, so last: an older file gains it as an empty trailing field
    "channels_last",
)
DTYPES = ("fp32", "bf16", "fp16")
# Columns added after profiles were shipped, and what a row without them (or with them empty) reads as:
# ``dtype``, what the layer ran in (profiles before it were all fp32); ``event_time_s``, the span between
# CUDA events around the same calls (GPU rows only; NaN on CPU rows and in older files); ``channels_last``,
# the layer's first input a 4-D map in channels-last strides (1) or not (0: every older row's layers were
# timed on the contiguous inputs the sweep builds, or captured before the layout was recorded).
OPTIONAL: dict[str, Any] = {"dtype": "fp32", "event_time_s": math.nan, "channels_last": 0}


# Operators that only move views or metadata around a layer's real work.
_SHAPE_OPS = frozenset(
    f"aten.{name}" for name in ("view", "reshape", "_unsafe_view", "transpose", "permute", "unsqueeze", "squeeze",
                                "expand", "slice", "select", "split", "flatten", "t", "to", "detach", "alias",
                                "contiguous", "clone", "unbind", "chunk"))
_CONV_OPS = ("aten.conv", "aten._convolution")  # conv1d/2d/3d, convolution, conv_transpose1d/2d/3d


def main_op(layer: Layer) -> str:
    """The layer's first operator that does work (``aten.gelu`` vs ``aten.relu``, ``aten.addmm``, …).

    The layer kind alone puts ReLU and GELU together, though GELU costs several times more.  A resize
    or unfold names only a layer of that kind (capture makes each one a layer of its own): inside a
    module of another kind it is a small part (BEiT's position-bias table, resized before a gather
    many times its size), and priced as the swept resizes it would be several times too dear.

    A convolution layer is named by its convolution, whatever runs before it in the layer (a weight
    standardisation, a "SAME" padding), and a layer that calls a custom operator by that operator.

    >>> main_op(Layer("x", "linear", "Linear", 0, flops=1, bytes_read=1, bytes_written=1, param_bytes=0,
    ...               activation_bytes=1, kernels=1, ops=["aten.view", "aten.addmm", "aten.view"]))
    'aten.addmm'
    >>> main_op(Layer("x", "conv", "WeightStandardizedConv2d", 0, flops=1, bytes_read=1, bytes_written=1,
    ...               param_bytes=0, activation_bytes=1, kernels=3, ops=["aten.batch_norm", "aten.pad", "aten.conv2d"]))
    'aten.conv2d'
    >>> main_op(Layer("x", "matmul", "functional", 0, flops=1, bytes_read=1, bytes_written=1, param_bytes=0,
    ...               activation_bytes=1, kernels=8, ops=["aten.transpose", "transformers.grouped_mm_fallback"]))
    'transformers.grouped_mm_fallback'
    >>> main_op(Layer("x", "matmul", "GptOssExperts", 0, flops=1, bytes_read=1, bytes_written=1, param_bytes=0,
    ...               activation_bytes=1, kernels=39,
    ...               ops=["aten.sort", "aten.histc", "transformers.grouped_mm_fallback"]))
    'transformers.grouped_mm_fallback'
    """
    if layer.kind == "conv":  # BiT's convolutions first standardise their weights (aten.batch_norm on them)
        conv = next((op for op in layer.ops if op.startswith(_CONV_OPS)), None)
        if conv is not None:
            return conv
    # A custom operator (transformers' grouped matmul) is the layer's work wherever it runs in it: GPT-OSS's
    # experts are one layer from the routing's sort to the grouped matmuls, which was named a sort.
    custom = next((op for op in layer.ops if "." in op and op.partition(".")[0] not in TORCH_NAMESPACES), None)
    if custom is not None:
        return custom
    apart = () if layer.kind in ("resize", "unfold") else APART_OPS
    work = (op for op in layer.ops if op.startswith("aten.") and op not in _SHAPE_OPS and op not in apart)
    return next(work, layer.ops[0] if layer.ops else "none")


def op_base(op: str) -> str:
    """The operator a variant is of (``aten.gelu[tanh]`` → ``aten.gelu``; others unchanged): what a cost model
    that never saw the variant prices it as.

    >>> op_base("aten.gelu[tanh]"), op_base("aten.gelu")
    ('aten.gelu', 'aten.gelu')
    """
    return op.split("[", 1)[0]


def _log(x: float) -> float:
    return math.log10(1.0 + max(0.0, float(x)))


def layer_features(layer: Layer) -> dict[str, Any]:
    """The layer's columns of a row (raw values; :func:`model_inputs` derives the logs)."""
    batch = layer.input_shapes[0][0] if layer.input_shapes and layer.input_shapes[0] else 1
    return {"layer_kind": layer.kind, "main_op": main_op(layer), "module_type": layer.module_type,
            "input_shapes": ";".join("x".join(map(str, s)) for s in layer.input_shapes),
            "flops": layer.flops, "bytes_read": layer.bytes_read, "bytes_written": layer.bytes_written,
            "param_bytes": layer.param_bytes, "kernels": layer.kernels, "batch": batch,
            "channels_last": int(layer.channels_last)}


def device_features(device: Device) -> dict[str, Any]:
    return {"device_type": device.type, "peak_flops": device.peak_flops, "mem_bandwidth": device.mem_bandwidth}


def contention_features(load: Contention) -> dict[str, Any]:
    compute, memory = load.shares()
    return {"contention": load.describe(), "corunners": load.corunners,
            "contention_kind": "none" if load.idle else ("utilization" if load.utilization is not None else load.kind),
            "utilization": load.utilization or 0.0, "compute_share": compute, "memory_share": memory}


def contention_from_row(row: dict[str, Any]) -> Contention:
    """The :class:`Contention` a row was measured under.

    Co-runners' duty has no column of its own (adding one would make every profile written before
    unreadable); the ``contention`` text, :meth:`Contention.describe`'s, carries it (``50%compute``).

    >>> row = contention_features(Contention.parse("2x25%memory"))
    >>> contention_from_row(row).describe()
    '2×25%memory'
    """
    if row["contention_kind"] == "none":
        return Contention()
    if row["contention_kind"] == "utilization":
        return Contention(utilization=float(row["utilization"]))  # the column is exact; the text is rounded
    load = Contention(corunners=int(row["corunners"]), kind=row["contention_kind"])
    try:
        written = Contention.parse(str(row["contention"]))
    except ValueError as exc:
        raise ValueError(f"a profile row's contention column is unreadable: {exc}") from None
    if (written.corunners, written.kind) != (load.corunners, load.kind):
        raise ValueError(f"a profile row's contention {row['contention']!r} disagrees with its columns "
                         f"corunners={load.corunners} and contention_kind={load.kind!r}")
    return load.model_copy(update={"duty": written.duty})


def _first_shape(input_shapes: str) -> list[int]:
    """The dimensions of a row's first input ("8x128x768;768x768" → [8, 128, 768]; none: [])."""
    first = next((s for s in str(input_shapes).split(";") if s), "")
    return [int(x) for x in first.split("x") if x]


def _shape_features(input_shapes: str) -> dict[str, float]:
    """The first input's shape, beyond its size: kernels run at different speeds on the same FLOPs
    and bytes depending on the innermost (contiguous) dimension and the smallest one, e.g. a GEMM
    with a 16-wide side or a convolution on 7×7 maps.

    >>> {k: round(v, 2) for k, v in _shape_features("8x128x768;768x768").items()}
    {'input_rank': 3.0, 'log_last_dim': 2.89, 'log_outer_numel': 3.01, 'log_min_dim': 0.95}
    """
    dims = _first_shape(input_shapes) or [1]
    outer = math.prod(dims[:-1])
    return {"input_rank": float(len(dims)), "log_last_dim": _log(dims[-1]), "log_outer_numel": _log(outer),
            "log_min_dim": _log(min(dims))}


def _conv_features(row: dict[str, Any]) -> dict[str, float]:
    """A convolution's geometry, recovered from what every layer records: an N×C×H×W input (N×C×L
    for a 1-D convolution, whose "H·W" is L and "k²" is k), FLOPs = 2·N·(output H·W)·(weights),
    weights = C_out·C_in·k²/groups, outputs = N·C_out·(output H·W). CPU convolution kernels change
    speed with channels, kernel size and stride at equal FLOPs; zeros for other layers. The weights
    are read from the layer's parameters, bias included, as every shipped model was trained: it skews
    layers with few weights per output channel (a 4-tap depthwise convolution's length reads 4/5).

    >>> f = _conv_features({"layer_kind": "conv", "input_shapes": "2x16x28x28", "param_bytes": 32 * 16 * 9 * 4,
    ...                     "flops": 2 * 2 * 14 * 14 * 32 * 16 * 9, "bytes_written": 2 * 32 * 14 * 14 * 4})
    >>> [round(10 ** f[k] - 1) for k in ("log_conv_out_hw", "log_conv_out_channels", "log_conv_kernel_area",
    ...                                  "log_conv_stride_area", "log_conv_in_channels")]
    [196, 32, 9, 4, 16]
    >>> f = _conv_features({"layer_kind": "conv", "input_shapes": "2x64x128", "param_bytes": 64 * 4 * 4,
    ...                     "flops": 2 * 2 * 128 * 64 * 4, "bytes_written": 2 * 64 * 128 * 4})  # depthwise, k=4
    >>> [round(10 ** f[k] - 1, 2) for k in ("log_conv_out_hw", "log_conv_out_channels", "log_conv_kernel_area",
    ...                                     "log_conv_stride_area", "log_conv_in_channels")]
    [128.0, 64.0, 0.06, 1.0, 64.0]
    """
    names = ("log_conv_out_hw", "log_conv_out_channels", "log_conv_kernel_area", "log_conv_stride_area",
             "log_conv_in_channels")
    dims = _first_shape(row["input_shapes"])
    weights = float(row["param_bytes"]) / 4.0
    if row["layer_kind"] != "conv" or len(dims) not in (3, 4) or weights < 1 or min(dims) < 1:
        return dict.fromkeys(names, 0.0)
    batch, c_in, hw = dims[0], dims[1], math.prod(dims[2:])
    out_hw = max(1.0, float(row["flops"]) / (2.0 * batch * weights))
    c_out = max(1.0, float(row["bytes_written"]) / 4.0 / (batch * out_hw))
    return dict(zip(names, (_log(out_hw), _log(c_out), _log(weights / (c_out * c_in)), _log(hw / out_hw), _log(c_in)),
                    strict=True))


def _conv_reduction(row: dict[str, Any]) -> float:
    """log10(1 + the products summed into each output) of a convolution: input channels per group × kernel
    area (FLOPs ÷ 2 ÷ outputs), 0 for other layers. Unlike the weights per channel pair the kernel-area feature
    reads, it tells a depthwise convolution (a 3×3 one sums 9) from a dense one of the same kernel (9 × its
    channels), and it is 1 for a depthwise 1×1, which one CPU thread runs as one convolution per group.

    >>> depthwise_1x1 = {"layer_kind": "conv", "flops": 2 * 2 * 384 * 16, "bytes_written": 4 * 2 * 384 * 16}
    >>> round(10 ** _conv_reduction(depthwise_1x1) - 1, 6)
    1.0
    """
    outputs = float(row["bytes_written"]) / 4.0
    if row["layer_kind"] != "conv" or outputs < 1 or float(row["flops"]) <= 0:
        return 0.0
    return _log(float(row["flops"]) / (2.0 * outputs))


def roofline_s(row: dict[str, Any]) -> float:
    """A row's FLOPs at its device's peak or its bytes at its bandwidth, whichever takes longer (no dispatch).

    >>> roofline_s({"flops": 2e9, "bytes_read": 1e6, "bytes_written": 0, "peak_flops": 1e11, "mem_bandwidth": 1e10})
    0.02
    """
    moved = float(row["bytes_read"]) + float(row["bytes_written"])
    return max(float(row["flops"]) / float(row["peak_flops"]), moved / float(row["mem_bandwidth"]))


def model_inputs(row: dict[str, Any]) -> dict[str, Any]:
    """The model features of a row: categorical strings and numeric values, by name.

    ``dtype`` is deliberately not one of them: a model is trained on rows of one dtype
    (:func:`single_dtype`) and predicts for that dtype; ``event_time_s`` is not read either."""
    flops, moved = float(row["flops"]), float(row["bytes_read"]) + float(row["bytes_written"])
    # The idle roofline time with the per-kernel dispatch cost (as RooflineModel counts it): the learned
    # models predict how far the real time sits from it, which carries over to unseen sizes.
    overhead = DEFAULT_OVERHEAD["cpu" if "cpu" in str(row["device_type"]).lower() else "gpu"]
    roofline = roofline_s(row) + float(row["kernels"]) * overhead
    out: dict[str, Any] = {name: row[name] for name in CATEGORICAL}
    out.update({
        "log_flops": _log(flops), "log_bytes_read": _log(row["bytes_read"]),
        "log_bytes_written": _log(row["bytes_written"]), "log_param_bytes": _log(row["param_bytes"]),
        "log_intensity": math.log10((flops + 1.0) / (moved + 1.0)), "log_batch": _log(row["batch"]),
        "kernels": float(row["kernels"]), "log_roofline_s": math.log10(roofline + 1e-9),
        **_shape_features(row["input_shapes"]), **_conv_features(row),
        "corunners": float(row["corunners"]), "utilization": float(row["utilization"]),
        "compute_share": float(row["compute_share"]), "memory_share": float(row["memory_share"]),
        "channels_last": float(row.get("channels_last") or 0),
        "log_conv_reduction": _conv_reduction(row),
    })
    return out
