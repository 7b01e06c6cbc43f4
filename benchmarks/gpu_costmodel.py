"""Print the GPU cost model's accuracy on the shared H100 measurements (issue 15, item 4).

    .venv/bin/python benchmarks/gpu_costmodel.py [--params FILE] [--configs] [--cv] [--calibration-only]

Per load: median |error| of whole-model wall clock, share within ±15%, median slowdown-factor
error, on the calibration configurations (the constants were fitted on them) and on the
evaluation configurations (never used for fitting), for the fitted ``analytic-gpu`` model and for
the roofline on the measured H100 spec (``costmodel/data/gpu/h100-measured.yaml``). Then the MAPE
of leaf layers in passes of 5 ms or more. ``--configs`` adds every configuration's errors.

``--cv`` adds the development metric: leave-one-configuration-out cross-validation over the 10
calibration configurations (refit on 9 with ``python -m pipeplan.costmodel.gpu_fit``'s fit, score
the 10th; :mod:`pipeplan.costmodel.gpu_cv`, about 4 minutes on one core). ``--calibration-only``
prints nothing about the evaluation configurations (for model development).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.gpu import DEFAULT_PARAMS_PATH, GpuCostModel, load_params
from pipeplan.costmodel.gpu_accuracy import TOLERANCE, Report, evaluate
from pipeplan.costmodel.gpu_cv import CrossValidation, cross_validate
from pipeplan.costmodel.gpu_fit import h100
from pipeplan.costmodel.gpu_measurements import DATA_DIR, LOADS, measurements
from pipeplan.costmodel.hardware import Device

SPLITS = ("calibration", "evaluation")


def _measured_spec() -> Device:
    doc = yaml.safe_load((DATA_DIR / "h100-measured.yaml").read_text())
    return Device(**doc["devices"][0])


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def table(reports: list[Report], splits: tuple[str, ...] = SPLITS) -> str:
    head = "| model | split | " + " | ".join(("idle", *LOADS)) + " | all loads |"
    lines = [f"Whole-model wall clock: median \\|error\\| / within ±{TOLERANCE:.0%} / slowdown error", "",
             head, "|---|---|" + "---:|" * (len(LOADS) + 2)]
    for rep in reports:
        for split in splits:
            cells = []
            for load in ("idle", *LOADS):
                r = rep.row(split, load)
                slow = "" if load == "idle" else f" / {_pct(r.slowdown_error)}"
                cells.append(f"{_pct(r.median_error)} / {_pct(r.within)}{slow}")
            med, within = rep.overall(split)
            n = rep.row(split, "idle").pairs
            lines.append(f"| {rep.model} | {split} ({n}) | " + " | ".join(cells) + f" | {_pct(med)} / {_pct(within)} |")
    lines += ["", "Leaf layers of passes ≥ 5 ms, idle: MAPE (layers)", "",
              "| model | " + " | ".join(splits) + " |", "|---|" + "---:|" * len(splits)]
    for rep in reports:
        lines.append(f"| {rep.model} | " + " | ".join(f"{_pct(rep.leaf_mape[s])} ({rep.leaf_count[s]})"
                                                       for s in splits) + " |")
    return "\n".join(lines)


def cv_table(cv: CrossValidation) -> str:
    """The held-out figures of :func:`~pipeplan.costmodel.gpu_cv.cross_validate`, and per configuration."""
    loads = ("idle", *LOADS)
    cells = [f"{_pct(cv.median(lv))} / {_pct(cv.within(lv))}"
             + ("" if lv == "idle" else f" / {_pct(cv.slowdown_error(lv))}") for lv in loads]
    lines = ["Leave-one-configuration-out over the calibration set (refit on 9, score the 10th): "
             f"median \\|error\\| / within ±{TOLERANCE:.0%} / slowdown error", "",
             "| | " + " | ".join(loads) + " | all loads | leaf MAPE |", "|---|" + "---:|" * (len(loads) + 2),
             "| held out | " + " | ".join(cells) + f" | {_pct(cv.overall())} / {_pct(cv.within())} | "
             f"{_pct(cv.leaf_mape())} ({sum(len(v) for v in cv.leaf_ape.values())}) |", "",
             "| held-out config | " + " | ".join(loads) + " | leaf MAPE |", "|---|" + "---:|" * (len(loads) + 1)]
    for key in sorted({k for k, _ in cv.errors}):
        leaf = cv.leaf_ape.get(key)
        lines.append(f"| {key} | " + " | ".join(f"{100 * cv.errors[key, lv]:+.0f}%" for lv in loads)
                     + f" | {_pct(sum(leaf) / len(leaf)) if leaf else '–'} |")
    return "\n".join(lines)


def configs(report: Report, splits: tuple[str, ...] = SPLITS) -> str:
    lines = [f"{report.model}: predicted / measured − 1", "",
             "| config | split | " + " | ".join(("idle", *LOADS)) + " |", "|---|---|" + "---:|" * (len(LOADS) + 1)]
    for m in measurements():
        if m.split not in splits:
            continue
        lines.append(f"| {m.key} | {m.split} | "
                     + " | ".join(f"{100 * report.errors[m.key, lv]:+.0f}%" for lv in ("idle", *LOADS)) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=Path, default=DEFAULT_PARAMS_PATH)
    parser.add_argument("--configs", action="store_true", help="print every configuration's errors too")
    parser.add_argument("--cv", action="store_true",
                        help="add leave-one-configuration-out cross-validation on the calibration set (~4 min)")
    parser.add_argument("--calibration-only", action="store_true",
                        help="print nothing about the evaluation configurations (model development)")
    args = parser.parse_args()
    splits = ("calibration",) if args.calibration_only else SPLITS
    instrument = json.loads(args.params.read_text()).get("instrument", {})
    gpu = evaluate(GpuCostModel(load_params(args.params)), h100(), splits=splits, **instrument)
    roofline = evaluate(RooflineModel(), _measured_spec(), splits=splits)
    print(table([gpu, roofline], splits))
    if args.configs:
        print()
        print(configs(gpu, splits))
        print()
        print(configs(roofline, splits))
    if args.cv:
        print()
        print(cv_table(cross_validate()))


if __name__ == "__main__":
    main()
