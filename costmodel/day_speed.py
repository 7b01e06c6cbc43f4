"""How fast this core runs whole models now, against the day its shipped in-model rows were taken.

``measure_device`` times one large matmul and one large copy. On these VMs whole models can run a third slower
while both read the same: on 2026-11-29 the model-167 Xeon measured 160 GFLOP/s and 13.6 GB/s at 13:57 and at
15:00, and the tuning set's OPT, Llama and ResNet ran at a median 0.91× their 2026-11-23 in-model time at 13:57
and 1.21× at 15:00. A judging run that states its spell by those two figures says nothing about it, and a cost
model judged in a slow spell looks a third too low. So this times a few entries of the tuning set inside real
forward passes, the way their rows were timed (:func:`pipeplan.costmodel.tuning_set.in_model_rows`), and divides
each sum by the same entry's sum in this CPU's in-model file:

    python -m pipeplan.costmodel.day_speed [--entries opt-b2-s64-w256,resnet-b2-i128-w16] [--in-model FILE]

1.21× means whole models take 1.21× as long as on the rows' day. ``benchmarks/model_profile.py`` prints it at
the start and after every round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["REFERENCE", "DaySpeed", "day_speed", "entry_sums", "measure_day_speed"]

# A decoder, a rotary decoder and a bottleneck CNN at mid sizes: linears, attention, glue, convolutions.
REFERENCE = ("opt-b2-s64-w256", "llama-b2-s64-w256", "resnet-b2-i128-w16")


@dataclass(frozen=True)
class DaySpeed:
    """Each reference entry's in-model time now ÷ its time in the in-model file."""

    ratios: dict[str, float]
    in_model: Path

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios.values())

    def describe(self) -> str:
        each = ", ".join(f"{name} {r:.2f}" for name, r in self.ratios.items())
        return f"{self.ratio:.2f}× the time of {self.in_model.name}'s rows ({each})"


def entry_sums(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds per tuning entry: the sum of its layers' ``time_s``, by the entry's name (``in-model:NAME``)."""
    sums: dict[str, float] = {}
    for row in rows:
        source = str(row["source"])
        if source.startswith("in-model:"):
            name = source.removeprefix("in-model:")
            sums[name] = sums.get(name, 0.0) + float(row["time_s"])
    return sums


def day_speed(now: Mapping[str, float], in_model: Path) -> DaySpeed:
    """Each entry of ``now`` (seconds per entry) against its sum in ``in_model``; an entry the file lacks, or a
    file that is not a profile, is an error that names it."""
    from pipeplan.costmodel.dataset_files import read_dataset

    then = entry_sums(read_dataset(in_model))
    missing = sorted(set(now) - set(then))
    if missing:
        raise ValueError(f"{in_model}: no in-model rows of {', '.join(missing)} to compare with")
    return DaySpeed({name: seconds / then[name] for name, seconds in now.items()}, in_model)


def measure_day_speed(in_model: Path | None = None, entries: Sequence[str] = REFERENCE,
                      seconds: float = 1.0) -> DaySpeed:
    """Time ``entries`` of the tuning set now and compare them with ``in_model`` (default: the in-model file of
    the model shipped for this CPU)."""
    from pipeplan.costmodel.registry import shipped_for
    from pipeplan.costmodel.tuning_set import ENTRIES, in_model_rows

    path = in_model or shipped_for().in_model
    by_name = {e.name: e for e in ENTRIES}
    unknown = [name for name in entries if name not in by_name]
    if unknown:
        raise ValueError(f"not entries of the tuning set: {', '.join(unknown)} (e.g. {', '.join(REFERENCE)})")
    now = {name: entry_sums(in_model_rows(by_name[name], seconds))[name] for name in entries}
    return day_speed(now, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", default=",".join(REFERENCE), help="tuning-set entries to time")
    parser.add_argument("--in-model", type=Path, default=None,
                        help="in-model CSV to compare with (default: the one shipped for this CPU)")
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per entry (1)")
    args = parser.parse_args(argv)
    entries = [e.strip() for e in args.entries.split(",") if e.strip()]
    try:
        speed = measure_day_speed(args.in_model, entries, args.seconds)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(speed.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
