"""Harvesting spare memory: a zoo model on a built-in cluster whose devices are given too little memory,
planned without and with borrowing.  Predicted figures only (no executor runs here).

    .venv/bin/python benchmarks/harvest_plan.py                  # gpt2 by blocks on 4xa100-nvlink
    .venv/bin/python benchmarks/harvest_plan.py --memory 0.3 --lender gpu3

Every device of the cluster gets ``--memory`` × the model's weights as its memory (the margin
applies on top), and ``--lender`` (if given) keeps its full memory but may hold no stage: the GPU
next door running a small job.  Printed: both plans (stages, bottleneck, certificate), the bytes
borrowed and, per channel, the bytes fetched each microbatch, the link's bandwidth and the fetch
time and the bandwidth it needs to keep up (bytes / bottleneck).
"""

from __future__ import annotations

import argparse

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import Cluster, load_cluster
from pipeplan.costmodel.units import format_bytes, format_seconds
from pipeplan.costmodel.zoo import capture_model
from pipeplan.planner.harvest import HarvestOptions
from pipeplan.planner.harvest_solve import solve_harvest
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import PlanError, PlanOptions, Problem


def tight(name: str, share: float, weights: int, lender: str | None) -> Cluster:
    """The built-in cluster with each device's memory cut to ``share`` × the model's weights."""
    spec = load_cluster(name).to_dict()
    for device in spec["devices"]:
        if device["id"] != lender:
            device["memory"] = int(share * weights)
    spec["name"] = f"{name}-tight"
    return Cluster.from_dict(spec)


def describe(label: str, plan: Plan) -> None:
    cert = plan.certificate
    stages = ", ".join(f"{s.device} ({len(s.layers)} layers)" for s in plan.stages)
    print(f"{label}: {len(plan.stages)} stages [{stages}], bottleneck {format_seconds(plan.bottleneck)}, "
          f"{cert.status} (bound {format_seconds(cert.best_bound or 0.0)}), solved in {cert.solve_time:.1f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--granularity", default="block")
    parser.add_argument("--cluster", default="4xa100-nvlink")
    parser.add_argument("--memory", type=float, default=0.3, help="each device's memory ÷ the model's weights (0.3)")
    parser.add_argument("--lender", default="gpu3", help="a device kept whole that holds no stage ('' for none)")
    parser.add_argument("--host-memory", default="0", help="memory each host lends (default 0: no host tier)")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    solver = SolverOptions(time_limit=args.time_limit, workers=args.workers, seed=0)
    graph = capture_model(args.model, 1, granularity=args.granularity)
    lender = args.lender or None
    cluster = tight(args.cluster, args.memory, graph.total_param_bytes, lender)
    options = PlanOptions(microbatches=args.microbatches, forbid_devices=(lender,) if lender else ())
    problem = Problem(graph, cluster, RooflineModel(), options)
    print(f"{args.model} ({args.granularity}, {problem.n_layers} layers, {format_bytes(graph.total_param_bytes)} of "
          f"weights) on {cluster.name}: each device {format_bytes(int(args.memory * graph.total_param_bytes))}"
          + (f", {lender} kept whole and outside the pipeline" if lender else "") + "\n")
    try:
        describe("without harvesting", solve(problem, solver))
    except PlanError as exc:
        print(f"without harvesting: no plan ({exc})")
    plan = solve_harvest(problem, HarvestOptions.of(host_memory=args.host_memory), solver)
    describe("with harvesting   ", plan)
    assert plan.harvest is not None
    print(f"\nborrowed {format_bytes(plan.harvest.borrowed_bytes)} in {len(plan.harvest.loans)} loans")
    print("| lender | borrower | bytes / microbatch | link | fetch | bandwidth to keep up |")
    print("|---|---|---:|---:|---:|---:|")
    for c in plan.harvest.channels:
        print(f"| {c.source} | {c.target} | {format_bytes(c.bytes)} | {format_bytes(c.bandwidth)}/s | "
              f"{format_seconds(c.seconds)} | {format_bytes(c.bytes / plan.bottleneck)}/s |")
    print("\n| device | capacity | own | lent | borrowed | free |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in plan.harvest.memory:
        print(f"| {row.device} | {format_bytes(row.capacity)} | {format_bytes(row.own)} | {format_bytes(row.lent)} | "
              f"{format_bytes(row.borrowed)} | {format_bytes(row.free)} |")


if __name__ == "__main__":
    main()
