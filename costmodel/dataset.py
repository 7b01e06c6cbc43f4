"""The tidy profile dataset: one row per measurement, and the features the learned models read.

A row holds the layer's features (type, FLOPs, bytes, parameters, intensity, batch), the device
(type, peak FLOP/s, bandwidth), the contention (co-runners, kind, utilisation, the shares they take)
and the measured forward time (median, spread) with the settings it was measured under. The same
feature functions turn a captured :class:`~pipeplan.costmodel.graph.Layer` on a planner
:class:`~pipeplan.costmodel.hardware.Device` into a row at prediction time, so training and prediction can
never disagree on what a feature means.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pipeplan.costmodel.analytic import DEFAULT_OVERHEAD
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention, Device
from pipeplan.costmodel.kept_apart import APART_OPS, TORCH_NAMESPACES

__all__ = [
    "CATEGORICAL", "COLUMNS", "DTYPES", "NUMERIC", "OPTIONAL", "check_appendable", "contention_features",
    "contention_from_row", "device_features", "layer_features", "main_op", "model_inputs", "op_base", "read_dataset",
    "replace_rows", "single_dtype", "write_rows",
]

# Features the models see. Sizes enter as log10(1 + x) so that 1 kB and 1 GB layers are comparable.
CATEGORICAL = ("layer_kind", "main_op", "contention_kind")
NUMERIC = ("log_flops", "log_bytes_read", "log_bytes_written", "log_param_bytes", "log_intensity",
           "log_batch", "kernels", "log_roofline_s", "input_rank", "log_last_dim", "log_outer_numel",
           "log_min_dim", "log_conv_out_hw", "log_conv_out_channels", "log_conv_kernel_area", "log_conv_stride_area",
           "log_conv_in_channels", "corunners", "utilization", "compute_share", "memory_share", "channels_last")
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
_REQUIRED = tuple(c for c in COLUMNS if c not in OPTIONAL)
_INT_COLUMNS = {"flops", "bytes_read", "bytes_written", "param_bytes", "kernels", "batch", "threads",
                "corunners", "repeats", "iterations", "channels_last"}
_FLOAT_COLUMNS = {"peak_flops", "mem_bandwidth", "utilization", "compute_share", "memory_share", "time_s",
                  "time_min_s", "time_max_s", "spread", "loadavg", "event_time_s"}


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
    standardisation, a "SAME" padding).

    >>> main_op(Layer("x", "linear", "Linear", 0, flops=1, bytes_read=1, bytes_written=1, param_bytes=0,
    ...               activation_bytes=1, kernels=1, ops=["aten.view", "aten.addmm", "aten.view"]))
    'aten.addmm'
    >>> main_op(Layer("x", "conv", "WeightStandardizedConv2d", 0, flops=1, bytes_read=1, bytes_written=1,
    ...               param_bytes=0, activation_bytes=1, kernels=3, ops=["aten.batch_norm", "aten.pad", "aten.conv2d"]))
    'aten.conv2d'
    >>> main_op(Layer("x", "matmul", "functional", 0, flops=1, bytes_read=1, bytes_written=1, param_bytes=0,
    ...               activation_bytes=1, kernels=8, ops=["aten.transpose", "transformers.grouped_mm_fallback"]))
    'transformers.grouped_mm_fallback'
    """
    if layer.kind == "conv":  # BiT's convolutions first standardise their weights (aten.batch_norm on them)
        conv = next((op for op in layer.ops if op.startswith(_CONV_OPS)), None)
        if conv is not None:
            return conv
    apart = () if layer.kind in ("resize", "unfold") else APART_OPS
    for op in layer.ops:
        namespace = op.partition(".")[0] if "." in op else ""
        if namespace == "aten" and op not in _SHAPE_OPS and op not in apart:
            return op
        if namespace and namespace not in TORCH_NAMESPACES:
            return op  # a custom operator (transformers' grouped matmul): the work, not the view before it
    return layer.ops[0] if layer.ops else "none"


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


