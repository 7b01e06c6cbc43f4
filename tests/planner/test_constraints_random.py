"""The ILP under random constraints and either transfer rule equals brute force over every assignment,
and a problem refused (conflicting constraints, memory, infeasible) has no valid plan at all.

Brute force checks the constraints from their layer and device indices, not through
pipeplan.planner.constraints, so the resolution (globs, groups, the convex hulls) is tested too."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeplan.planner.constraints import Pin
from pipeplan.planner.ilp import solve
from pipeplan.planner.problem import PlanError, PlanOptions, Problem
from pipeplan.planner.simulate import evaluate, violation
from tests.planner_problems import EXACT, REL, ROOFLINE, cluster_of, draw_dag, graph_of, score

Rules = tuple[list[tuple[int, int]], list[list[int]], list[int]]  # pins (layer, device), groups, forbidden


@st.composite
def constrained_problems(draw: st.DrawFn) -> tuple[Problem, Rules, PlanOptions]:
    """An unconstrained problem, random constraints on it by index, and the options that write them."""
    flops, edges = draw_dag(draw)
    n, k = len(flops), draw(st.integers(2, 3))
    pins = [(v, draw(st.integers(0, k - 1))) for v in draw(st.lists(st.integers(0, n - 1), max_size=2))]
    groups = [draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=3, unique=True))
              for _ in range(draw(st.integers(0, 1)))]
    forbid = draw(st.lists(st.integers(0, k - 1), max_size=1))
    options = PlanOptions(objective=draw(st.sampled_from(["throughput", "latency"])),
                          comm=draw(st.sampled_from(["overlap", "serial"])), microbatches=draw(st.integers(1, 3)),
                          transfer=draw(st.sampled_from(["per-device", "per-edge"])),
                          max_devices=draw(st.sampled_from([None, 1, 2])))
    free = Problem(graph_of(flops, edges), cluster_of([draw(st.sampled_from([1.0, 2.0])) for _ in range(k)],
                                                      1e9, latency=1e-4), ROOFLINE, options)
    written = replace(options, pins=tuple(Pin(f"l{v}", f"d{d}") for v, d in pins),
                      keep_together=tuple(tuple(f"l{v}" for v in g) for g in groups),
                      forbid_devices=tuple(f"d{d}" for d in forbid))
    return free, (pins, groups, forbid), written


def brute_force_under(free: Problem, rules: Rules) -> float:
    """The best objective over every assignment that the simulator finds valid and that keeps the
    rules, checked here directly from their indices."""
    pins, groups, forbid = rules
    best = math.inf
    for dev_of in itertools.product(range(free.n_devices), repeat=free.n_layers):
        if (any(dev_of[v] != d for v, d in pins) or any(len({dev_of[v] for v in g}) > 1 for g in groups)
                or any(d in forbid for d in dev_of)):
            continue
        ev = evaluate(free, list(dev_of))
        if ev.violation is None:
            best = min(best, ev.latency if free.options.objective == "latency" else ev.bottleneck)
    return best


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(constrained_problems())
def test_constrained_ilp_matches_brute_force(case: tuple[Problem, Rules, PlanOptions]) -> None:
    free, rules, written = case
    best = brute_force_under(free, rules)
    try:
        problem = Problem(free.graph, free.cluster, ROOFLINE, written)
        plan = solve(problem, EXACT)
    except PlanError:  # refused as conflicting, as too big for memory, or infeasible in CP-SAT
        assert best == math.inf
        return
    assert plan.certificate.status == "OPTIMAL"
    assert violation(problem, plan.assignment(), plan.device_order()) is None
    assert score(problem, plan) == pytest.approx(best, rel=REL, abs=1e-9)
