"""Replay a calibration store's runs in order: how far each run's stages would have been off with the
factors the runs before it gave, under each way of choosing a factor.

A store (``$PIPEPLAN_CALIBRATION``) holds, per stage of every recorded run, the cost model's predicted
compute and the measured one. Walking the runs in time order, each run's stages are priced with a factor
made from the earlier runs only, as a plan made just before that run would have been:

- ``none``: no calibration (factor 1);
- ``every model``: the device's factor over every model's runs (pipeplan before 2026-11-29);
- ``own runs first``: the planned model's own runs when it has some, else every model's
  (:meth:`pipeplan.costmodel.calibration.CalibrationStore.factor` with ``model``).

Fill a store with real runs, then replay it::

    PIPEPLAN_CALIBRATION=/tmp/c.json .venv/bin/python benchmarks/executor_models.py --calibrate \\
        --models "$(.venv/bin/python benchmarks/heldout_sets.py --models)" --stages 1,2 --rounds 2
    .venv/bin/python benchmarks/calibration_replay.py /tmp/c.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from itertools import groupby
from pathlib import Path

from pipeplan.costmodel.calibration import CalibrationStore, Observation

Policy = Callable[[CalibrationStore, Observation], float]
POLICIES: dict[str, Policy] = {
    "none": lambda store, o: 1.0,
    "every model": lambda store, o: store.factor(o.costmodel, o.device, o.load),
    "own runs first": lambda store, o: store.factor(o.costmodel, o.device, o.load, model=o.model),
}


def replay(observations: list[Observation]) -> dict[str, list[tuple[bool, float]]]:
    """Policy → (whether the run's model had run before, the stage's relative error) per stage of every run
    but the first."""
    errors: dict[str, list[tuple[bool, float]]] = {name: [] for name in POLICIES}
    store = CalibrationStore(Path(tempfile.mkdtemp()) / "replay.json")
    seen: set[str] = set()
    for _, run in groupby(observations, key=lambda o: (o.at, o.model)):
        stages = list(run)
        if seen:  # the first run has no runs before it
            for name, policy in POLICIES.items():
                errors[name] += [(o.model in seen, o.measured / (o.predicted * policy(store, o)) - 1) for o in stages]
        store.add(stages)
        seen.update(o.model for o in stages)
    return errors


def summary(errors: list[float]) -> str:
    if not errors:
        return "–"
    return (f"{statistics.median(map(abs, errors)):.0%} / {max(errors, key=abs):+.0%} / "
            f"{sum(abs(e) <= 0.15 for e in errors)} of {len(errors)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", type=Path, help="a calibration store (JSON) holding real runs")
    args = parser.parse_args()
    observations = CalibrationStore(args.store).observations()
    errors = replay(observations)
    print(f"# {args.store}: {len(observations)} stages of "
          f"{len({(o.at, o.model) for o in observations})} runs, {len({o.model for o in observations})} models")
    print("| factor | every stage | stages of a model run before | of a model never run |")
    print("|---|---:|---:|---:|")
    for name, rows in errors.items():
        print(f"| {name} | {summary([e for _, e in rows])} | {summary([e for again, e in rows if again])} | "
              f"{summary([e for again, e in rows if not again])} |")
    print("\nmedian |error| / worst / stages within 15%")


if __name__ == "__main__":
    main()
