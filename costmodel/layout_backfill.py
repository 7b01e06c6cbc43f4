"""Add the ``channels_last`` column to profile and in-model CSVs written before layers recorded it.

A row's layer is captured again, as it was when it was measured, to learn whether its first input was
a 4-D map in channels-last strides:

- a sweep shape (``conv2d:b=2,…``) was built contiguous unless its key says ``cl=1``;
- a zoo model's layer (``model:convnext-tiny/…``) and an in-model row (``in-model:convnextv2-b2-i32-w16``,
  :mod:`pipeplan.costmodel.tuning_set`) come from capturing that model again (deterministic: same config,
  same graph, same names).

The file is rewritten in place, every other field as it was; the column goes last, as in
:data:`~pipeplan.costmodel.dataset.COLUMNS`. A zoo layer today's capture no longer names (BERT's pooler,
now dropped as a dead layer) reads 0 and is counted in the summary; an in-model entry that is not in the
tuning set is an error naming it, and the file is left untouched.

    python -m pipeplan.costmodel.layout_backfill costmodel/data/profile-cpu-epyc.csv costmodel/data/inmodel-cpu-epyc.csv
"""

from __future__ import annotations

import argparse
import csv
import functools
import sys
from pathlib import Path

__all__ = ["backfill", "layouts_of_model", "layouts_of_tuning_entry"]


@functools.cache
def layouts_of_model(name: str) -> dict[str, bool]:
    """Zoo model ``name``'s profiled layers (``model:NAME/…`` keys) → channels-last or not."""
    from pipeplan.costmodel.layerspecs import model_layers

    return {ml.key: ml.layer.channels_last for ml in model_layers(name)}


@functools.cache
def layouts_of_tuning_entry(name: str) -> dict[str, bool]:
    """Tuning-set entry ``name``'s layers (``NAME/layer`` configs) → channels-last or not."""
    from pipeplan.costmodel.tuning_set import ENTRIES

    entry = next((e for e in ENTRIES if e.name == name), None)
    if entry is None:
        raise ValueError(f"in-model:{name} is not an entry of the tuning set (pipeplan.costmodel.tuning_set)")
    _, _, captured = entry.built()
    return {entry.config(la.name): la.channels_last for la in captured.graph.layers}


def _channels_last(config: str, source: str) -> bool | None:
    config = config.split("@", 1)[0]  # a dtype suffix: features are the fp32 capture's
    if source.startswith("in-model:"):
        found = layouts_of_tuning_entry(source.removeprefix("in-model:"))
    elif source.startswith("model:"):
        found = layouts_of_model(source.removeprefix("model:"))
    else:  # a sweep shape, built by its key
        from pipeplan.costmodel.layerspecs import parse_spec

        return dict(parse_spec(config).params).get("cl") == 1
    return found.get(config)


def backfill(path: str | Path) -> tuple[int, int, int]:
    """Rewrite ``path`` with a ``channels_last`` column; returns (rows, rows on channels-last maps,
    rows whose layer no capture names now, written as 0)."""
    path = Path(path)
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        rows = list(reader)
    if "config" not in header or "source" not in header:
        raise ValueError(f"{path}: not a pipeplan profile dataset (no config and source columns)")
    found = [_channels_last(r["config"], r["source"]) for r in rows]  # every row, before writing
    if "channels_last" not in header:
        header.append("channels_last")
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=header)
        writer.writeheader()
        for row, value in zip(rows, found, strict=True):
            writer.writerow({**row, "channels_last": int(bool(value))})
    return len(rows), sum(bool(v) for v in found), sum(v is None for v in found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="profile or in-model CSVs to rewrite in place")
    args = parser.parse_args(argv)
    for name in args.files:
        try:
            rows, on_maps, lost = backfill(name)
        except (OSError, ValueError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
        print(f"{name}: {rows} rows, {on_maps} of layers on channels-last maps, {lost} of layers no capture "
              "names now (written 0)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
