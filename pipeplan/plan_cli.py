"""``pipeplan plan | compare | demo``: a model split into pipeline stages, alone or beside every baseline.

``plan`` solves with the ILP (or, with ``--harvest``, lets stages borrow spare memory); ``compare``
scores the ILP against the baselines in one table and one PNG; ``demo`` runs the whole path on
built-in defaults.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from pipeplan.cli_args import add_costmodel_arg, add_model_args, add_plan_args, rich_console
from pipeplan.cli_inputs import read_cluster, read_cost_model, read_harvest_options, read_problem

if TYPE_CHECKING:
    from rich.console import Console

    from pipeplan.planner.ilp import SolverOptions
    from pipeplan.planner.plan import Plan
    from pipeplan.planner.problem import Problem

__all__ = ["DEMO_CLUSTER", "DEMO_MODEL", "cmd_compare", "cmd_demo", "cmd_plan", "register_plan"]

DEMO_MODEL = "gpt2"
DEMO_CLUSTER = "hetero-a100-t4"


def register_plan(sub: Any) -> None:
    """Add ``plan``, ``compare`` and ``demo`` to the CLI's subparsers."""
    p = _planning_parser(sub, "plan", help="split a model into pipeline stages with the ILP (CP-SAT)",
                         description="Find the split of MODEL across the devices of SPEC that minimises "
                         "the bottleneck stage (throughput) or the latency, under memory limits, taking "
                         "each device's current load into account.")
    p.add_argument("--out", metavar="PLAN.json", help="save the plan as versioned JSON")
    p.add_argument("--png", metavar="OUT.png", help="also draw the plan: its Gantt chart and the memory per device "
                   "(own, lent, reserved, free; borrowed)")
    p.add_argument("--keep-loaded", action="store_true",
                   help="on this machine's CPU cores with a wake model, keep the ILP's plan over all the cores even "
                        "where its replay predicts that leaving the loaded cores out runs faster")
    p.set_defaults(func=cmd_plan)

    p = _planning_parser(sub, "compare", help="the ILP beside every baseline: table and Gantt PNG",
                         description="Plan MODEL on SPEC with the ILP and with the uniform, "
                         "parameter-balanced, time-balanced and chain-DP baselines; print a table and "
                         "write a PNG with each plan's pipeline schedule and memory per device.")
    p.add_argument("--png", metavar="OUT.png", help="where to write the picture")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("demo", help="the main job on built-in defaults",
                       description=f"Capture {DEMO_MODEL}, show its layers and the {DEMO_CLUSTER} "
                       "cluster with one device busy, then plan it with the ILP and the baselines.")
    p.add_argument("--model", default=DEMO_MODEL)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--granularity", default="block")
    p.add_argument("--cluster", default=DEMO_CLUSTER)
    p.add_argument("--load", action="append", default=["gpu2=1xcompute"], metavar="DEV=LEVEL")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--time-limit", type=float, default=10.0)
    p.add_argument("--png", default="demo-compare.png")
    add_costmodel_arg(p)
    p.set_defaults(func=cmd_demo)


