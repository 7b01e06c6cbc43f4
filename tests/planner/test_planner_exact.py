"""Certificates exact in seconds, the tie-break among equal bottlenecks, and the typed certificate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.ilp_exact import EXACT_TOLERANCE
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.plan import Plan, SolverDetails
from pipeplan.planner.problem import PlanOptions, Problem
from tests.planner_problems import ROOFLINE, cluster_of, graph_of

EXACT = SolverOptions(time_limit=30.0, workers=1, seed=0)
HEAVY = 1_000_000_000  # 1 s on a 1 GFLOP/s device


def heavy_and_tiny(m: int) -> tuple[Problem, float]:
    """Two heavy layers and m tiny ones, each worth 0.45 of a 10⁻⁷ tick (the old resolution), fed
    by the first heavy layer through empty tensors; the best plan splits the tiny ones evenly."""
    g = ModelGraph("heavy-and-tiny", batch_size=1)
    tiny = int(0.45 * 2 * HEAVY / 1e7)
    names = ["a", "b"] + [f"t{i}" for i in range(m)]
    for i, name in enumerate(names):
        g.add_layer(Layer(name, "linear", "Linear", i, HEAVY if name in "ab" else tiny, 0, 0, 0, 0, 0))
    for i in range(m):
        g.add_edge("a", f"t{i}", 0)
    problem = Problem(g, cluster_of([1.0, 1.0]), ROOFLINE, PlanOptions(microbatches=1))
    return problem, 1.0 + m * tiny / 2 / 1e9


@pytest.mark.parametrize("warm_start", [True, False])
def test_tiny_layers_under_a_tick_are_balanced_and_the_certificate_is_exact(warm_start: bool) -> None:
    problem, best = heavy_and_tiny(200)
    plan = solve(problem, SolverOptions(time_limit=30.0, workers=1, seed=0, warm_start=warm_start))
    cert = plan.certificate
    # 10⁻⁷ ticks certified a plan 9.0e-6 slower (all tiny layers beside one heavy one)
    assert plan.bottleneck == pytest.approx(best, rel=1e-12)
    assert sorted(len(s.layers) for s in plan.stages) == [101, 101]
    assert cert.status == "OPTIMAL" and cert.gap == 0.0
    assert cert.best_bound is not None and cert.best_bound <= plan.bottleneck
    assert cert.best_bound >= plan.bottleneck * (1 - EXACT_TOLERANCE)


def test_each_term_rounds_down_so_tick_bounds_hold_in_seconds() -> None:
    problem, _ = heavy_and_tiny(10)
    costs = Ticks.of(problem)
    for u in range(problem.n_layers):
        for d in range(problem.n_devices):
            assert problem.time[u][d] * costs.scale - 1 < costs.compute[u, d] <= problem.time[u][d] * costs.scale
    assert costs.scale * max(problem.time[0]) > 2.0**28  # fine: a tiny layer is ~50 ticks
    assert costs.compute[2, 0] > 40


def test_equal_bottlenecks_prefer_fewer_devices() -> None:
    # a 4 ms layer bounds every plan; the 1 ms layers fit beside it on one device or spread over
    # three: the tie-break uses two devices, not three
    g = graph_of([4_000_000, 1_000_000, 1_000_000], [(0, 1, 0), (1, 2, 0)])
    problem = Problem(g, cluster_of([1.0, 1.0, 1.0]), ROOFLINE, PlanOptions(microbatches=1))
    spread = solve(problem, SolverOptions(time_limit=30.0, workers=1, seed=0, tie_break=False))
    plan = solve(problem, EXACT)
    assert plan.bottleneck == spread.bottleneck == pytest.approx(0.004, rel=1e-12)
    assert len(spread.stages) == 3  # the warm start's plan, as good in seconds
    assert [s.layers for s in plan.stages] == [["l0"], ["l1", "l2"]]
    assert plan.certificate.status == "OPTIMAL" and plan.certificate.gap == 0.0


def test_equal_bottlenecks_and_devices_prefer_lower_latency() -> None:
    # 3 + 3 + 2 ms on two devices, one at half speed: 6 ms either way, 10 ms of latency against 11
    from pipeplan.costmodel.hardware import Contention

    g = graph_of([3_000_000, 3_000_000, 2_000_000], [(0, 1, 0), (1, 2, 0)])
    cluster = cluster_of([1.0, 1.0]).with_load("d0", Contention(corunners=1, kind="compute"))
    plan = solve(Problem(g, cluster, ROOFLINE, PlanOptions(microbatches=1)), EXACT)
    assert plan.bottleneck == pytest.approx(0.006, rel=1e-12)
    assert plan.latency == pytest.approx(0.010, rel=1e-12)


def test_certificate_details_are_typed_and_round_trip(tmp_path: Path) -> None:
    g = graph_of([4_000_000, 2_000_000, 2_000_000], [(0, 1, 1_000_000), (1, 2, 1_000_000)])
    plan = solve(Problem(g, cluster_of([1.0, 1.0]), ROOFLINE, PlanOptions(microbatches=1)), EXACT)
    solver = plan.certificate.solver
    assert isinstance(solver, SolverDetails)
    assert solver.tick_seconds > 0 and solver.workers == 1 and solver.time_limit == 30.0
    assert solver.solution and solver.solver_status
    doc = plan.to_dict()
    assert doc["version"] == 3 and doc["certificate"]["solver"]["tick_seconds"] == solver.tick_seconds
    assert "tick_seconds" not in doc["certificate"]["details"]
    path = tmp_path / "plan.json"
    plan.save(path)
    assert Plan.load(path) == plan


def test_version_2_plans_still_load_with_their_untyped_details() -> None:
    g = graph_of([4_000_000, 2_000_000], [(0, 1, 0)])
    doc = solve(Problem(g, cluster_of([1.0, 1.0]), ROOFLINE, PlanOptions(microbatches=1)), EXACT).to_dict()
    old = json.loads(json.dumps(doc))
    old["version"] = 2
    solver = old["certificate"].pop("solver")
    old["certificate"]["details"] = {"tick_seconds": 1e-9, "stage_bound": 0.002, "solver_status": "OPTIMAL",
                                     "workers": 2, "seed": 0, "time_limit": 10.0, "warm_start": "uniform",
                                     "note": "kept"}
    cert = Plan.from_dict(old).certificate
    assert cert.solver == SolverDetails(tick_seconds=1e-9, solution="cp-sat", solver_status="OPTIMAL",
                                        stage_bound=0.002, workers=2, seed=0, time_limit=10.0, warm_start="uniform")
    assert cert.details == {"note": "kept"}
    assert solver["solution"]
