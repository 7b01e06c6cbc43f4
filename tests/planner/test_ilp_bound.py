"""The stage program's bound against brute force, the tick tables, and the model's complete hint."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from pipeplan.planner.baselines import chain_dp
from pipeplan.planner.bound import LIMITS, BoundProgram, Charging, Round, stage_bound
from pipeplan.planner.bound import limits as bound_limits
from pipeplan.planner.bound.links import link_groups
from pipeplan.planner.ilp import SolverOptions, interchangeable, solve
from pipeplan.planner.ilp_exact import plan_devices as _devices
from pipeplan.planner.ilp_model import build_model
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.simulate import evaluate
from tests.planner_problems import (
    EXACT,
    REL,
    ROOFLINE,
    broadcast_problems,
    brute_force,
    chain_problems,
    cluster_of,
    graph_of,
    problems,
    tick_optimum,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(problems(), broadcast_problems()), st.booleans(), st.integers(-3, 3))
def test_stage_bounds_never_exceed_the_optimum(problem: Problem, screened: bool, shift: int) -> None:
    costs = Ticks.of(problem)
    try:
        optimum = tick_optimum(problem, costs)
    except AssertionError:  # nothing fits: no bound to check
        return
    program = BoundProgram.of(problem, costs, interchangeable(problem), optimum if screened else None)
    assert program is not None
    for refined in (False, True):
        low = program.run(Round(refined=refined))
        assert low is not None and low.bound <= optimum
        theta = optimum + shift * max(1, optimum // 10)  # rule out plans up to θ: right below the optimum too
        spread = program.run(Round(refined=refined, spread=theta))
        assert spread is not None and min(spread.bound, theta + 1) <= optimum
        high = program.run(Round(Charging.HIGH, refined=refined))
        likely = program.run(Round(Charging.LIKELY, refined=refined))
        assert high is not None and likely is not None
        for found in (low, spread, high, likely):
            if found.dev_of:
                ev = evaluate(problem, found.dev_of, [problem.devices[d] for d in found.order])
                assert ev.violation is None or "needs" in ev.violation  # only the dropped workspace can break it
        if high.dev_of and not program.stages.isolated:  # the pessimistic chain costs at most its value
            assert costs.bottleneck(problem, high.dev_of) <= high.bound
    # exact receipts, over the stages that cost at most θ: bounds plans up to θ; the pessimistic
    # chain is a real plan again
    for theta in (optimum + shift * max(1, optimum // 10), program.ceiling):
        held = program.run(Round(refined=True, held=theta))
        assert held is not None and min(held.bound, theta + 1) <= optimum
        held_high = program.run(Round(Charging.HIGH, refined=True, held=theta))
        assert held_high is not None
        if held_high.dev_of and not program.stages.isolated:
            assert costs.bottleneck(problem, held_high.dev_of) <= held_high.bound
    program.tighten(optimum)  # a known plan's bottleneck: the stages that cost more are dropped
    for found in (program.run(Round(refined=True)), program.run(Round(refined=True, held=optimum))):
        assert found is not None and found.bound <= optimum


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_solve_proves_the_tick_optimum_across_hosts(problem: Problem) -> None:
    costs = Ticks.of(problem)
    try:
        optimum = tick_optimum(problem, costs)
    except AssertionError:
        return
    # Without the tie-break: among plans equal in seconds it may pick one whose terms, each rounded
    # down to ticks, sum to a tick more (seen: 339791716 against 339791715), so only the plan of the
    # throughput solve itself is the tick optimum.
    plan = solve(problem, dataclasses.replace(EXACT, tie_break=False))
    assert plan.certificate.status == "OPTIMAL"
    assert costs.bottleneck(problem, _devices(problem, plan)[0]) == optimum


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain_problems())
def test_stage_bound_is_exact_on_chains(problem: Problem) -> None:
    costs = Ticks.of(problem)
    found = stage_bound(problem, costs, interchangeable(problem), None)
    assert found is not None and found.dev_of
    assert costs.bottleneck(problem, found.dev_of) == found.bound  # no skips: every charge is exact
    assert found.bound / costs.scale == pytest.approx(chain_dp(problem).bottleneck, rel=REL)


def test_solve_returns_a_proven_plan_without_cp_sat() -> None:
    g = graph_of([4_000_000, 2_000_000, 2_000_000, 3_000_000], [(0, 1, 0), (1, 2, 0), (2, 3, 0)])
    problem = Problem(g, cluster_of([1.0, 1.0]), ROOFLINE, PlanOptions(microbatches=1))
    plan = solve(problem, EXACT)
    assert plan.certificate.status == "OPTIMAL" and plan.certificate.gap == pytest.approx(0.0, abs=1e-6)
    assert plan.certificate.solver.solver_status.startswith("not run")
    assert plan.bottleneck == pytest.approx(brute_force(problem), rel=REL)


def test_bound_gives_up_on_too_many_ideals(monkeypatch: pytest.MonkeyPatch) -> None:
    g = graph_of([1_000_000] * 7, [(0, i, 0) for i in range(1, 7)])  # six branches: 65 ideals
    problem = Problem(g, cluster_of([1.0, 1.0]), ROOFLINE, PlanOptions())
    few = dataclasses.replace(LIMITS, max_ideals=10)
    assert stage_bound(problem, Ticks.of(problem), [[0, 1]], None, limits=few) is None
    enough = dataclasses.replace(LIMITS, max_ideals=65)
    assert stage_bound(problem, Ticks.of(problem), [[0, 1]], None, limits=enough) is not None
    monkeypatch.setattr(bound_limits, "LIMITS", few)  # what a solve reads
    plan = solve(problem, EXACT)  # CP-SAT alone still proves it
    assert plan.certificate.status == "OPTIMAL"
    assert plan.certificate.solver is not None and plan.certificate.solver.stage_bound is None
    assert plan.bottleneck == pytest.approx(0.004, rel=REL)


def test_layers_without_edges_are_placed_by_the_stage_program() -> None:
    g = graph_of([4_000_000, 1_000_000, 3_000_000, 2_000_000], [(0, 1, 0)])  # l2, l3 have no edges
    problem = Problem(g, cluster_of([1.0, 1.0]), ROOFLINE, PlanOptions(microbatches=1))
    costs = Ticks.of(problem)
    found = stage_bound(problem, costs, interchangeable(problem), None)
    assert found is not None and -1 not in found.dev_of
    assert found.bound <= tick_optimum(problem, costs)
    assert solve(problem, EXACT).bottleneck == pytest.approx(0.005, rel=REL)


def test_tick_tables_round_each_term_down() -> None:
    g = graph_of([3_000_000, 5_000_000, 1_000_000], [(0, 1, 700_000), (0, 2, 1_300_000), (1, 2, 0)])
    bw = [[0.0, 1e9, 3e9], [1e9, 0.0, 2e9], [3e9, 2e9, 0.0]]
    problem = Problem(g, cluster_of([1.0, 2.0, 3.0], bw, latency=2e-5), ROOFLINE, PlanOptions(comm="serial"))
    costs = Ticks.of(problem)
    for u, a, b in itertools.product(range(3), repeat=3):
        # down, so that a bound in ticks is a bound in seconds (pipeplan.planner.ilp_ticks)
        exact = problem.transfer(u, a, b) * costs.scale
        assert exact - 1 < costs.transfer[u, a, b] <= exact
    for row, ticks in zip(problem.time, costs.compute.tolist(), strict=True):
        assert all(t * costs.scale - 1 < tick <= t * costs.scale for t, tick in zip(row, ticks, strict=True))


@pytest.mark.parametrize("comm", ["overlap", "serial"])
def test_the_hint_is_a_complete_feasible_solution(comm: str) -> None:
    g = graph_of([3_000_000, 5_000_000, 1_000_000, 2_000_000],
                 [(0, 1, 700_000), (0, 2, 1_300_000), (1, 3, 200_000), (2, 3, 900_000)])
    problem = Problem(g, cluster_of([1.0, 1.0, 2.0], latency=1e-5), ROOFLINE,
                      PlanOptions(comm=comm, max_devices=2))
    costs = Ticks.of(problem)
    classes = interchangeable(problem)
    built = build_model(problem, costs, classes)
    dev_of, order = [2, 0, 2, 0], [2, 0]  # not in the classes' symmetry-breaking order: relabelled
    built.hint(problem, costs, classes, dev_of, order)
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    assert solver.solve(built.model) == cp_model.OPTIMAL
    assert round(solver.objective_value) == costs.bottleneck(problem, dev_of)


def test_stage_bound_sees_the_slow_link_between_hosts() -> None:
    # four equal layers on 2 + 2 devices, the hosts joined by a slow link: a 4-stage pipeline must
    # cross it once, and the bound charges that crossing its real (slow) price
    g = graph_of([2_000_000] * 4, [(i, i + 1, 1_000_000) for i in range(3)])
    bw = [[0.0, 1e10, 1e8, 1e8], [1e10, 0.0, 1e8, 1e8], [1e8, 1e8, 0.0, 1e10], [1e8, 1e8, 1e10, 0.0]]
    problem = Problem(g, cluster_of([1.0] * 4, bw), ROOFLINE, PlanOptions(comm="serial", microbatches=1))
    costs = Ticks.of(problem)
    found = stage_bound(problem, costs, interchangeable(problem), None)
    assert found is not None
    assert found.bound / costs.scale == pytest.approx(brute_force(problem), rel=REL)
    # two stages on one host (4 ms + 0.1 ms hop each); a third stage would pay the 10 ms hop
    assert found.bound / costs.scale == pytest.approx(0.0041, rel=REL)


def test_graph_without_edges_and_one_device() -> None:
    g = graph_of([5_000_000], [])
    problem = Problem(g, cluster_of([1.0]), ROOFLINE, PlanOptions())
    plan = solve(problem, SolverOptions(time_limit=5, workers=1))
    assert plan.bottleneck == pytest.approx(0.005, rel=REL)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.booleans())
def test_crossings_grouped_by_link_keep_the_optimum(problem: Problem, aggregate: bool) -> None:
    # the bare model (no bound, no hint), its crossings grouped by link or one per device pair
    costs = Ticks.of(problem)
    try:
        optimum = tick_optimum(problem, costs)
    except AssertionError:
        return
    built = build_model(problem, costs, interchangeable(problem), aggregate=aggregate)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.solve(built.model) == cp_model.OPTIMAL
    assert round(solver.objective_value) == optimum


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.data())
def test_link_groups_give_one_link_per_pair_of_groups(sizes: list[int], data: st.DataObject) -> None:
    k = len(sizes)
    between = np.array([[[data.draw(st.sampled_from([5, 7])) for _ in range(k)] for _ in range(k)]])
    between = np.minimum(between, between.transpose(0, 2, 1))  # links are the same both ways
    group_of, cross = link_groups(between, sizes)
    for a, b in itertools.product(range(k), repeat=2):
        if a != b or sizes[a] > 1:  # two distinct devices of these classes
            link = cross[group_of[a]][group_of[b]]
            assert link is not None and np.array_equal(link, between[:, a, b])


def test_exact_receipts_close_the_bound_on_branches_across_hosts() -> None:
    # one layer read by three parallel branches that join again, on 2 + 2 devices of two hosts: the
    # refined program charges each receipt the cheapest link from any host used before, which is
    # too low; knowing which host holds each tensor, its bound is the optimum, and proves it
    edges = [(0, 1, 2_000_000), (0, 2, 2_000_000), (0, 3, 2_000_000),
             (1, 4, 2_000_000), (2, 4, 2_000_000), (3, 4, 2_000_000)]
    hosts = [0, 0, 1, 1]
    bw = [[4e9 if hosts[a] == hosts[b] else 0.5e9 for b in range(4)] for a in range(4)]
    problem = Problem(graph_of([2_000_000] * 5, edges), cluster_of([1.0] * 4, bw, latency=1e-4), ROOFLINE,
                      PlanOptions(microbatches=1))
    costs = Ticks.of(problem)
    optimum = tick_optimum(problem, costs)
    program = BoundProgram.of(problem, costs, interchangeable(problem), None)
    assert program is not None
    refined = program.run(Round(refined=True))
    held = program.run(Round(refined=True, held=program.ceiling))
    assert refined is not None and held is not None
    assert refined.bound < 0.8 * optimum and held.bound == optimum
    with pytest.raises(ValueError, match="refined"):  # the state must promise each stage's group
        Round(held=program.ceiling)
    plan = solve(problem, EXACT)
    assert plan.certificate.status == "OPTIMAL" and plan.certificate.solver is not None
    assert plan.certificate.solver.solver_status.startswith("not run")
    assert plan.bottleneck == pytest.approx(brute_force(problem), rel=REL)
    # the stage of layers 0 and 1 sends once over the slow link and twice over a fast one
    assert plan.bottleneck == pytest.approx(0.0041 + 2 * 0.0006, rel=1e-3)
