"""Re-planning with migration cost: a zoo model whose busiest device gets loaded, re-planned over
horizons from seconds to hours.

    .venv/bin/python benchmarks/replan.py                       # gpt2 by blocks on hetero-a100-t4
    .venv/bin/python benchmarks/replan.py --model rescnn --granularity block --load 0.75

The current plan is the ILP's on the idle cluster.  Then the device of its bottleneck stage gets a
co-tenant using ``--load`` of it, and :func:`pipeplan.planner.replan.replan` decides, for each horizon,
whether to stay or move.  Printed per horizon: the bottleneck before the load, staying under it and
after re-planning, the state moved against reloading the whole model, the migration's seconds, the
decision and the certificate.  Then the horizon at which moving starts to pay, found exactly: at a
horizon where it moves, the chosen plan p pays from ``N_p = M_p / (B_stay − B_p)``; re-planning just
below ``N_p`` either stays (then N_p is the break-even, each solve being OPTIMAL) or finds a plan
that pays from an earlier horizon, and so on.
"""

from __future__ import annotations

import argparse
import time

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.units import format_bytes, format_seconds
from pipeplan.costmodel.zoo import capture_model
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.migration import DEFAULT_RELOAD, Horizon
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.replan import replan

HORIZONS = ("10mb", "50mb", "100mb", "1000mb", "1s", "1m", "1h")
_JUST_BELOW = 1 - 1e-3  # relative: a horizon this much below a plan's break-even


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--granularity", default="block")
    parser.add_argument("--cluster", default="hetero-a100-t4")
    parser.add_argument("--load", type=float, default=0.5, help="share of the loaded device a co-tenant uses (0.5)")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    solver = SolverOptions(time_limit=args.time_limit, workers=args.workers, seed=0)
    graph = capture_model(args.model, 1, granularity=args.granularity)
    idle = load_cluster(args.cluster)
    options = PlanOptions(microbatches=4)
    current = solve(Problem(graph, idle, RooflineModel(), options), solver)
    busiest = max(current.stages, key=lambda s: s.time).device
    loaded = idle.with_load(busiest, Contention(utilization=args.load))
    problem = Problem(graph, loaded, RooflineModel(), options)
    print(f"{args.model} ({args.granularity}, {problem.n_layers} layers, {format_bytes(graph.total_param_bytes)} "
          f"of weights) on {args.cluster}; the current plan ({current.certificate.status}) has bottleneck "
          f"{format_seconds(current.bottleneck)} on {', '.join(current.device_order())}; {busiest} gets a "
          f"co-tenant using {args.load:.0%} of it. Reload source {format_bytes(DEFAULT_RELOAD.bandwidth)}/s: the whole "
          f"model reloads in {format_seconds(DEFAULT_RELOAD.time(graph.total_param_bytes))}.\n")
    head = ("horizon", "microbatches", "before", "stay", "after", "moved", "of model", "migration", "objective",
            "decision", "status", "solve s")
    rows = []
    for text in HORIZONS:
        started = time.perf_counter()
        plan = replan(problem, current, text, options=solver)
        moved = plan.migration
        assert moved is not None and moved.stay is not None
        rows.append((text, f"{moved.horizon_microbatches:,.0f}", format_seconds(current.bottleneck),
                     format_seconds(moved.stay.bottleneck), format_seconds(plan.bottleneck), format_bytes(moved.bytes),
                     f"{moved.bytes / moved.model_bytes:.1%}", format_seconds(moved.seconds),
                     format_seconds(moved.objective), moved.decision, plan.certificate.status,
                     f"{time.perf_counter() - started:.1f}"))
    widths = [max(len(str(r[i])) for r in (head, *rows)) for i in range(len(head))]
    for r in (head, *rows):
        print("  ".join(str(c).rjust(w) for c, w in zip(r, widths, strict=True)))
    print()
    print(break_even(problem, current, solver))


def break_even(problem: Problem, current: Plan, solver: SolverOptions) -> str:
    """The least horizon at which some move beats staying, by the descent the docstring describes."""
    plan = replan(problem, current, Horizon(microbatches=10**9), options=solver)
    assert plan.migration is not None
    if plan.migration.decision == "stay":
        return "moving never pays: no plan has a lower bottleneck than staying"
    steps = 0
    while True:
        moved = plan.migration
        assert moved is not None and moved.break_even_microbatches is not None
        pays_from, moved_bytes = moved.break_even_microbatches, moved.bytes
        steps += 1
        plan = replan(problem, current, Horizon(microbatches=pays_from * _JUST_BELOW), options=solver)
        assert plan.migration is not None
        if plan.migration.decision == "stay":
            seconds = pays_from * current.bottleneck
            return (f"moving starts to pay at a horizon of {pays_from:,.0f} microbatches ({format_seconds(seconds)} "
                    f"at the current plan's rate), moving {format_bytes(moved_bytes)}; just below it the re-plan "
                    f"stays ({plan.certificate.status}); {steps} descent step(s)")


if __name__ == "__main__":
    main()