def model_inputs(row: dict[str, Any]) -> dict[str, Any]:
    """The model features of a row: categorical strings and numeric values, by name.

    ``dtype`` is deliberately not one of them: a model is trained on rows of one dtype
    (:func:`single_dtype`) and predicts for that dtype; ``event_time_s`` is not read either."""
    flops, moved = float(row["flops"]), float(row["bytes_read"]) + float(row["bytes_written"])
    # The idle roofline time with the per-kernel dispatch cost (as RooflineModel counts it): the learned
    # models predict how far the real time sits from it, which carries over to unseen sizes.
    overhead = DEFAULT_OVERHEAD["cpu" if "cpu" in str(row["device_type"]).lower() else "gpu"]
    roofline = (max(flops / float(row["peak_flops"]), moved / float(row["mem_bandwidth"]))
                + float(row["kernels"]) * overhead)
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
    })
    return out


def single_dtype(rows: Iterable[dict[str, Any]]) -> str:
    """The one dtype ``rows`` were measured in (``fp32`` for rows without the column).

    The learned models have no dtype feature (:func:`model_inputs` ignores the column on purpose: a
    layer's FLOPs and bytes are its fp32 capture's in every dtype), so rows of several dtypes must not
    be trained on together: ``ValueError`` says so.

    >>> single_dtype([{"dtype": "bf16"}, {"dtype": "bf16"}]), single_dtype([{"config": "x"}])
    ('bf16', 'fp32')
    """
    found = sorted({str(r.get("dtype") or "fp32") for r in rows})
    if len(found) > 1:
        raise ValueError(f"the rows were measured in {' and '.join(found)}: the learned cost model has no dtype "
                         "feature, so train one model per dtype (keep one dtype's rows of the profile)")
    return found[0] if found else "fp32"


def write_rows(path: str | Path, rows: Iterable[dict[str, Any]], append: bool = False) -> int:
    """Write (or append) rows to a CSV with the header :data:`COLUMNS`; returns how many.

    A row without an event span (every CPU row) leaves ``event_time_s`` empty.  Appending keeps the
    file's own header: one written before the :data:`OPTIONAL` columns gets rows without them, as
    long as they hold those columns' defaults (fp32, no event span); a row that does not raises
    ``ValueError`` naming the file and the column, and is not written (rows are streamed: those
    before it are)."""
    path = Path(path)
    new = not append or not path.exists() or path.stat().st_size == 0
    fields = COLUMNS if new else _appendable_header(path)
    dropped = [c for c in OPTIONAL if c not in fields]
    count = 0
    with path.open("w" if new else "a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="raise")
        if new:
            writer.writeheader()
        for row in rows:
            event = row.get("event_time_s")
            row = {**row, "event_time_s": ""} if event is None or event != event else row  # NaN: empty
            if dropped:
                column = _unstorable(fields, row)
                if column is not None:
                    raise ValueError(f"{path} has no {column} column (written before it), so a row with "
                                     f"{column}={row[column]!r} cannot be appended: write a new file")
                row = {k: v for k, v in row.items() if k not in dropped}
            writer.writerow(row)
            count += 1
    return count


def replace_rows(path: str | Path, rows: Iterable[dict[str, Any]],
                 by: Sequence[str] = ("config", "source")) -> tuple[int, int]:
    """Put ``rows`` in place of ``path``'s rows that match one of them in the columns ``by`` (the same layer
    configuration, by default; ``("source",)``: every row of a profiled model, layers since renamed
    included); returns (rows dropped, rows written).  For measurements taken again: appending would
    leave both, and the learned model would fit the median of a stale and a fresh time.

    Every other row is kept as it was, under the file's own header (as :func:`write_rows` appends).
    The file is written whole beside itself and moved into place, so a row that cannot be stored
    (``ValueError``, as for :func:`write_rows`) or an interrupted write leaves it unchanged."""
    path = Path(path)
    rows = list(rows)
    if not path.exists() or path.stat().st_size == 0:
        return 0, write_rows(path, rows)
    header = _appendable_header(path)
    measured = {tuple(str(r[c]) for c in by) for r in rows}
    columns = [header.index(c) for c in by]
    staged, dropped = path.with_name(f".{path.name}.replacing"), 0
    try:
        with path.open(newline="") as src, staged.open("w", newline="") as dst:
            reader, writer = csv.reader(src), csv.writer(dst)
            writer.writerow(next(reader))
            for record in reader:
                if tuple(record[i] for i in columns) in measured:
                    dropped += 1
                else:
                    writer.writerow(record)
        written = write_rows(staged, rows, append=True)
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)
    return dropped, written


