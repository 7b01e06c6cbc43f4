"""The picture of a set of plans: one Gantt chart per plan and the memory map per device.

Each Gantt chart has a row per stage and a bar per microbatch, scheduled GPipe fill-drain from the
plan's stage times (for a plan that borrows memory those include its fetches, as its harvest scorer
priced them).  The memory panel has, per device (and per host that lends), one stacked bar per
plan: **own** (its stage's memory there), **lent** (other stages' weights it holds), **reserved**
(other work's) and **free**, which add up to the capacity after the margin; **borrowed** (this
device's weights held by lenders) is drawn hatched above the capacity, since it lives elsewhere.
A plan without a ``harvest`` section has own and free only.

Every bar segment carries a ``gid`` of ``"PLAN/DEVICE/PART"`` so that a test (or a script) can read
the figure back: :func:`plans_figure` returns the figure, :func:`plot_plans` writes it as PNG.
Matplotlib is imported inside the functions that draw: the planner does not need it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeplan.costmodel.units import format_bytes, format_seconds
from pipeplan.planner.harvest import MemoryRow
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import Problem

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["MEMORY_PARTS", "fill_drain", "memory_rows", "memory_unit", "plans_figure", "plot_plans"]

# The memory panel's segments, bottom to top, with their colours; "borrowed" sits above the capacity.
MEMORY_PARTS: dict[str, dict[str, Any]] = {
    "own": {"color": "tab:blue", "label": "own (its stage)"},
    "lent": {"color": "tab:orange", "label": "lent (others' weights held here)"},
    "reserved": {"color": "tab:gray", "label": "reserved (other work)"},
    "free": {"color": "white", "edgecolor": "0.55", "label": "free"},
    "borrowed": {"color": "none", "edgecolor": "tab:red", "hatch": "xx",
                 "label": "borrowed (its weights held by lenders)"},
}
_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


def memory_rows(plan: Plan, problem: Problem) -> list[MemoryRow]:
    """The plan's memory map: its ``harvest`` section's rows (devices, then lending hosts), or, for a
    plan that keeps its weights at home, one row per device of ``problem`` with own and free only.

    ``own + lent + reserved + free = capacity`` (after the margin) on every row.
    """
    if plan.harvest is not None:
        return list(plan.harvest.memory)
    own = {s.device: s.memory for s in plan.stages}
    return [MemoryRow(d, cap, own.get(d, 0), 0, 0, 0, cap - own.get(d, 0))
            for d, cap in zip(problem.devices, problem.capacity, strict=True)]


def memory_unit(largest: float) -> tuple[str, int]:
    """The binary unit the memory panel counts in: the largest that ``largest`` bytes reach.

    >>> memory_unit(3.5e9), memory_unit(10**6), memory_unit(0)
    (('GiB', 1073741824), ('KiB', 1024), ('B', 1))
    """
    return next(((name, size) for name, size in _UNITS if largest >= size), _UNITS[-1])


def fill_drain(times: Sequence[float], microbatches: int) -> list[list[tuple[float, float]]]:
    """(start, finish) of each microbatch on each stage, GPipe fill-drain: a microbatch starts on a
    stage once the stage is done with the one before and the stage before is done with it.

    >>> fill_drain([1.0, 2.0], 2)
    [[(0.0, 1.0), (1.0, 2.0)], [(1.0, 3.0), (3.0, 5.0)]]
    """
    schedule: list[list[tuple[float, float]]] = []
    for k, t in enumerate(times):
        row: list[tuple[float, float]] = []
        for j in range(microbatches):
            ready = max(row[j - 1][1] if j else 0.0, schedule[k - 1][j][1] if k else 0.0)
            row.append((ready, ready + t))
        schedule.append(row)
    return schedule


def plans_figure(problem: Problem, plans: Mapping[str, Plan]) -> Figure:
    """A figure of ``plans`` (name → plan, all of ``problem``): a Gantt chart each, then the memory panel."""
    if not plans:
        raise ValueError("no plans to draw: give at least one")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(plans)
    fig, axes = plt.subplots(len(names) + 1, 1, figsize=(11, 2.0 * len(names) + 3.6),
                             gridspec_kw={"height_ratios": [1.0] * len(names) + [1.8]})
    colors = plt.get_cmap("tab10")
    horizon = max(plan.latency for plan in plans.values()) * 1e3
    for ax, name in zip(axes, names, strict=False):
        plan = plans[name]
        for k, row in enumerate(fill_drain([s.time for s in plan.stages], problem.options.microbatches)):
            for m, (start, finish) in enumerate(row):
                ax.barh(k, (finish - start) * 1e3, left=start * 1e3, color=colors(m % 10),
                        edgecolor="white", height=0.8)
        ax.set_yticks(range(len(plan.stages)), [s.device for s in plan.stages])
        ax.invert_yaxis()
        ax.set_xlim(0, horizon * 1.02 if horizon > 0 else 1.0)
        title = (f"{name}: bottleneck {format_seconds(plan.bottleneck)}, latency {format_seconds(plan.latency)} "
                 f"({plan.certificate.status})")
        if plan.harvest is not None:
            title += (f"; {format_bytes(plan.harvest.borrowed_bytes)} borrowed in {len(plan.harvest.loans)} loans, "
                      "fetches included")
        ax.set_title(title, fontsize=9, loc="left")
    axes[-2].set_xlabel("time (ms); colours are microbatches")
    _memory_panel(axes[-1], problem, plans)
    fig.tight_layout()
    return fig


def plot_plans(problem: Problem, plans: Mapping[str, Plan], path: str | Path) -> Path:
    """Write :func:`plans_figure` to ``path`` (PNG)."""
    import matplotlib.pyplot as plt

    fig = plans_figure(problem, plans)
    out = Path(path)
    try:
        fig.savefig(out, dpi=110)
    finally:
        plt.close(fig)
    return out


def _memory_panel(ax: Axes, problem: Problem, plans: Mapping[str, Plan]) -> None:
    """Per device (then per lending host), a stacked bar per plan; see the module docstring."""
    rows = {name: {row.device: row for row in memory_rows(plan, problem)} for name, plan in plans.items()}
    hosts = sorted({device for by_device in rows.values() for device in by_device} - set(problem.devices))
    columns = [*problem.devices, *hosts]
    largest = max((row.capacity + row.borrowed for by_device in rows.values() for row in by_device.values()),
                  default=0)
    unit, scale = memory_unit(largest)
    width = 0.8 / len(plans)
    labelled: set[str] = set()
    for j, device in enumerate(columns):
        for i, name in enumerate(plans):
            row = rows[name].get(device)
            if row is None:  # a host that lends in another plan only
                continue
            x = j - 0.4 + (i + 0.5) * width
            bottom = 0
            for part in ("own", "lent", "reserved", "free"):
                nbytes = max(getattr(row, part), 0)
                _segment(ax, x, width, nbytes / scale, bottom / scale, f"{name}/{device}/{part}", part, labelled)
                bottom += nbytes
            if row.borrowed:
                _segment(ax, x, width, row.borrowed / scale, row.capacity / scale, f"{name}/{device}/borrowed",
                         "borrowed", labelled)
            if len(plans) > 1:
                ax.text(x, (row.capacity + row.borrowed) / scale, name, rotation=90, ha="center", va="bottom",
                        fontsize=6)
    capacity = {device: row.capacity for by_device in rows.values() for device, row in by_device.items()}
    ax.set_xticks(range(len(columns)), [f"{d}\n{format_bytes(capacity.get(d, 0))}" for d in columns], fontsize=8)
    ax.set_ylabel(f"memory ({unit}) after the margin")
    # Headroom above the tallest bar for the plan names and the legend.
    ax.set_ylim(0, largest / scale * (1.5 if len(plans) > 1 else 1.3) if largest else 1.0)
    ax.set_title("memory per device: own + lent + reserved + free = capacity; borrowed is held elsewhere",
                 fontsize=9, loc="left")
    ax.legend(fontsize=7, ncol=len(MEMORY_PARTS), loc="upper left")


def _segment(ax: Axes, x: float, width: float, height: float, bottom: float, gid: str, part: str,
             labelled: set[str]) -> None:
    style = dict(MEMORY_PARTS[part])
    if part in labelled:  # one legend entry per part
        del style["label"]
    labelled.add(part)
    (patch,) = ax.bar([x], [height], width=width, bottom=[bottom], linewidth=0.6, **style)
    patch.set_gid(gid)
