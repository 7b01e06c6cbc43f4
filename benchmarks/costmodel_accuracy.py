"""Accuracy of the learned cost model on layer shapes it never saw (issue 4's benchmark).

Splits the profile dataset by layer configuration (a quarter of the shapes held out, for several
seeds), fits the models on the rest and prints, overall and per contention level: MAPE and the share
of predictions within ±10% for the main model (gradient-boosted trees averaged with per-operator Gaussian
processes), its trees alone, the linear baseline and the
analytic roofline (with the device's measured FLOP/s and bandwidth, slowed by the contention shares).

    python benchmarks/costmodel_accuracy.py                      # every shipped CPU dataset
    python benchmarks/costmodel_accuracy.py --data mine.csv --seeds 5

Targets: main model MAPE ≤ 10% overall and under every contention level, ≥ 85% within ±10%.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.dataset import contention_from_row
from pipeplan.costmodel.dataset_files import read_dataset
from pipeplan.costmodel.estimators import (
    Fitted,
    encode,
    fit_estimators,
    held_out_split,
    operators,
    predict_log_time,
    vocabulary_of,
)
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Device
from pipeplan.costmodel.registry import SHIPPED


def roofline_time(row: dict[str, Any]) -> float:
    layer = Layer("x", row["layer_kind"], row["module_type"], 0, flops=row["flops"], bytes_read=row["bytes_read"],
                  bytes_written=row["bytes_written"], param_bytes=row["param_bytes"], activation_bytes=0,
                  kernels=row["kernels"])
    device = Device(id="d", type=row["device_type"], memory=1 << 30, peak_flops=row["peak_flops"],
                    mem_bandwidth=row["mem_bandwidth"], cores=[0])
    return RooflineModel().layer_time(layer, device, contention_from_row(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", action="append", help="a profile CSV (repeatable; default: every shipped one)")
    parser.add_argument("--seeds", type=int, default=3, help="held-out splits to average over (3)")
    args = parser.parse_args()
    for path in args.data or [str(s.dataset) for s in SHIPPED]:
        evaluate(path, args.seeds)


def evaluate(path: str, seeds: int) -> None:
    """Print the held-out table of one dataset."""
    rows = read_dataset(path)
    vocabulary = vocabulary_of(rows)
    # errors[model][level] = list of relative errors over every seed's held-out rows
    errors: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    fit_seconds = []
    for seed in range(seeds):
        train, test = held_out_split(rows, seed=seed)
        started = time.perf_counter()
        fitted = fit_estimators([rows[i] for i in train], vocabulary, seed)
        fit_seconds.append(time.perf_counter() - started)
        test_rows = [rows[i] for i in test]
        x, ops = encode(test_rows, vocabulary), operators(test_rows)
        measured = np.array([r["time_s"] for r in test_rows])
        predictions = {name: np.power(10.0, predict_log_time(fitted, name, x, ops)) for name in ("main", "linear")}
        predictions["trees"] = np.power(10.0, predict_log_time(Fitted(fitted.estimators), "main", x, ops))
        predictions["roofline"] = np.array([roofline_time(r) for r in test_rows])
        for name, predicted in predictions.items():
            rel = np.abs(predicted - measured) / measured
            for r, e in zip(test_rows, rel, strict=True):
                errors[name][r["contention"]].append(float(e))
                errors[name]["overall"].append(float(e))

    levels = ["overall", *sorted(k for k in errors["main"] if k != "overall")]
    configs = len({r["config"] for r in rows})
    table = Table(title=f"{path}, held-out shapes: {len(rows)} rows, {configs} configurations, "
                  f"{seeds} splits (¼ of the shapes held out each)", title_justify="left")
    table.add_column("contention")
    table.add_column("rows", justify="right")
    for name in ("main", "trees", "linear", "roofline"):
        table.add_column(f"{name} MAPE %", justify="right")
        table.add_column(f"{name} ≤±10%", justify="right")
    for level in levels:
        cells = [level, str(len(errors["main"][level]))]
        for name in ("main", "trees", "linear", "roofline"):
            e = np.array(errors[name][level])
            cells += [f"{100 * e.mean():.1f}", f"{100 * (e <= 0.1).mean():.0f}%"]
        table.add_row(*cells)
    Console(width=150).print(table)
    print(f"fit time (main + linear + tree) per split: {np.mean(fit_seconds):.1f} s")


if __name__ == "__main__":
    main()
