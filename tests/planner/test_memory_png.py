"""The Gantt/memory PNG (pipeplan.planner.plot): drawn, written, and read back from the figure.

Each memory bar segment carries the gid ``PLAN/DEVICE/PART``; the tests check the heights and the
stacking against the plans' memory maps (a harvest plan's own, lent, reserved, free and borrowed;
a plain plan's own and free), and the Gantt bars against the stage times.  The problems are those
of ``tests/planner/test_harvest.py`` (1 GB of weights a layer, the real CP-SAT).
"""

from __future__ import annotations

import doctest
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
from matplotlib.patches import Rectangle

import pipeplan.planner.plot as plot
from pipeplan.cli import main
from pipeplan.planner.compare import compare, plot_comparison
from pipeplan.planner.harvest import HarvestOptions
from pipeplan.planner.harvest_solve import solve_harvest
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import Problem
from tests.cost_tables import two_types
from tests.planner.test_harvest import EXACT, GB, chain, cluster, problem

GIB = 2**30
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def borrowing() -> tuple[Problem, Plan]:
    # d1 is slow (500 ms a layer), so d0 runs all four layers and borrows three: from d1 (0.5 GB of
    # it reserved by other work) and from the host's 2 GB.
    p = problem(chain(4), cluster({"d0": (1.0, 3.5 * GB), "d1": (0.2, 4 * GB)}))
    plan = solve_harvest(p, HarvestOptions.of(host_memory="2GB", reserved={"d1": "0.5GB"}), EXACT)
    assert plan.harvest is not None and plan.device_order() == ["d0"]
    return p, plan


def segments(fig: Any) -> dict[str, Any]:
    """The memory panel's bar segments by gid."""
    return {patch.get_gid(): patch for patch in fig.axes[-1].patches if patch.get_gid()}


def test_doctests() -> None:
    failures, tried = doctest.testmod(plot)
    assert tried > 0 and failures == 0


def test_the_memory_panel_stacks_each_plans_memory_map_against_capacity(borrowing: tuple[Problem, Plan],
                                                                       tmp_path: Path) -> None:
    p, harvest = borrowing
    comp = compare(p, EXACT)
    plans = {**comp.plans, "harvest": harvest}
    fig = plot.plans_figure(p, plans)
    try:
        out = tmp_path / "plans.png"
        fig.savefig(out)
        assert out.read_bytes()[:8] == PNG_MAGIC
        bars = segments(fig)
        assert "GiB" in fig.axes[-1].get_ylabel()
        columns = [label.get_text().split("\n")[0] for label in fig.axes[-1].get_xticklabels()]
        assert columns == ["d0", "d1", "host:host0"]  # the devices, then the host that lends
        for name, plan in plans.items():
            for row in plot.memory_rows(plan, p):
                stacked = 0
                for part in ("own", "lent", "reserved", "free"):
                    bar = bars[f"{name}/{row.device}/{part}"]
                    assert bar.get_height() * GIB == pytest.approx(getattr(row, part), abs=1), (name, row, part)
                    assert bar.get_y() * GIB == pytest.approx(stacked, abs=1)
                    stacked += getattr(row, part)
                assert stacked == row.capacity  # own + lent + reserved + free reach the capacity
                borrowed = bars.get(f"{name}/{row.device}/borrowed")
                if row.borrowed:
                    assert borrowed is not None and borrowed.get_y() * GIB == pytest.approx(row.capacity, abs=1)
                    assert borrowed.get_height() * GIB == pytest.approx(row.borrowed, abs=1)
                else:
                    assert borrowed is None
        # A plain plan: own is its stage's memory, nothing lent or borrowed, and no host column.
        ilp = plans["ilp"]
        for d, cap in zip(p.devices, p.capacity, strict=True):
            own = sum(s.memory for s in ilp.stages if s.device == d)
            assert bars[f"ilp/{d}/own"].get_height() * GIB == pytest.approx(own, abs=1)
            assert bars[f"ilp/{d}/free"].get_height() * GIB == pytest.approx(cap - own, abs=1)
            assert bars[f"ilp/{d}/lent"].get_height() == 0 and f"ilp/{d}/borrowed" not in bars
        assert not any(gid.startswith("ilp/host:") for gid in bars)
        # The harvest plan: what the lenders hold is what d0 borrowed, three layers of 1 GB.
        lent = sum(bars[f"harvest/{d}/lent"].get_height() for d in ("d0", "d1", "host:host0"))
        assert lent * GIB == pytest.approx(bars["harvest/d0/borrowed"].get_height() * GIB, abs=1)
        assert bars["harvest/d0/borrowed"].get_height() * GIB == pytest.approx(3 * GB, abs=1)
        assert bars["harvest/d1/reserved"].get_height() * GIB == pytest.approx(GB / 2, abs=1)
        # Its Gantt chart runs each stage for its stage time, fetches included.
        gantt = fig.axes[len(plans) - 1]
        assert "borrowed in 3 loans" in gantt.get_title(loc="left")
        bars_of_stages = [patch for patch in gantt.patches if isinstance(patch, Rectangle)]
        widths = [patch.get_width() for patch in bars_of_stages]
        assert widths == pytest.approx([s.time * 1e3 for s in harvest.stages for _ in range(p.options.microbatches)])
        finish = max(patch.get_x() + patch.get_width() for patch in bars_of_stages)
        assert finish == pytest.approx(harvest.latency * 1e3)
    finally:
        plt.close(fig)


def test_plot_comparison_writes_the_png_and_closes_its_figure(borrowing: tuple[Problem, Plan],
                                                              tmp_path: Path) -> None:
    p, harvest = borrowing
    before = set(plt.get_fignums())
    out = plot_comparison(compare(p, EXACT), tmp_path / "cmp.png", {"harvest": harvest})
    assert out.read_bytes()[:8] == PNG_MAGIC and set(plt.get_fignums()) == before
    with pytest.raises(ValueError, match="no plans to draw"):
        plot.plans_figure(p, {})


@pytest.mark.parametrize("command", ["compare", "plan"])
def test_pipeplan_draws_the_plan_that_borrows(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ten layers of 0.25 GiB on two devices of 1 GiB fit on no split: the comparison finds no
    # plan, and the PNG shows the plan that borrows the host's memory, alone.
    (tmp_path / "costs.csv").write_text("layer,A100,T4,output_bytes,param_bytes\n" + "".join(
        f"l{i},0.002,0.003,1000000,{GIB // 4}\n" for i in range(10)))
    two_types().save(tmp_path / "pair.yaml")
    drawn: list[dict[str, Plan]] = []
    figure = plot.plans_figure

    def spy(problem: Problem, plans: dict[str, Plan]) -> Any:
        drawn.append(dict(plans))
        return figure(problem, plans)

    monkeypatch.setattr(plot, "plans_figure", spy)
    png = tmp_path / "out.png"
    assert main([command, f"table:{tmp_path / 'costs.csv'}", "--cluster", str(tmp_path / "pair.yaml"),
                 "--memory-margin", "0", "--workers", "1", "--harvest", "--host-memory", "8GiB",
                 "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert [list(plans) for plans in drawn] == [["harvest"]]
    harvest = drawn[0]["harvest"].harvest
    assert harvest is not None and {row.device for row in harvest.memory} == {"fast", "slow", "host:host0"}
