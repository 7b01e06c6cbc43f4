"""The tie-break among plans of equal bottleneck (pipeplan.planner.ilp_exact.tie_break): fewer devices first,
the bottleneck and the proof untouched, a solved model reused, a model too slow to build skipped."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipeplan.costmodel.cluster import Cluster
from pipeplan.planner import GraphBuilder, PlanOptions, Problem, solve
from pipeplan.planner.bound import BoundProgram, Charging, Round, StageBound
from pipeplan.planner.bound.ideals import isolated_layers
from pipeplan.planner.ilp import SolverOptions, interchangeable
from pipeplan.planner.ilp_constraints import build_constrained, split_classes
from pipeplan.planner.ilp_exact import Settings, build_estimate, tie_break
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.simulate import make_plan
from tests.planner_problems import broadcast_problems, problems

EXACT = SolverOptions(time_limit=20.0, workers=1, seed=0)


def three_devices() -> Cluster:
    return Cluster.from_dict({"name": "three", "devices": [
        {"id": f"d{i}", "memory": 2**34, "peak_flops": 1e12, "mem_bandwidth": 1e15} for i in range(3)],
        "topology": {"intra_host": {"bandwidth": 1e12, "latency": 0.0}}})


def tied_problem() -> Problem:
    """a (10 units) → b (4.9) → c (4.9), tiny tensors: {a}{b,c} and {a}{b}{c} share the optimal
    bottleneck (a), the first on 2 devices."""
    b = GraphBuilder("tied", batch_size=1)
    b.layer("a", flops=10 * 10**9)
    b.layer("b", flops=49 * 10**8, inputs={"a": 16})
    b.layer("c", flops=49 * 10**8, inputs={"b": 16})
    return Problem(b.build(), three_devices(), options=PlanOptions(microbatches=4))


def spread_plan(problem: Problem) -> Plan:
    """a, b, c on d0, d1, d2: the optimal bottleneck on 3 devices."""
    return make_plan(problem, [0, 1, 2], Certificate("hand", "HEURISTIC", 0.0), order=["d0", "d1", "d2"])


def test_tie_break_takes_fewer_devices_at_the_same_bottleneck() -> None:
    problem = tied_problem()
    plan = solve(problem, EXACT)
    spread = spread_plan(problem)
    assert plan.certificate.status == "OPTIMAL"
    assert len(plan.stages) == 2 and plan.assignment()["b"] == plan.assignment()["c"] != plan.assignment()["a"]
    assert plan.bottleneck == pytest.approx(spread.bottleneck, rel=1e-12)
    assert plan.certificate.objective == pytest.approx(spread.bottleneck, rel=1e-12)


def test_tie_break_leaves_the_certificate_alone() -> None:
    problem = tied_problem()
    with_tie, without = solve(problem, EXACT), solve(problem, replace(EXACT, tie_break=False))
    assert with_tie.certificate.status == without.certificate.status == "OPTIMAL"
    for field in ("objective", "best_bound", "gap"):
        assert getattr(with_tie.certificate, field) == pytest.approx(getattr(without.certificate, field), rel=1e-12)
    assert with_tie.certificate.solver is not None
    assert any(note.startswith("tie-break: OPTIMAL") for note in with_tie.certificate.solver.passes)


def test_tie_break_improves_a_spread_plan_on_a_new_model_and_on_a_solved_one() -> None:
    problem = tied_problem()
    spread = spread_plan(problem)
    costs = Ticks.of(problem)
    classes = split_classes(interchangeable(problem), problem.placement)
    settings = Settings(10.0, 1, 0)
    fresh, note = tie_break(problem, spread, classes, settings)
    assert len(fresh.stages) == 2 and fresh.bottleneck <= spread.bottleneck * (1 + 1e-12)
    assert "a new model" in note and "3 → 2 devices" in note
    solved = build_constrained(problem, costs, classes)  # a model as CP-SAT step 3 leaves it: no `used`
    reused, note = tie_break(problem, spread, classes, settings, solved, costs)
    assert "the solved model" in note and "3 → 2 devices" in note
    assert reused.assignment() == fresh.assignment()


def test_tie_break_is_skipped_when_its_model_cannot_be_built_in_time() -> None:
    problem = tied_problem()
    spread = spread_plan(problem)
    size, seconds = build_estimate(problem, Ticks.of(problem))
    assert size > 0 and seconds > 0
    classes = split_classes(interchangeable(problem), problem.placement)
    kept, note = tie_break(problem, spread, classes, Settings(seconds / 10, 1, 0))
    assert kept is spread
    assert note.startswith("tie-break: skipped: building its model") and "3 devices" in note


def test_the_stage_programs_tie_break_takes_fewer_devices_at_the_same_bottleneck() -> None:
    problem = tied_problem()
    costs = Ticks.of(problem)
    limit = costs.bottleneck(problem, [0, 1, 2])  # the spread plan's: the optimum
    program = BoundProgram.of(problem, costs, interchangeable(problem), limit)
    assert program is not None
    found = program.fewest(limit)
    assert found is not None and len(found.order) == 2
    assert found.dev_of[1] == found.dev_of[2] != found.dev_of[0]
    assert costs.bottleneck(problem, found.dev_of) <= limit
    assert program.fewest(limit - 1) == StageBound(limit - 1)  # nothing beats the optimum
    plan = solve(problem, EXACT)
    assert plan.certificate.solver is not None
    assert any(note.startswith("stage-program tie-break: FOUND") and "(2 devices" in note
               for note in plan.certificate.solver.passes)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(problems(), broadcast_problems()))
def test_the_stage_programs_tie_break_never_uses_more_devices_than_its_plans(problem: Problem) -> None:
    # Every chain the high-charge round finds costs at most its value stage by stage, so the tie-break
    # under that value finds a plan on as few devices or fewer, within the value in ticks (the layers
    # with no edges join the chains afterwards, outside the value: such problems are left out).
    assume(problem.edges and not isolated_layers(problem))
    costs = Ticks.of(problem)
    classes = interchangeable(problem)
    program = BoundProgram.of(problem, costs, classes, None)
    assert program is not None
    high = program.run(Round(Charging.HIGH, refined=program.links.differ))
    assume(high is not None and high.dev_of)
    assert high is not None
    found = program.fewest(high.bound)
    assert found is not None and found.dev_of
    assert len(found.order) <= len(high.order)
    assert costs.bottleneck(problem, found.dev_of) <= high.bound
