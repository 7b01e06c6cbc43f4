"""Stashed activations for real on CPU cores: a layer-major borrower with and without a stash.

    .venv/bin/python benchmarks/harvest_stash.py                  # tinygpt, batch 2, M = 4, 3 one-core devices

Three one-core CPU devices (8 GiB each: memory is not what is measured here), tinygpt cut in two
after ``--cut``: cpu0 runs the first part, cpu1 the rest, whose layers with weights keep them on
cpu2 (which runs no stage) and are fetched once per batch (``fetch="batch"``: cpu1 runs its batch
layer-major).  Two plans of the same stages and loans, scored by the planner
(:func:`pipeplan.planner.harvest_solve.harvest_plan`), each run by the executor (real processes over
gloo, outputs checked against the unsplit model):

- **batch**: cpu1 holds all M microbatches' live activations between layers;
- **batch-stash**: cpu1 keeps the M − 1 it is not computing on cpu2 (``stash=True``).

Printed per plan: predicted and measured throughput; for cpu1 the stash's bytes per microbatch
(measured and the plan's bound), the bandwidth it achieved, how long the forward waited for it,
and the most live activation bytes the stage held (weights apart), against the plan's terms; the
lender's most stashed bytes against what the plan charged it.  On one shared core every process
competes for it, so the figures are indicative.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.cluster_detect import write_core_cluster
from pipeplan.costmodel.units import format_bytes
from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import RunOptions, run_plan
from pipeplan.planner.harvest import HarvestOptions
from pipeplan.planner.harvest_score import Lending
from pipeplan.planner.harvest_solve import harvest_plan
from pipeplan.planner.plan import Certificate
from pipeplan.planner.problem import PlanOptions, Problem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tinygpt")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--cut", default="blocks.2.ln1", help="cpu1's first layer (blocks.2.ln1)")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--link-bandwidth", default="2GB/s")
    args = parser.parse_args()

    graph = capture_model(args.model, args.batch)
    root = Path(tempfile.mkdtemp(prefix="harvest-stash-"))
    spec = write_core_cluster(root / "cluster.yaml", 3, name="stash-cpu3", bandwidth=args.link_bandwidth)
    problem = Problem(graph, load_cluster(str(spec)), options=PlanOptions(microbatches=args.microbatches, in_flight=1))
    order = [layer.name for layer in graph.layers]
    dev_of = [0 if i < order.index(args.cut) else 1 for i in range(len(order))]
    loans = {name: "cpu2" for i, name in enumerate(order) if dev_of[i] == 1 and graph[name].param_bytes
             and not name.startswith("head")}  # the head's weights are tied to the embedding's: not lendable
    print(f"{args.model} (batch {args.batch}), cpu1 from {args.cut}: {len(loans)} borrowed layers from cpu2, "
          f"M = {args.microbatches}, cores {sorted(os.sched_getaffinity(0))}\n")
    print("| plan | throughput pred | throughput meas | stash/mb meas | stash/mb plan | stash bandwidth | "
          "stash waited ms/mb | cpu1 live activations peak | plan's cpu1 own | cpu2 stash peak | plan's cpu2 stash |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, stash in (("batch", False), ("batch-stash", True)):
        lending = Lending(problem, HarvestOptions.of(fetch="batch", stash=stash))
        plan = harvest_plan(lending, dev_of, loans, Certificate("bench", "HEURISTIC", 0.0), ["cpu0", "cpu1"],
                            stashes={"cpu1": "cpu2"} if stash else {})
        report = run_plan(plan, options=RunOptions(batches=args.batches, cluster=str(spec), calibrate=False,
                                                   check_batches=1, timeout=120.0))
        assert report is not None and report.check is not None and report.check["ok"], name
        assert report.check["max_abs_diff"] == 0.0, report.check
        assert plan.harvest is not None
        loans1 = report.stages[1].loans or {}
        measured = loans1.get("stash") or {}
        batch = loans1["memory"]["batch"]
        own = {r.device: r for r in plan.harvest.memory}
        served = (report.lenders[0]["served"].get("stash") or {}) if report.lenders else {}
        planned = plan.harvest.stashes[0] if plan.harvest.stashes else None

        def size(value: float | None) -> str:
            return "-" if value is None else format_bytes(value)

        print(f"| {name} | {plan.throughput:.0f}/s | {report.throughput:.0f}/s | {size(measured.get('bytes'))} | "
              f"{size(planned.traffic / args.microbatches if planned else None)} | "
              f"{size(measured.get('bandwidth'))}{'/s' if measured.get('bandwidth') else ''} | "
              f"{measured['waited'] * 1e3 if measured else 0:.2f} | {size(batch['activations'])} | "
              f"{size(own['cpu1'].own)} | {size(served.get('peak'))} | {size(planned.bytes if planned else None)} |")


if __name__ == "__main__":
    main()
