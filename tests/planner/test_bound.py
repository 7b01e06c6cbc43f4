"""The stage program's parts (pipeplan.planner.bound): its size limits, its one cache owner, its rounds
within a solve."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipeplan.planner.bound import LIMITS, BoundProgram, Charging, Incumbent, Round, Search
from pipeplan.planner.bound import limits as bound_limits
from pipeplan.planner.bound.candidates import lattice
from pipeplan.planner.bound.memory import fitting
from pipeplan.planner.ilp import interchangeable, solve
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import PlanOptions, Problem
from tests.planner_problems import EXACT, ROOFLINE, broadcast_problems, cluster_of, graph_of, problems, tick_optimum


def across_hosts() -> Problem:
    """One layer read by three branches that join again, on 2 + 2 devices of two hosts: only exact
    receipts (held stages) bound it at its optimum (tests/planner/test_ilp_bound.py)."""
    edges = [(0, 1, 2_000_000), (0, 2, 2_000_000), (0, 3, 2_000_000),
             (1, 4, 2_000_000), (2, 4, 2_000_000), (3, 4, 2_000_000)]
    hosts = [0, 0, 1, 1]
    bw = [[4e9 if hosts[a] == hosts[b] else 0.5e9 for b in range(4)] for a in range(4)]
    return Problem(graph_of([2_000_000] * 5, edges), cluster_of([1.0] * 4, bw, latency=1e-4), ROOFLINE,
                   PlanOptions(microbatches=1))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(problems(), broadcast_problems()))
def test_a_cache_that_starts_over_changes_no_value_or_chain(problem: Problem) -> None:
    costs = Ticks.of(problem)
    classes = interchangeable(problem)
    roomy = BoundProgram.of(problem, costs, classes, None)
    tight = BoundProgram.of(problem, costs, classes, None, limits=dataclasses.replace(LIMITS, cached_per_table=4))
    assert roomy is not None and tight is not None
    rounds = [Round(), Round(Charging.HIGH), Round(refined=True), Round(Charging.HIGH, refined=True),
              Round(Charging.LIKELY, refined=True), Round(refined=True, spread=roomy.ceiling),
              Round(refined=True, held=roomy.ceiling)]
    for run in rounds:
        a, b = roomy.run(run), tight.run(run)
        assert a is not None and b is not None
        assert (a.bound, a.dev_of, a.order) == (b.bound, b.dev_of, b.order), run
    assert roomy.caches.restarts == 0
    assume(max(roomy.caches.entries.values(), default=0) > 4)  # a table kept more than the tight budget
    assert tight.caches.restarts > 0


def test_limits_past_which_the_program_gives_up() -> None:
    problem = across_hosts()
    costs = Ticks.of(problem)
    classes = interchangeable(problem)  # two classes of two devices: 3 · 3 · 3² = 81 states
    assert classes == [[0, 1], [2, 3]]

    def program(**limits: int) -> BoundProgram | None:
        return BoundProgram.of(problem, costs, classes, None, limits=dataclasses.replace(LIMITS, **limits))

    assert program(max_states=80) is None and program(max_states=81) is not None
    assert program(max_ideals=4) is None and program(max_cells=4 * 5) is None
    assert program(max_pairs=1) is None
    no_held = program(max_held=0)
    assert no_held is not None
    assert no_held.run(Round(refined=True, held=no_held.ceiling)) is None  # too many held stages: no value
    assert no_held.run(Round(refined=True)) is not None  # the other rounds still run
    few_held_ideals = program(max_held_ideals=1)
    assert few_held_ideals is not None
    assert few_held_ideals.run(Round(refined=True, held=few_held_ideals.ceiling)) is None


def test_held_stages_built_in_small_chunks_give_the_same_bound() -> None:
    problem = across_hosts()
    costs = Ticks.of(problem)
    classes = interchangeable(problem)
    whole = BoundProgram.of(problem, costs, classes, None)
    chunked = BoundProgram.of(problem, costs, classes, None, limits=dataclasses.replace(LIMITS, held_chunk=3))
    assert whole is not None and chunked is not None
    run = Round(refined=True, held=whole.ceiling)
    a, b = whole.run(run), chunked.run(run)
    assert a is not None and b is not None
    assert a.bound == b.bound == tick_optimum(problem, costs)


def test_a_solve_past_a_limit_goes_on_without_the_held_round(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = across_hosts()
    proven = solve(problem, EXACT)
    assert proven.certificate.solver is not None
    assert proven.certificate.solver.solver_status.startswith("not run")  # the held round proves it
    monkeypatch.setattr(bound_limits, "LIMITS", dataclasses.replace(LIMITS, max_held=0))
    plan = solve(problem, EXACT)
    assert plan.certificate.status == "OPTIMAL" and plan.certificate.solver is not None
    assert plan.certificate.solver.solver_status == "OPTIMAL"  # CP-SAT had to prove it
    assert plan.bottleneck == pytest.approx(proven.bottleneck, rel=1e-9)


def test_the_search_proves_the_optimum_from_no_plan() -> None:
    problem = across_hosts()
    costs = Ticks.of(problem)
    program = BoundProgram.of(problem, costs, interchangeable(problem), None)
    assert program is not None
    best = Incumbent()
    search = Search(problem, costs, program, best, gap_limit=0.0, deadline=time.perf_counter() + 60)
    assert search.needed() is None and not search.gap_closed()  # no plan known yet
    search.run(time.perf_counter())
    optimum = tick_optimum(problem, costs)
    assert search.gap_closed() and search.lower == optimum
    assert best.plan is not None and best.ticks == optimum
    assert best.plan.certificate.method == "ilp"  # the program's own chain, scored by the simulator


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(problems(), broadcast_problems()))
def test_chain_counts_of_the_lattice_are_the_chain_members_in_each_ideal(problem: Problem) -> None:
    costs = Ticks.of(problem)
    shared = lattice(problem, costs, interchangeable(problem), LIMITS)
    assert shared is not None
    ideals = shared.ideals
    expected = [sum(ideals.member[i, w] for w in shared.chains[u][0]) if u in shared.chains else 0
                for i, u in zip(ideals.rows.tolist(), ideals.cols.tolist(), strict=True)]
    assert shared.chain_in.tolist() == expected


@pytest.mark.parametrize("seed", range(4))
def test_fitting_counts_each_stage_with_its_largest_workspace(seed: int) -> None:
    # Ideals: the prefixes of a random order of 12 layers; every stage between two of them, on three
    # capacities, against the memory summed layer by layer.  Few sizes, so stages tie on the largest.
    rng = np.random.default_rng(seed)
    n = 12
    order = rng.permutation(n)
    held = rng.integers(0, 50, n)
    workspace = rng.choice([0, 5, 20, 40, 80], n)
    member = np.zeros((n + 1, n), dtype=bool)
    for i in range(1, n + 1):
        member[i] = member[i - 1]
        member[i, order[i - 1]] = True
    memory = np.concatenate(([0], np.cumsum(held[order])))
    top = np.concatenate(([0], np.maximum.accumulate(workspace[order])))
    added = np.concatenate(([-1], order))
    src, dst = (a.ravel() for a in np.triu_indices(n + 1, 1))
    capacities = [60, 150, 400]
    fits = np.ones((3, len(src)), dtype=bool)
    out = fitting(member, memory, top, workspace, added, src, dst, fits, capacities, cells=5 * n)
    need = np.array([held[order[s:d]].sum() + workspace[order[s:d]].max() for s, d in zip(src, dst, strict=True)])
    assert out.tolist() == [(need <= cap).tolist() for cap in capacities]
    assert 0 < out.sum() < out.size
