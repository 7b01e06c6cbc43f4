"""Offline comparison of plans: the ILP beside every baseline, as a table and as a picture.

The picture (PNG) has one Gantt chart per plan — each stage's row, each microbatch a bar, as the
simulator schedules them (GPipe fill-drain) — and a bar chart of memory per device against capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from pipeplan.costmodel.units import format_bytes, format_seconds
from pipeplan.planner.baselines import BASELINES
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import PlanError, Problem
from pipeplan.planner.simulate import evaluate

__all__ = ["Comparison", "compare", "comparison_table", "plot_comparison"]


@dataclass
class Comparison:
    problem: Problem
    plans: dict[str, Plan]  # method -> plan; "ilp" first
    failures: dict[str, str]  # method -> why it produced no plan
    lower_bound: float


def compare(problem: Problem, solver: SolverOptions | None = None) -> Comparison:
    """Plan ``problem`` with the ILP and every baseline, all scored by the same simulator."""
    plans: dict[str, Plan] = {}
    failures: dict[str, str] = {}
    plans["ilp"] = solve(problem, solver)
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


def plot_comparison(comp: Comparison, path: str | Path) -> Path:
    """Write the Gantt charts and the memory bars to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = comp.problem
    names = list(comp.plans)
    fig, axes = plt.subplots(len(names) + 1, 1, figsize=(11, 2.0 * len(names) + 3.2),
                             gridspec_kw={"height_ratios": [1.0] * len(names) + [1.4]})
    colors = plt.get_cmap("tab10")
    horizon = max(plan.latency for plan in comp.plans.values()) * 1e3
    for ax, name in zip(axes, names, strict=False):
        plan = comp.plans[name]
        ev = evaluate(p, plan.assignment(), plan.device_order())
        for k, row in enumerate(ev.schedule):
            for m, (start, finish) in enumerate(row):
                ax.barh(k, (finish - start) * 1e3, left=start * 1e3, color=colors(m % 10),
                        edgecolor="white", height=0.8)
        ax.set_yticks(range(len(ev.stages)), [s.device for s in ev.stages])
        ax.invert_yaxis()
        ax.set_xlim(0, horizon * 1.02)
        ax.set_title(f"{name}: bottleneck {format_seconds(plan.bottleneck)}, latency "
                     f"{format_seconds(plan.latency)} ({plan.certificate.status})", fontsize=9, loc="left")
    axes[-2].set_xlabel("time (ms); colours are microbatches")
    ax = axes[-1]
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        mem = {s.device: s.memory for s in comp.plans[name].stages}
        ax.bar([j + i * width for j in range(p.n_devices)],
               [100.0 * mem.get(d, 0) / cap for d, cap in zip(p.devices, p.capacity, strict=True)],
               width=width, label=name, color=colors(i % 10))
    ax.set_xticks([j + 0.4 - width / 2 for j in range(p.n_devices)],
                  [f"{d}\n{format_bytes(c)} usable" for d, c in zip(p.devices, p.capacity, strict=True)])
    ax.set_ylabel("% of usable memory")
    ax.set_title("memory per device", fontsize=9, loc="left")
    ax.legend(fontsize=8, ncol=len(names))
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