def _planning_parser(sub: Any, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """A subcommand that plans MODEL on SPEC: MODEL's arguments, then the planning problem's."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description)
    add_model_args(p)
    add_plan_args(p)
    return p


def _print_harvest(console: Console, plan: Plan) -> None:
    from pipeplan.render import loans_table, memory_map_table, plan_table

    console.print(plan_table(plan))
    console.print(memory_map_table(plan))
    if plan.harvest is not None and plan.harvest.loans:
        console.print(loans_table(plan))


def cmd_plan(args: argparse.Namespace) -> None:
    from pipeplan.planner.harvest_solve import solve_harvest
    from pipeplan.planner.ilp import solve
    from pipeplan.render import plan_table

    problem, solver = read_problem(args)
    harvest = read_harvest_options(args)
    console = rich_console()
    console.print(f"solving: {problem.n_layers} layers on {problem.n_devices} devices, "
                  f"time limit {solver.time_limit:g}s{', harvesting spare memory' if harvest else ''} …")
    plan = solve_harvest(problem, harvest, solver) if harvest is not None else solve(problem, solver)
    if harvest is not None:
        _print_harvest(console, plan)
    else:
        plan = _choose_as_run(console, problem, solver, plan, args.keep_loaded)
        console.print(plan_table(plan))
    if args.out:
        plan.save(args.out)
        console.print(f"plan written to {args.out}")
    if args.png:
        from pipeplan.planner.plot import plot_plans

        png = plot_plans(problem, {"harvest" if harvest is not None else plan.method: plan}, args.png)
        console.print(f"Gantt chart and memory per device written to {png}")


def _choose_as_run(console: Console, problem: Problem, solver: SolverOptions, plan: Plan,
                   keep_loaded: bool) -> Plan:
    """On CPU cores with a wake model: the ILP's plan, or the plan without the loaded cores where its
    replay predicts that one faster (:mod:`pipeplan.planner.as_run_choice`; a second ILP solve, up to
    the same time limit); each candidate's throughput as run is printed.  Elsewhere the ILP's plan,
    unchanged."""
    from pipeplan.planner.as_run_choice import choose_as_run

    choice = choose_as_run(problem, solver, first=plan)
    if choice is None:
        return plan
    console.print(choice.summary())
    if choice.chosen is choice.candidates[0]:
        return plan
    if keep_loaded:
        console.print("kept the plan over all the devices, as --keep-loaded asks")
        return plan
    console.print("(--keep-loaded keeps the plan over all the devices)")
    return choice.plan


def _show_comparison(console: Console, problem: Problem, solver: SolverOptions, png: str,
                     with_plan: bool = False, extra: dict[str, Plan] | None = None) -> None:
    """Plan with the ILP and every baseline, print the table (and the ILP's stages), write the PNG
    (with the ``extra`` plans, such as one that borrows memory, drawn after them)."""
    from pipeplan.planner.compare import compare, comparison_table, plot_comparison
    from pipeplan.render import plan_table

    console.print(f"planning {problem.graph.model} ({problem.n_layers} layers) on {problem.cluster.name} "
                  f"with the ILP (CP-SAT) and every baseline, {problem.options.microbatches} microbatches …")
    comp = compare(problem, solver)
    if with_plan:
        console.print(plan_table(comp.plans["ilp"]))
    console.print(comparison_table(comp))
    console.print(f"Gantt charts and memory per device written to {plot_comparison(comp, png, extra)}")


def cmd_compare(args: argparse.Namespace) -> None:
    from pipeplan.planner.harvest_solve import solve_harvest
    from pipeplan.planner.problem import PlanError

    problem, solver = read_problem(args)
    harvest = read_harvest_options(args)
    png = args.png or f"compare-{problem.graph.model}-{problem.cluster.name}.png"
    console = rich_console()
    borrowing: dict[str, Plan] = {}
    if harvest is not None:
        # The comparison covers plans that keep their weights at home; the plan that borrows is
        # printed before it and drawn after them in the PNG (its Gantt chart with its fetches).
        console.print("with harvesting:")
        borrowing["harvest"] = solve_harvest(problem, harvest, solver)
        _print_harvest(console, borrowing["harvest"])
    try:
        _show_comparison(console, problem, solver, png, extra=borrowing)
    except PlanError as exc:
        if harvest is None:
            raise
        from pipeplan.planner.plot import plot_plans

        console.print(f"without harvesting: {exc}")
        console.print(f"Gantt chart and memory per device written to {plot_plans(problem, borrowing, png)}")


def cmd_demo(args: argparse.Namespace) -> None:
    from pipeplan.costmodel.zoo import capture_model
    from pipeplan.planner.ilp import SolverOptions
    from pipeplan.planner.problem import PlanOptions, Problem
    from pipeplan.render import cluster_table, device_times_table, graph_table

    console = rich_console()
    console.rule(f"pipeplan demo: {args.model} on {args.cluster}")
    console.print(f"capturing {args.model} (batch {args.batch}, {args.granularity} granularity) "
                  "with torch.export …")
    graph = capture_model(args.model, args.batch, granularity=args.granularity)
    console.print(graph_table(graph))
    cluster = read_cluster(args.cluster, args.load)
    console.print(cluster_table(cluster))
    model = read_cost_model(args, graph, cluster)
    console.print(device_times_table(graph, cluster, model))
    problem = Problem(graph, cluster, model, PlanOptions(microbatches=args.microbatches))
    _show_comparison(console, problem, SolverOptions(time_limit=args.time_limit, seed=0), args.png,
                     with_plan=True)
