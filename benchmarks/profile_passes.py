"""Two or more passes of the same layers' profile, side by side: did they measure the same thing?

A profile's rows become a learned model's slowdowns (a level's time over the idle time), so a pass is only as
good as its idle level and its levels' agreement. For each file this prints the median slowdown per level
over its layers; for every later file, its idle times against the first file's, layer by layer (median and
the 10th and 90th percentiles of the ratio). Sessions compared passes this way by hand after a VM spell
(``costmodel/speed_drift.py`` names the levels a spell touched; this says what it did to the rows).

    .venv/bin/python benchmarks/profile_passes.py FIRST.csv SECOND.csv [MORE.csv …]

Files may be whole profiles: only layers with an idle row count, and the ratio only over layers both hold.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from pipeplan.costmodel.dataset_files import read_dataset

Times = dict[str, dict[str, float]]  # layer configuration → contention level → seconds


def times_by_layer(path: Path) -> Times:
    times: Times = defaultdict(dict)
    for row in read_dataset(path):
        times[row["config"]][row["contention"]] = row["time_s"]
    return {config: levels for config, levels in times.items() if "idle" in levels}


def median_slowdowns(times: Times) -> dict[str, float]:
    """Level → median over layers of the level's time over the idle time."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for levels in times.values():
        for level, seconds in levels.items():
            if level != "idle":
                ratios[level].append(seconds / levels["idle"])
    return {level: statistics.median(r) for level, r in sorted(ratios.items())}


def idle_ratio(first: Times, later: Times) -> tuple[float, float, float, int] | None:
    """(median, 10th, 90th percentile, layers) of later's idle time over first's, for the layers both hold."""
    ratios = sorted(later[c]["idle"] / first[c]["idle"] for c in first.keys() & later.keys())
    if not ratios:
        return None
    return statistics.median(ratios), ratios[len(ratios) // 10], ratios[9 * len(ratios) // 10], len(ratios)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, metavar="PROFILE.csv")
    args = parser.parse_args(argv)
    passes = [times_by_layer(path) for path in args.files]
    slowdowns = [median_slowdowns(times) for times in passes]
    levels = sorted({level for s in slowdowns for level in s})
    print("| pass | layers | idle vs the first (10th–90th) | " + " | ".join(levels) + " |")
    print("|---|---:|---:|" + "---:|" * len(levels))
    for path, times, slow in zip(args.files, passes, slowdowns, strict=True):
        ratio = idle_ratio(passes[0], times) if times is not passes[0] else None
        idle = f"{ratio[0]:.2f} ({ratio[1]:.2f}–{ratio[2]:.2f}, {ratio[3]} layers)" if ratio else "—"
        cells = " | ".join(f"{slow[level]:.2f}" if level in slow else "—" for level in levels)
        print(f"| {path.name} | {len(times)} | {idle} | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
