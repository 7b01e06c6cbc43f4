"""Offline comparison of plans: the ILP beside every baseline, as a table and as a picture.

The picture (PNG, :mod:`pipeplan.planner.plot`) has one Gantt chart per plan — each stage's row, each
microbatch a bar, GPipe fill-drain — and the memory map per device: own, lent, reserved and free
against capacity, and borrowed, per plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from pipeplan.costmodel.units import format_bytes, format_seconds
from pipeplan.planner.baselines import BASELINES
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import PlanError, Problem

__all__ = ["Comparison", "compare", "compare_without_ilp", "comparison_table", "plot_comparison"]


@dataclass
class Comparison:
    problem: Problem
    plans: dict[str, Plan]  # method -> plan; "ilp" first
    failures: dict[str, str]  # method -> why it produced no plan
    lower_bound: float


def compare(problem: Problem, solver: SolverOptions | None = None) -> Comparison:
    """Plan ``problem`` with the ILP and every baseline, all scored by the same simulator."""
    return _with_baselines(problem, {"ilp": solve(problem, solver)}, {})


def compare_without_ilp(problem: Problem, why: str) -> Comparison:
    """The comparison when the ILP found no plan (``why``, e.g. nothing fits without borrowing):
    every baseline tried alike, the ILP listed first among the failures."""
    return _with_baselines(problem, {}, {"ilp": why})


def _with_baselines(problem: Problem, plans: dict[str, Plan], failures: dict[str, str]) -> Comparison:
    for name, baseline in BASELINES.items():
        try:
            plans[name] = baseline(problem)
        except PlanError as exc:
            failures[name] = str(exc)
    return Comparison(problem, plans, failures, problem.lower_bound())


def comparison_table(comp: Comparison) -> Table:
    p = comp.problem
    objective = "latency" if p.options.objective == "latency" else "bottleneck"
    table = Table(title=f"{p.graph.model} on {p.cluster.name}: objective {p.options.objective}, comm "
                  f"{p.options.comm}, {p.options.microbatches} microbatches (lower bound on the bottleneck "
                  f"{format_seconds(comp.lower_bound)})", title_justify="left")
    for col in ("method", "status", "devices", "bottleneck", "throughput", "latency", "peak memory",
                f"{objective} ÷ ILP", "bottleneck ÷ bound", "gap", "time"):
        table.add_column(col, justify="left" if col in ("method", "status", "devices") else "right")
    ilp = comp.plans["ilp"].objective_value
    for name, plan in comp.plans.items():
        cert = plan.certificate
        table.add_row(
            name if cert.method == name else f"{name} ({cert.method})", cert.status,
            " → ".join(plan.device_order()), format_seconds(plan.bottleneck),
            f"{plan.throughput:,.1f}/s", format_seconds(plan.latency), format_bytes(plan.peak_memory),
            f"{plan.objective_value / ilp:.3f}" if ilp else "—",
            f"{plan.bottleneck / comp.lower_bound:.3f}" if comp.lower_bound else "—",
            "—" if cert.gap is None else f"{cert.gap:.2%}", f"{cert.solve_time:.2f}s")
    for name, why in comp.failures.items():
        table.add_row(name, "[red]no plan[/red]", why, *[""] * 8)
    return table


def plot_comparison(comp: Comparison, path: str | Path, extra: Mapping[str, Plan] | None = None) -> Path:
    """Write the Gantt charts and the memory map per device of every plan of ``comp`` to ``path``
    (PNG), and of the ``extra`` plans of the same problem after them (a plan that borrows memory:
    ``{"harvest": plan}``); see :mod:`pipeplan.planner.plot`."""
    from pipeplan.planner.plot import plot_plans

    return plot_plans(comp.problem, {**comp.plans, **(extra or {})}, path)
