"""Layer prices (pipeplan.planner.bound.prices): the bound against brute force, the windows against the
stage program without them, the candidate stages' memory; the fill of pipeplan.planner.ilp_scale."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pipeplan.planner.ilp_scale as scale
from pipeplan.costmodel.cluster import Cluster
from pipeplan.planner.bound import BoundProgram, Charging, Round
from pipeplan.planner.bound.prices import Prices
from pipeplan.planner.ilp import SolverOptions, interchangeable, solve
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.plan import relative_gap
from pipeplan.planner.problem import PlanError, PlanOptions, Problem
from pipeplan.planner.simulate import evaluate
from tests.planner_problems import (
    ROOFLINE,
    broadcast_problems,
    brute_force,
    cluster_of,
    graph_of,
    problems,
    tick_optimum,
)


def cluster_with(speeds: list[float], memory: list[int]) -> Cluster:
    """Devices of these speeds (GFLOP/s) and memory sizes on one 4 GB/s switch."""
    devices = [{"id": f"d{i}", "host": "h0", "memory": m, "peak_flops": s * 1e9, "mem_bandwidth": 1e12}
               for i, (s, m) in enumerate(zip(speeds, memory, strict=True))]
    return Cluster.from_dict({"name": "mixed", "devices": devices,
                              "topology": {"intra_host": {"bandwidth": 4e9, "latency": 1e-4}}})


@st.composite
def mixed_problems(draw: st.DrawFn) -> Problem:
    """Random DAGs on devices of two speeds and two memory sizes, memory often tight."""
    problem = draw(problems())
    k = problem.n_devices
    speeds = [draw(st.sampled_from([1.0, 3.0])) for _ in range(k)]
    memory = [draw(st.sampled_from([2**29, 2**30])) for _ in range(k)]
    return Problem(problem.graph, cluster_with(speeds, memory), ROOFLINE, problem.options)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(problems(), mixed_problems(), broadcast_problems()))
def test_price_bound_never_exceeds_the_optimum(problem: Problem) -> None:
    costs = Ticks.of(problem)
    try:
        optimum = tick_optimum(problem, costs)
    except AssertionError:  # nothing fits
        return
    prices = Prices.of(problem, costs, interchangeable(problem))
    assert 0 <= prices.bound() <= optimum
    assert (prices.layer >= 0).all() and (prices.compute_weight >= 0).all() and (prices.memory_weight >= 0).all()


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(problems(), mixed_problems(), broadcast_problems()), st.integers(0, 2))
def test_windows_change_no_value_of_the_stage_program(problem: Problem, slack: int) -> None:
    # the windows drop only stages no chain under the limit uses: every run gives the same value
    costs = Ticks.of(problem)
    try:
        optimum = tick_optimum(problem, costs)
    except AssertionError:
        return
    classes = interchangeable(problem)
    upper = optimum + slack * max(1, optimum // 20)
    pruned = BoundProgram.of(problem, costs, classes, upper)
    full = BoundProgram.of(problem, costs, classes, upper, use_windows=False)
    assert pruned is not None and full is not None
    assert pruned.pairs <= full.pairs
    runs = [Round(), Round(Charging.HIGH), Round(refined=True), Round(refined=True, spread=optimum),
            Round(refined=True, held=optimum), Round(Charging.LIKELY, refined=True)]
    for run in runs:
        a, b = pruned.run(run), full.run(run)
        assert a is not None and b is not None
        assert a.bound == b.bound, run
    for program in (pruned, full):
        program.tighten(optimum)
    assert pruned.run(Round(refined=True)).bound == full.run(Round(refined=True)).bound  # type: ignore[union-attr]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(problems(), mixed_problems()))
def test_candidate_stages_fit_memory_with_their_workspace(problem: Problem) -> None:
    costs = Ticks.of(problem)
    classes = interchangeable(problem)
    program = BoundProgram.of(problem, costs, classes, None)
    assert program is not None
    member = program.stages.member
    for cls, cs in zip(classes, program.stages.per_class, strict=True):
        for s, t in zip(cs.src.tolist(), cs.dst.tolist(), strict=True):
            layers = np.flatnonzero(member[t] & ~member[s]).tolist()
            assert problem.memory(layers) <= problem.capacity[cls[0]]


def test_windows_keep_few_stages_of_a_long_chain() -> None:
    # 60 equal layers on 4 equal devices: under a limit 2% above the optimum (15 layers a stage)
    # the i-th boundary can only be after layer 15·i, so 4 stages stay; without windows, every run
    # of 1 to 15 layers (795)
    g = graph_of([1_000_000] * 60, [(i, i + 1, 0) for i in range(59)])
    problem = Problem(g, cluster_of([1.0] * 4), ROOFLINE, PlanOptions(microbatches=1))
    costs = Ticks.of(problem)
    classes = interchangeable(problem)
    upper = int(tick_optimum_of_chain(costs, 15) * 1.02)
    pruned = BoundProgram.of(problem, costs, classes, upper)
    full = BoundProgram.of(problem, costs, classes, upper, use_windows=False)
    assert pruned is not None and full is not None
    assert (full.pairs, pruned.pairs) == (795, 4)
    assert pruned.run().bound == full.run().bound == tick_optimum_of_chain(costs, 15)  # type: ignore[union-attr]


def tick_optimum_of_chain(costs: Ticks, layers: int) -> int:
    """Ticks of ``layers`` consecutive layers on device 0: the chain's optimal stage."""
    return int(costs.compute[:layers, 0].sum())


