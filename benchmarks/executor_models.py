"""Every zoo model and the test families, run as 1-, 2- and 4-stage plans: output error and
predicted against measured stage compute.

For each model and stage count K, a cluster of K devices is written (``--target cpu``: one CPU
core each, cycling over the cores this process may use; ``--target gpu``: every device on GPU 0 of
this machine, so several stages share it and talk through host memory, or ``--gpus N`` distinct
GPUs), the model is captured at block granularity, split by the time-balanced baseline into K
stages, and run by :func:`pipeplan.executor.run_plan` with its output check.  The table gives the check's
largest relative error, the predicted and measured compute of the slowest stage, and the median
relative error of the stages' compute.

Run from the repository root::

    .venv/bin/python benchmarks/executor_models.py                    # CPU, small models
    .venv/bin/python benchmarks/executor_models.py --target gpu --costmodel gpu --models all
    .venv/bin/python benchmarks/executor_models.py --costmodel profile   # each model's own in-model profile

``--costmodel profile`` first runs ``pipeplan profile MODEL --levels idle`` (every layer timed inside
real passes on the first usable core, at the benchmark's batch and block granularity) and plans each
model with ``profile:FILE``: what is left of the stages' error is then the pipeline's, not the cost
model's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pipeplan.costmodel.base import CostModel
from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.cluster_detect import write_core_cluster
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.registry import load_cost_model
from pipeplan.costmodel.source import capture_source
from pipeplan.costmodel.steadiness import measure_steadiness
from pipeplan.executor import RunOptions, run_plan
from pipeplan.planner.baselines import time_balanced
from pipeplan.planner.problem import PlanOptions, Problem

SMALL = ["mlp", "rescnn", "tinygpt", "inception", *(f"tests.tiny_models:{f}" for f in (
    "llama_gqa", "t5_encoder_decoder", "vit", "convnext", "mixtral_moe", "bert_masked"))]
LARGE = ["gpt2", "bert-base", "vit-base", "resnet-50", "convnext-tiny"]


def _cluster(folder: Path, k: int, target: str, gpus: int) -> Path:
    path, name = folder / f"{target}-{k}.yaml", f"bench-{target}-{k}"
    if target == "cpu":
        return write_core_cluster(path, k, name=name, id_prefix="d", peak_flops="100GFLOPS", mem_bandwidth="15GB/s",
                                  latency="500us")
    lines = [f"name: {name}", "devices:"]
    lines += [f"  - {{id: d{d}, type: NVIDIA H100 80GB HBM3, host: localhost, memory: 80GiB, "
              f"peak_flops: 51.8TFLOPS, mem_bandwidth: 2977GB/s, gpu: {d % gpus}}}" for d in range(k)]
    lines += ["topology:", "  intra_host: {bandwidth: 2GB/s, latency: 500us}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def _profiled(name: str, batch: int, folder: Path) -> CostModel:
    """``name``'s own in-model profile, idle, at ``batch`` and block granularity (``pipeplan profile``)."""
    out = folder / f"{name.replace(':', '_').replace('.', '_')}-profile.json"
    cmd = [sys.executable, "-m", "pipeplan", "profile", name, "--batch", str(batch), "--levels", "idle",
           "--granularity", "block", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    return load_cost_model(f"profile:{out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--gpus", type=int, default=1, help="distinct GPUs to spread stages over (gpu target)")
    parser.add_argument("--models", default="small", help="small, large, all, or a comma-separated list")
    parser.add_argument("--stages", default="1,2,4")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--costmodel", default="learned", help="a cost model spec, or 'profile': each model's own "
                                                               "in-model profile, taken first (learned)")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1, help="runs of each stage count, interleaved")
    parser.add_argument("--schedule", default="1f1b", choices=("1f1b", "gpipe"), help="the executor's (1f1b)")
    parser.add_argument("--calibrate", action="store_true",
                        help="record each run's stage times in the calibration store ($PIPEPLAN_CALIBRATION), as "
                             "`pipeplan run` does; off by default, so that a benchmark neither changes the "
                             "user's store nor, with --costmodel calibrated:…, calibrates itself as it goes")
    args = parser.parse_args()
    models = {"small": SMALL, "large": LARGE, "all": SMALL + LARGE}.get(args.models, args.models.split(","))
    cost = None if args.costmodel == "profile" else load_cost_model(args.costmodel)
    folder = Path(tempfile.mkdtemp())
    print(f"# target {args.target}, cost model {args.costmodel}, batch {args.batch}, block granularity, "
          f"schedule {args.schedule}, "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {measure_steadiness().describe()}")
    print(f"# {args.rounds} round(s), interleaved; figures are medians over the rounds (range)")
    print("| model | stages | check rel err | slowest stage pred ms | meas ms | median stage compute err | "
          "as run (waits priced) | Σ stage compute vs one stage | s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in models:
        graph = capture_source(name, args.batch, granularity="block")
        model = cost if cost is not None else _profiled(name, args.batch, folder)
        counts = [int(x) for x in args.stages.split(",")]
        rows: dict[int, list[Round]] = {k: [] for k in counts}
        failed: dict[int, str] = {}
        for _ in range(args.rounds):
            for k in counts:
                if k in failed:
                    continue
                try:
                    rows[k].append(_run(graph, model, folder, k, args))
                except Exception as exc:  # a benchmark reports every case, failures included
                    failed[k] = f"FAILED: {type(exc).__name__}: {str(exc)[:120]}"
        for k in counts:
            if k in failed:
                print(f"| {_short(name)} | {k} | {failed[k]} | | | | | | |", flush=True)
                continue
            done = rows[k]
            alone = {i: r.compute_sum for i, r in enumerate(rows.get(1, []))}
            split = [r.compute_sum / alone[i] - 1 for i, r in enumerate(done) if i in alone and k != 1]
            print(f"| {_short(name)} | {done[0].stages} | {max(r.check for r in done):.1e} | "
                  f"{done[0].slowest_pred * 1e3:.2f} | {_spread([r.slowest_meas * 1e3 for r in done], '{:.2f}')} | "
                  f"{_spread([r.median_error for r in done], '{:.0%}')} | "
                  f"{_spread([r.median_error_as_run for r in done], '{:.0%}')} | "
                  f"{_spread(split, '{:+.0%}') if split else ''} | {sum(r.seconds for r in done):.1f} |", flush=True)


@dataclass
class Round:
    stages: int
    check: float
    slowest_pred: float
    slowest_meas: float
    median_error: float
    median_error_as_run: float  # against the run's re-prediction, waits priced by the CPU's wake model if any
    compute_sum: float  # measured compute of all stages, seconds per microbatch
    seconds: float


def _run(graph: ModelGraph, model: CostModel, folder: Path, k: int, args: argparse.Namespace) -> Round:
    started = time.perf_counter()
    spec = _cluster(folder, k, args.target, args.gpus)
    problem = Problem(graph, load_cluster(str(spec)), model, PlanOptions(microbatches=4, max_devices=k))
    plan = time_balanced(problem)
    plan.cluster = str(spec)
    report = run_plan(plan, options=RunOptions(batches=args.batches, check_batches=1, cluster=str(spec),
                                                schedule=args.schedule, calibrate=args.calibrate))
    assert report is not None and report.check is not None
    slowest = max(report.stages, key=lambda s: s.measured["compute"])
    errors = [abs(s.error["compute"]) for s in report.stages if s.error["compute"] is not None]
    as_run = [abs(s.error_at_load["compute"]) for s in report.stages
              if s.error_at_load and s.error_at_load["compute"] is not None] or errors
    return Round(len(report.stages), report.check["max_rel_diff"], slowest.predicted["compute"],
                 slowest.measured["compute"], statistics.median(errors), statistics.median(as_run),
                 sum(s.measured["compute"] for s in report.stages), time.perf_counter() - started)


def _spread(values: list[float], fmt: str) -> str:
    """The median, and the range when there is more than one value."""
    mid = fmt.format(statistics.median(values))
    return mid if len(values) == 1 else f"{mid} ({fmt.format(min(values))}…{fmt.format(max(values))})"


def _short(name: str) -> str:
    return name.removeprefix("tests.tiny_models:")

if __name__ == "__main__":
    main()