def check_appendable(path: str | Path, dtype: str = "fp32", events: bool = False,
                     channels_last: bool = False) -> None:
    """Raise ``ValueError`` unless rows of ``dtype`` (with CUDA-event spans when ``events``, of layers
    on channels-last maps when ``channels_last``) can be appended to ``path``: a profile dataset, or
    nothing yet.  For a profiler to call before it measures, not after its first row."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return
    column = _unstorable(_appendable_header(path), {"dtype": dtype, "event_time_s": 0.0 if events else "",
                                                    "channels_last": 1 if channels_last else 0})
    if column is not None:
        what = {"dtype": f"{dtype} rows", "event_time_s": "rows with CUDA-event spans",
                "channels_last": "rows of channels-last layers"}[column]
        raise ValueError(f"{path} was written before the {column} column, so {what} cannot be appended "
                         "to it: write a new file" + (" (or add the column: python -m "
                                                      "pipeplan.costmodel.layout_backfill FILE)"
                                                      if column == "channels_last" else ""))


def _unstorable(header: Sequence[str], row: dict[str, Any]) -> str | None:
    """The first :data:`OPTIONAL` column ``header`` lacks while ``row`` holds more than its default
    there (empty, or the default, is what such a file means by its absence; rows read back from a CSV hold it
    as text)."""
    return next((column for column, default in OPTIONAL.items()
                 if column not in header and row.get(column, "") not in ("", default, str(default))), None)


def _appendable_header(path: Path) -> tuple[str, ...]:
    """The header of a profile CSV to append to: :data:`COLUMNS`, or those of an older file."""
    with path.open(newline="") as fh:
        header = tuple(next(csv.reader(fh), ()))
    unknown, missing = set(header) - set(COLUMNS), set(_REQUIRED) - set(header)
    if unknown or missing:
        raise ValueError(f"{path}: cannot append to it, it is not a pipeplan profile dataset "
                         f"(unknown columns: {', '.join(sorted(unknown)) or 'none'}; "
                         f"missing: {', '.join(sorted(missing)) or 'none'})")
    return header


def read_dataset(path: str | Path, required: Sequence[str] = _REQUIRED) -> list[dict[str, Any]]:
    """Rows of a profile CSV with numbers converted; raises ``ValueError`` naming what is wrong.

    The :data:`OPTIONAL` columns may be absent or empty (files written before them): they read as
    their defaults, fp32 and NaN."""
    path = Path(path)
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{path}: not a pipeplan profile dataset, missing columns {', '.join(missing)}")
            rows = []
            for line, raw in enumerate(reader, start=2):
                row: dict[str, Any] = dict(raw)
                for col, default in OPTIONAL.items():
                    if row.get(col) in (None, ""):
                        row[col] = default
                if row["dtype"] not in DTYPES:
                    raise ValueError(f"{path}, line {line}: dtype {row['dtype']!r} is not one of {', '.join(DTYPES)}")
                try:
                    for col in _INT_COLUMNS & row.keys():
                        row[col] = int(float(row[col]))
                    for col in _FLOAT_COLUMNS & row.keys():
                        row[col] = float(row[col])
                except (TypeError, ValueError):
                    raise ValueError(f"{path}, line {line}: a numeric column holds {raw!r}") from None
                if not row["time_s"] > 0:
                    raise ValueError(f"{path}, line {line}: time_s must be positive, got {row['time_s']}")
                rows.append(row)
    except OSError as exc:
        raise ValueError(f"cannot read dataset {path}: {exc}") from None
    if not rows:
        raise ValueError(f"{path}: the dataset has no rows")
    return rows
