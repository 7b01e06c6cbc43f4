"""Baseline partitioners on hand-built chains with whole-second costs, checked against brute force.

Devices run 1e9 FLOP/s and links carry 1e9 B/s with no latency: a layer of k·1e9 FLOPs takes
k s, and an output of k·1e9 bytes takes k s to cross a link.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import pytest

from pipeplan.costmodel.cluster import Cluster, load_cluster
from pipeplan.costmodel.zoo import capture_model
from pipeplan.planner.baselines import (
    BASELINES,
    best_baseline,
    chain_dp,
    get_baseline,
    param_balanced,
    time_balanced,
    uniform,
)
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import PlanError, Problem
from pipeplan.planner.simulate import evaluate, violation
from tests.planner_problems import DATA, TIMES, G, make_chain, make_cluster, make_problem


def splits(n: int, k: int) -> Iterator[list[int]]:
    """Every split of 0..n-1 into 1..k contiguous non-empty chunks, as chunk boundaries."""
    for chunks in range(1, min(n, k) + 1):
        for cuts in itertools.combinations(range(1, n), chunks - 1):
            yield [0, *cuts, n]


def on_devices(problem: Problem, bounds: list[int]) -> dict[str, str]:
    """Chunk c on device c."""
    return {problem.layers[v]: problem.devices[c]
            for c in range(len(bounds) - 1) for v in range(bounds[c], bounds[c + 1])}


def brute_force(problem: Problem) -> float:
    """The best objective over every contiguous split on devices 0, 1, ... that is valid."""
    latency = problem.options.objective == "latency"
    floor = problem.options.min_throughput
    best = float("inf")
    for bounds in splits(problem.n_layers, problem.options.max_devices or problem.n_devices):
        ev = evaluate(problem, on_devices(problem, bounds))
        if ev.valid and not (latency and floor and ev.bottleneck * floor > 1.0):
            best = min(best, ev.latency if latency else ev.bottleneck)
    return best


def score_of(plan: Plan, objective: str) -> float:
    return plan.latency if objective == "latency" else plan.bottleneck


def chunks(plan: Plan) -> list[list[str]]:
    return [stage.layers for stage in plan.stages]


# -- exact chunkings ----------------------------------------------------------------------------


def test_uniform_splits_equal_counts() -> None:
    plan = uniform(make_problem())
    assert chunks(plan) == [["a", "b"], ["c", "d"], ["e", "f"]]
    assert plan.device_order() == ["d0", "d1", "d2"]
    assert plan.certificate.method == "uniform" and plan.certificate.status == "HEURISTIC"
    assert plan.bottleneck == 7.0  # a, b then send b's 7 s output


def test_uniform_gives_the_first_chunks_the_extra_layers() -> None:
    problem = make_problem(make_chain([1] * 5, [1] * 4))
    assert [len(c) for c in chunks(uniform(problem))] == [2, 2, 1]


def test_fewer_layers_than_devices_leaves_devices_unused() -> None:
    problem = make_problem(make_chain([1, 1], [1]))
    for baseline in BASELINES.values():
        assert chunks(baseline(problem)) == [["a"], ["b"]]


def test_param_balanced_minimises_the_largest_chunk_of_parameters() -> None:
    plan = param_balanced(make_problem())
    assert chunks(plan) == [["a", "b", "c", "d"], ["e"], ["f"]]  # 4, 1, 8 bytes: 8 is the least maximum
    assert plan.bottleneck == 7.0


def test_time_balanced_minimises_the_largest_chunk_of_time() -> None:
    plan = time_balanced(make_problem())
    assert chunks(plan) == [["a", "b"], ["c", "d", "e"], ["f"]]  # 3, 5, 4 s
    assert [s.compute for s in plan.stages] == [3.0, 5.0, 4.0]
    assert plan.bottleneck == 7.0  # it ignores the 7 s transfer b -> c


def test_time_balanced_averages_over_devices() -> None:
    # d1 is twice as fast: the mean times are [0.75, 0.75, 1.5, 1.5] s; 3 s is the least maximum
    problem = make_problem(make_chain([1, 1, 2, 2], [0, 0, 0]), make_cluster((1e9, 2e9)))
    assert chunks(time_balanced(problem)) == [["a", "b", "c"], ["d"]]


def test_chain_dp_avoids_the_expensive_cut() -> None:
    plan = chain_dp(make_problem())
    assert chunks(plan) == [["a", "b", "c"], ["d", "e", "f"]]
    assert plan.bottleneck == 6.0 == brute_force(make_problem())
    assert plan.certificate.status == "OPTIMAL"
    assert plan.certificate.objective == 6.0 and plan.certificate.gap == 0.0


@pytest.mark.parametrize("comm", ["overlap", "serial"])
@pytest.mark.parametrize(("objective", "microbatches"), [("throughput", 4), ("latency", 1), ("latency", 4)])
def test_chain_dp_matches_brute_force(comm: str, objective: str, microbatches: int) -> None:
    problem = make_problem(comm=comm, objective=objective, microbatches=microbatches)
    plan = chain_dp(problem)
    assert plan.certificate.status == "OPTIMAL"
    assert plan.certificate.objective == pytest.approx(brute_force(problem), rel=1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_chain_dp_matches_brute_force_on_random_chains(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(3, 7)
    graph = make_chain([rng.randint(1, 9) for _ in range(n)], [rng.randint(0, 9) for _ in range(n - 1)],
                       [rng.randint(0, 5) for _ in range(n)])
    cluster = make_cluster(memory=rng.randint(8, 20))
    for objective, microbatches, floor in [("throughput", 4, None), ("latency", rng.randint(1, 8), None),
                                           ("latency", 4, 1 / 20)]:
        problem = make_problem(graph, cluster, objective=objective, microbatches=microbatches,
                               min_throughput=floor, comm=rng.choice(["overlap", "serial"]))
        best = brute_force(problem)
        if best == float("inf"):
            with pytest.raises(PlanError, match="chain-dp"):
                chain_dp(problem)
        else:
            assert chain_dp(problem).certificate.objective == pytest.approx(best, rel=1e-12)


def test_chain_dp_is_exact_among_in_order_splits_on_a_heterogeneous_cluster() -> None:
    links = [{"a": "d0", "b": "d1", "bandwidth": 2e9, "latency": 0}]
    problem = make_problem(cluster=make_cluster((1e9, 2e9, 0.5e9), links=links))
    plan = chain_dp(problem)
    assert plan.certificate.status == "HEURISTIC"
    assert plan.bottleneck == brute_force(problem)


@pytest.mark.parametrize("objective", ["throughput", "latency"])
def test_chain_dp_is_exact_when_memory_bounds_the_chunk_length(objective: str) -> None:
    # At most 3 of these layers fit a device, so the DP keeps chunks of up to 3 layers only (its band).
    from pipeplan.planner.baselines import _Chunks

    graph = make_chain([3, 1, 4, 1, 5, 9, 2, 6, 5], [2, 7, 1, 8, 2, 8, 1, 8], [4, 3, 3, 4, 2, 3, 4, 3, 3])
    links = [{"a": "d0", "b": "d1", "bandwidth": 2e9, "latency": 0},
             {"a": "d2", "b": "d3", "bandwidth": 0.5e9, "latency": 0}]
    problem = make_problem(graph, make_cluster((1e9, 2e9, 1e9, 3e9), memory=10, links=links), objective=objective)
    assert _Chunks(problem, 4).width == 3
    plan = chain_dp(problem)
    assert score_of(plan, objective) == brute_force(problem)
    assert score_of(plan, objective) == pytest.approx(8.0 if objective == "throughput" else 155 / 3, rel=1e-12)
    assert chunks(plan) == [["l0", "l1", "l2"], ["l3", "l4", "l5"], ["l6"], ["l7", "l8"]]


def test_chain_dp_estimates_bound_skip_edges_longer_than_a_chunk() -> None:
    from pipeplan.planner.baselines import _Chunks, _solve  # the documented bounds of the two estimates

    graph = make_chain([2, 1, 1, 1, 1, 2], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1])
    graph.add_edge("a", "f", 3 * G)  # spans 5 boundaries; no chunk holds more than 2 layers
    graph.add_edge("b", "e", 2 * G)
    problem = make_problem(graph, make_cluster((1e9, 1e9, 1e9, 1e9), memory=2))
    chunks = _Chunks(problem, 4)
    assert chunks.width == 2
    low, _ = _solve(chunks.costs(pessimistic=False), problem.n_layers)
    high, bounds = _solve(chunks.costs(pessimistic=True), problem.n_layers)
    simulated = evaluate(problem, on_devices(problem, bounds)).bottleneck
    assert (low, high, simulated) == (4.0, 6.0, 6.0)
    assert chain_dp(problem).bottleneck == simulated


@pytest.mark.parametrize(("cluster", "graph"), [
    (make_cluster((1e9, 2e9, 1e9)), None),  # one device faster
    (make_cluster(links=[{"a": "d0", "b": "d2", "bandwidth": 2e9, "latency": 0}]), None),  # one link faster
    (None, "skip"),  # not a chain
])
def test_chain_dp_is_heuristic_off_the_exact_case(cluster: Cluster | None, graph: str | None) -> None:
    g = make_chain(TIMES, DATA)
    if graph == "skip":
        g.add_edge("a", "f", G)
    plan = chain_dp(make_problem(g, cluster))
    assert plan.certificate.status == "HEURISTIC"
    assert plan.certificate.best_bound is not None and plan.certificate.best_bound <= plan.certificate.objective


def test_chain_dp_pessimistic_estimate_bounds_the_simulator() -> None:
    from pipeplan.planner.baselines import _Chunks, _solve  # the documented upper bound of the estimate

    graph = make_chain([2, 1, 1, 1, 1, 2], [1, 1, 1, 1, 1])
    graph.add_edge("a", "e", 3 * G)  # a's output skips over whole chunks
    graph.add_edge("b", "f", 2 * G)
    problem = make_problem(graph, make_cluster((1e9, 1e9, 1e9, 1e9)))
    estimate, bounds = _solve(_Chunks(problem, 4).costs(pessimistic=True), problem.n_layers)
    assert evaluate(problem, on_devices(problem, bounds)).bottleneck <= estimate
    assert chain_dp(problem).bottleneck <= evaluate(problem, on_devices(problem, bounds)).bottleneck


def test_max_devices_limits_the_chunks() -> None:
    problem = make_problem(max_devices=2)
    for baseline in BASELINES.values():
        assert len(baseline(problem).stages) <= 2
    assert chain_dp(problem).bottleneck == brute_force(problem)


# -- memory and the best baseline ---------------------------------------------------------------


def test_best_baseline_picks_the_least_objective() -> None:
    problem = make_problem()
    best = best_baseline(problem)
    assert best.method == "chain-dp"
    assert best.bottleneck == min(b(problem).bottleneck for b in BASELINES.values()) == 6.0


def test_best_baseline_under_latency() -> None:
    problem = make_problem(objective="latency", microbatches=4)
    assert best_baseline(problem).latency == min(b(problem).latency for b in BASELINES.values())


def test_a_baseline_that_does_not_fit_raises_and_best_baseline_skips_it() -> None:
    graph = make_chain(TIMES, DATA, [600, 600, 0, 0, 0, 0])
    problem = make_problem(graph, make_cluster(memory=1000))
    with pytest.raises(PlanError, match=r"uniform produced an invalid plan: device 'd0' .* 200 bytes short"):
        uniform(problem)
    plan = best_baseline(problem)
    assert violation(problem, plan.assignment(), plan.device_order()) is None
    assert plan.peak_memory <= 1000
    assert chain_dp(problem).bottleneck == brute_force(problem)


def test_no_baseline_fits() -> None:
    problem = make_problem(make_chain(TIMES, DATA, [1500, 0, 0, 0, 0, 0]), make_cluster(memory=1000))
    with pytest.raises(PlanError, match=r"chain-dp: no split .* fits in memory"):
        chain_dp(problem)
    with pytest.raises(PlanError, match="no baseline found a plan that fits"):
        best_baseline(problem)


def test_min_throughput_out_of_reach() -> None:
    problem = make_problem(objective="latency", min_throughput=1 / 5)  # the best bottleneck is 6 s
    with pytest.raises(PlanError, match="min_throughput"):
        chain_dp(problem)
    with pytest.raises(PlanError, match="no baseline found"):
        best_baseline(problem)


def test_get_baseline_by_name() -> None:
    assert get_baseline("Chain_DP") is chain_dp
    with pytest.raises(PlanError, match="uniform, param-balanced, time-balanced, chain-dp"):
        get_baseline("metis")


# -- a real graph -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rescnn() -> Problem:
    return Problem(capture_model("rescnn", 1), load_cluster("4xa100-nvlink"))


@pytest.mark.parametrize("name", list(BASELINES))
def test_real_graph_plans_are_valid(rescnn: Problem, name: str) -> None:
    plan = BASELINES[name](rescnn)
    assert violation(rescnn, plan.assignment(), plan.device_order()) is None
    layers = [layer for stage in plan.stages for layer in stage.layers]
    assert sorted(layers) == sorted(rescnn.layers) and len(layers) == len(set(layers))
    assert len(plan.stages) <= rescnn.n_devices
    cert = plan.certificate
    assert cert.method == name and cert.objective == plan.bottleneck and cert.solve_time >= 0
    assert cert.best_bound is not None and cert.best_bound <= cert.objective and 0 <= (cert.gap or 0) <= 1


def test_real_graph_best_baseline(rescnn: Problem) -> None:
    assert best_baseline(rescnn).bottleneck == min(b(rescnn).bottleneck for b in BASELINES.values())
