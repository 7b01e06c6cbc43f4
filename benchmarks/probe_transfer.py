"""How well a probe carries a learned model to a CPU it was never profiled on, CPU by CPU, offline.

``pipeplan costmodel probe`` (``costmodel/probe.py``) times the layers of four tuning-set models
inside real passes on a new CPU and scales a shipped model per layer kind. This replays that on the
in-model tables the project has of several CPUs (``costmodel/data/inmodel-cpu-*.csv``: every layer of
81 tuning-set configurations, timed inside real passes, idle): for each target CPU and each other
CPU's model as the base, the probe is fitted (:func:`pipeplan.costmodel.probe.fit`, the code the
command runs) on the target's rows of the probe's families (opt, deit, resnet, efficientnet: all
their configurations, where the command times one of each), and the whole-model sums of the other
14 families' configurations are predicted and compared with the target's measured sums.

    .venv/bin/python benchmarks/probe_transfer.py
    .venv/bin/python benchmarks/probe_transfer.py --cpu mycpu=learned.zip:inmodel.csv   # add a CPU

Columns: the scatter the command chooses its base by (the RMS of the probed layers' log10 ratios
around their kind's factor; "chosen" marks the least), the base alone (its times on the target, no
probe), the probe's per-kind factors, and the target's own model (whose in-model correction was
fitted on these very rows: an in-sample floor, not a fair competitor). Each cell: median |error| of
the whole-model sums, worst error, share within ±25%. The bases' in-model corrections were fitted on
the same families on their own CPU, so the figures measure the carry from CPU to CPU, not the carry
to an unseen architecture.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from pipeplan.costmodel.dataset_files import read_dataset
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Device
from pipeplan.costmodel.in_model import family, whole_model_errors, whole_model_summary
from pipeplan.costmodel.learned import LearnedCostModel
from pipeplan.costmodel.probe import PROBE_MODELS, ProbedCostModel, _quiet_times, fit
from pipeplan.costmodel.registry import SHIPPED

# Every shipped CPU: its model and its in-model table (named as ``learned-NAME`` names them: epyc is the Zen 5).
CPUS = {s.name: (s.model, s.in_model) for s in SHIPPED}


def layer_of(row: dict[str, Any]) -> Layer:
    """The layer a dataset row describes, as far as the learned model's features go."""
    shapes = [[int(d) for d in s.split("x")] for s in str(row["input_shapes"]).split(";") if s]
    return Layer(str(row["config"]), str(row["layer_kind"]), str(row["module_type"]), 0, flops=int(row["flops"]),
                 bytes_read=int(row["bytes_read"]), bytes_written=int(row["bytes_written"]),
                 param_bytes=int(row["param_bytes"]), activation_bytes=0, kernels=int(row["kernels"]),
                 input_shapes=shapes, ops=[str(row["main_op"])])


def device_of(rows: list[dict[str, Any]]) -> Device:
    first = rows[0]
    return Device(id="cpu0", type=str(first["device_type"]), memory="4GiB", peak_flops=float(first["peak_flops"]),
                  mem_bandwidth=float(first["mem_bandwidth"]), cores=[0])


def summary(errors: dict[str, float]) -> str:
    figures = whole_model_summary(errors)
    return f"{figures['median_abs']:.0%} / {figures['worst']:+.0%} / {figures['within_25']:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="append", default=[], metavar="NAME=MODEL.zip:ROWS.csv",
                        help="another CPU: its model and in-model table")
    args = parser.parse_args()
    cpus = {name: pair for name, pair in CPUS.items() if pair[0].is_file()}
    for spec in args.cpu:
        name, _, files = spec.partition("=")
        model, _, rows = files.partition(":")
        cpus[name] = (Path(model), Path(rows) if rows else None)
    models = {name: LearnedCostModel.load(model) for name, (model, _) in cpus.items()}
    for name, model in models.items():  # the key the probe keeps each base's factors under
        model.spec = name
    print("| target CPU | base | scatter | configurations | base alone | probed per kind | target's own model "
          "(in-sample) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for target, (_, table) in cpus.items():
        if table is None or not table.is_file():
            continue
        rows = read_dataset(table)
        device = device_of(rows)
        probe_rows = [r for r in rows if family(r) in PROBE_MODELS]
        test_rows = [r for r in rows if family(r) not in PROBE_MODELS]
        test_layers = [layer_of(r) for r in test_rows]
        own = whole_model_errors(test_rows, np.array(_quiet_times(models[target], test_layers, device)))
        bases = {name: model for name, model in models.items() if name != target}
        measured = [(str(r["config"]), layer_of(r), float(r["time_s"])) for r in probe_rows]
        probe = fit(measured, device, list(bases.values()))  # every base at once, as the command fits them
        configurations = len({r["source"] for r in test_rows})
        for base, model in bases.items():
            key = model.spec or model.name
            alone = np.array(_quiet_times(model, test_layers, device))
            probed = np.array(ProbedCostModel(model, probe).layer_times(test_layers, device))
            chosen = " (chosen)" if probe.base == key else ""
            print(f"| {target} | {base}{chosen} | {probe.spread[key]:.3f} | {configurations} | "
                  f"{summary(whole_model_errors(test_rows, alone))} | "
                  f"{summary(whole_model_errors(test_rows, probed))} | {summary(own)} |", flush=True)


if __name__ == "__main__":
    main()