def test_price_bound_sees_the_slow_devices_and_memory() -> None:
    # six 3 ms layers of 100 MiB on two fast devices and one three times slower: by compute alone
    # the slow one covers a third of the bottleneck, B ≥ 18 / (2 + 1/3) = 7.71 ms; with room for
    # half a layer's weights it covers 1.5 ms at most, B ≥ (18 − 1.5) / 2 = 8.25 ms (plans: 9 ms)
    g = graph_of([3_000_000] * 6, [(i, i + 1, 0) for i in range(5)], params=[100 * 2**20] * 6)
    cluster = cluster_with([1.0, 1.0, 1 / 3], [2**30, 2**30, 50 * 2**20])
    problem = Problem(g, cluster, ROOFLINE, PlanOptions(microbatches=1, memory_margin=0.0))
    costs = Ticks.of(problem)
    bound = Prices.of(problem, costs, interchangeable(problem)).bound() / costs.scale
    assert bound == pytest.approx(0.00825, rel=1e-6)
    assert bound <= brute_force(problem)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(problems(), mixed_problems()))
def test_fill_at_scale_gives_a_valid_plan_and_a_valid_bound(problem: Problem) -> None:
    if problem.options.objective != "throughput":
        return
    best = brute_force(problem)
    if best == float("inf"):
        return
    try:
        plan = scale.solve_at_scale(problem, 10.0)
    except PlanError as exc:  # the fill may miss a plan that fits only out of order
        assert "no fill" in str(exc)
        return
    cert = plan.certificate
    owner = plan.assignment()
    assert evaluate(problem, [problem.devices.index(owner[name]) for name in problem.layers]).violation is None
    assert cert.best_bound is not None and cert.best_bound <= best * (1 + 1e-9) <= plan.bottleneck * (1 + 1e-9)
    gap = relative_gap(cert.objective, cert.best_bound)
    assert cert.gap == (0.0 if cert.status == "OPTIMAL" else pytest.approx(gap))


def test_solve_takes_the_scale_path_past_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    g = graph_of([2_000_000, 1_000_000, 1_000_000, 2_000_000], [(0, 1, 0), (0, 2, 0), (1, 3, 0), (2, 3, 0)])
    problem = Problem(g, cluster_of([1.0, 1.0]), ROOFLINE, PlanOptions(microbatches=1))
    monkeypatch.setattr(scale, "SCALE_CELLS", 8)
    plan = solve(problem, SolverOptions(time_limit=5, workers=1))
    assert plan.certificate.solver is not None and plan.certificate.solver.solution.startswith("fill")
    # 6 ms of work on two equal devices: 3 ms each, which the fill finds and the bound proves
    assert plan.certificate.status == "OPTIMAL" and plan.bottleneck == pytest.approx(0.003, rel=1e-6)
    latency = Problem(g, cluster_of([1.0, 1.0]), ROOFLINE, PlanOptions(objective="latency", microbatches=1))
    assert not scale.at_scale(latency)  # the latency objective stays with the stage program and CP-SAT


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(problems(), mixed_problems()))
def test_cold_solve_starts_from_the_prices_and_proves_the_optimum(problem: Problem) -> None:
    # no warm start: the stage program's first ceiling comes from the price bound (pipeplan.planner.bound)
    costs = Ticks.of(problem)
    try:
        optimum = tick_optimum(problem, costs)
    except AssertionError:
        return
    # Without the tie-break, which may pick a plan equal in seconds whose rounded-down terms sum to a
    # tick more: only the throughput solve's own plan is the tick optimum.
    plan = solve(problem, SolverOptions(time_limit=30, workers=2, seed=0, warm_start=False, tie_break=False))
    assert plan.certificate.status == "OPTIMAL"
    assert costs.bottleneck(problem, [problem.devices.index(plan.assignment()[n]) for n in problem.layers]) == optimum
