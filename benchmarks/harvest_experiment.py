"""Harvesting for real on CPU cores: plans that borrow a neighbour's or the host's memory, run by the
executor with per-device memory caps, against the best plan without borrowing.

    .venv/bin/python benchmarks/harvest_experiment.py                    # tinygpt, batch 2, 3 one-core devices
    .venv/bin/python benchmarks/harvest_experiment.py --link-bandwidth 20MB/s --host-bandwidth 20MB/s

The cluster: three one-core CPU devices (on the cores this process may use, cycled when there are
fewer) whose memory is the largest layer's workspace plus ``--share`` × the rest of what the
whole model needs (weights and activations), after the margin, so that no two of them hold the
model.  Three variants, each planned and then run (``pipeplan.executor.run_plan``, real processes
over gloo, outputs checked against the unsplit model, every device capped at its memory map by the
executor's weight accounting):

- **without**: the best plan without borrowing (it needs the third device as a stage);
- **neighbour**: cpu2 runs no stage (the device next door, busy with a small job of its own) and
  lends its memory; cpu0 and cpu1 run the model and fetch what they cannot hold;
- **host**: as neighbour, but only the host's memory lends (``--host-bandwidth``, a slower tier);
- **neighbour-batch**, **host-batch**: as neighbour and host, fetching each borrowed layer once per
  batch (``HarvestOptions.fetch="batch"``): a borrowing stage runs its batch layer-major, so a round
  of fetches serves ``--microbatches`` microbatches, and holds all of their live activations.

Printed: per variant the stages, loans, predicted and measured throughput and the ratio to
*without*; per borrowing stage the bytes fetched per microbatch, the fetch time predicted and
measured, the bandwidth achieved beside the link's, how long the forward waited for weights, and
the most weight bytes it held beside its cap.  On one shared core every device's process competes
for it, so the figures are indicative, not a device's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.cluster_detect import write_core_cluster
from pipeplan.costmodel.units import format_bytes
from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import RunOptions, run_plan
from pipeplan.executor.report import RunReport
from pipeplan.planner.harvest import HarvestOptions
from pipeplan.planner.harvest_solve import solve_harvest
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import PlanError, PlanOptions, Problem


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tinygpt")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--share", type=float, default=0.4,
                        help="each device's memory beyond the workspace ÷ the model's weights and activations (0.4)")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--host-bandwidth", default="1GB/s", help="the host tier's link (1GB/s)")
    parser.add_argument("--link-bandwidth", default="2GB/s",
                        help="the devices' link, as the cluster spec prices it (2GB/s); gloo on one shared core "
                             "moves far less, so a slower price makes the plans fetch-bound as the runs are")
    parser.add_argument("--time-limit", type=float, default=20.0)
    args = parser.parse_args()

    graph = capture_model(args.model, args.batch)
    options = PlanOptions(microbatches=args.microbatches)
    probe = Problem(graph, load_cluster("local-cpu"), RooflineModel(), options)
    whole = probe.memory(list(range(probe.n_layers)))
    # Every device needs the largest layer's workspace whatever it holds; the share is of the rest.
    workspace = max(probe.workspace)
    memory = int((workspace + args.share * (whole - workspace)) / (1 - options.memory_margin))
    root = Path(tempfile.mkdtemp(prefix="harvest-"))
    spec = write_core_cluster(root / "cluster.yaml", 3, name="harvest-cpu3", memory=memory,
                              bandwidth=args.link_bandwidth)
    cluster = load_cluster(str(spec))
    solver = SolverOptions(time_limit=args.time_limit, workers=1, seed=0)
    print(f"{args.model} (batch {args.batch}, {len(graph.layers)} layers, {format_bytes(graph.total_param_bytes)} of "
          f"weights, {format_bytes(whole)} in all) on 3 one-core devices of {format_bytes(memory)} each, cores "
          f"{sorted(os.sched_getaffinity(0))}\n")

    plans: dict[str, Plan | None] = {}
    try:
        plans["without"] = solve(Problem(graph, cluster, RooflineModel(), options), solver)
    except PlanError as exc:
        print(f"without: no plan ({exc})")
        plans["without"] = None
    beside = Problem(graph, cluster, RooflineModel(), PlanOptions(microbatches=args.microbatches,
                                                                 forbid_devices=("cpu2",)))
    for fetch, suffix in (("microbatch", ""), ("batch", "-batch")):
        variants = {"neighbour": HarvestOptions.of(lenders=["cpu2"], fetch=fetch),
                    "host": HarvestOptions.of(lenders=[], host_memory=2 * whole, fetch=fetch,
                                              host_bandwidth=args.host_bandwidth)}
        for name, harvest in variants.items():
            try:
                plans[name + suffix] = solve_harvest(beside, harvest, solver)
            except PlanError as exc:  # once per batch can need more memory than there is
                print(f"{name + suffix}: no plan ({exc})")

    reports: dict[str, RunReport] = {}
    for name, plan in plans.items():
        if plan is None:
            continue
        report = run_plan(plan, options=RunOptions(batches=args.batches, cluster=str(spec), calibrate=False,
                                                   check_batches=1, timeout=120.0))
        assert report is not None and report.check is not None and report.check["ok"], name
        reports[name] = report

    base = reports.get("without")
    print("| variant | stages | loans | throughput pred | throughput meas | ratio to without (pred) |")
    print("|---|---|---:|---:|---:|---:|")
    for name, report in reports.items():
        plan = plans[name]
        assert plan is not None
        loans = plan.harvest.loans if plan.harvest is not None else []
        lenders = sorted({loan.lender for loan in loans})
        without = plans["without"]
        ratio = (f"{report.throughput / base.throughput:.2f} ({plan.throughput / without.throughput:.2f})"
                 if base is not None and without is not None else "-")
        print(f"| {name} | {', '.join(s.device for s in plan.stages)} | {len(loans)}"
              f"{' from ' + ', '.join(lenders) if lenders else ''} | {plan.throughput:.0f}/s | "
              f"{report.throughput:.0f}/s | {ratio} |")
    print("\n| variant | stage | layers fetched/mb | fetched/mb | fetch pred ms | fetch meas ms | bandwidth | link | "
          "waited ms | held peak | without loans | cap |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, report in reports.items():
        for s in report.stages:
            loans = s.loans
            if loans is None or not loans.get("fetch"):
                continue
            fetch, held = loans["fetch"], loans["memory"]
            links = [x["link_bandwidth"] for x in fetch["lenders"].values() if x.get("link_bandwidth")]
            print(f"| {name} | {s.index} ({s.device}) | {fetch['fetches']:.2f} | {format_bytes(fetch['bytes'])} | "
                  f"{_ms(fetch['predicted'])} | "
                  f"{_ms(fetch['seconds'])} | {format_bytes(fetch['bandwidth'] or 0)}/s | "
                  f"{format_bytes(min(links)) + '/s' if links else '-'} | {_ms(fetch['waited'])} | "
                  f"{format_bytes(held['peak'])} | {format_bytes(held['without_loans'])} | "
                  f"{format_bytes(held['cap']) if held['cap'] is not None else '-'} |")


if __name__ == "__main__":
    main()

