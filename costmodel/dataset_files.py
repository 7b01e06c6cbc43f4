"""Profile datasets on disk: reading a CSV of rows back with its numbers typed, writing and appending rows
under a file's own header (older files lack the columns added since), and replacing a layer's rows when it is
measured again.  What a row holds and the features read from it are :mod:`pipeplan.costmodel.dataset`'s.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pipeplan.costmodel.dataset import COLUMNS, DTYPES, OPTIONAL

__all__ = ["check_appendable", "read_dataset", "replace_rows", "single_dtype", "write_rows"]

_REQUIRED = tuple(c for c in COLUMNS if c not in OPTIONAL)
_INT_COLUMNS = {"flops", "bytes_read", "bytes_written", "param_bytes", "kernels", "batch", "threads",
                "corunners", "repeats", "iterations", "channels_last"}
_FLOAT_COLUMNS = {"peak_flops", "mem_bandwidth", "utilization", "compute_share", "memory_share", "time_s",
                  "time_min_s", "time_max_s", "spread", "loadavg", "event_time_s"}


def single_dtype(rows: Iterable[dict[str, Any]]) -> str:
    """The one dtype ``rows`` were measured in (``fp32`` for rows without the column).

    The learned models have no dtype feature (:func:`~pipeplan.costmodel.dataset.model_inputs` ignores
    the column on purpose: a layer's FLOPs and bytes are its fp32 capture's in every dtype), so rows of
    several dtypes must not be trained on together: ``ValueError`` says so.

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
