"""The simulator on hand-built graphs whose costs are whole seconds, so every number is exact.

Devices run 1e9 FLOP/s and links carry 1e9 B/s with no latency (unless a test says otherwise):
a layer of k·1e9 FLOPs takes k s and an output of k·1e9 bytes takes k s to cross a link.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import PlanError, PlanOptions, Problem
from pipeplan.planner.simulate import evaluate, make_plan, stage_times, violation

G = 10**9


def make_graph(layers: list[tuple[str, int]], edges: list[tuple[str, str, int]],
               memory: dict[str, tuple[int, int, int]] | None = None) -> ModelGraph:
    """Layers (name, seconds) in topological order; edges (src, dst, seconds on a link);
    memory: name → (param bytes, activation bytes, workspace bytes)."""
    graph = ModelGraph("toy", batch_size=1)
    for order, (name, seconds) in enumerate(layers):
        params, acts, work = (memory or {}).get(name, (0, 0, 0))
        graph.add_layer(Layer(name, "linear", "Linear", order, flops=seconds * G, bytes_read=0,
                              bytes_written=acts + work, param_bytes=params, activation_bytes=acts, kernels=0))
    for src, dst, seconds in edges:
        graph.add_edge(src, dst, seconds * G)
    return graph


def make_cluster(n: int = 3, memory: int = 10**6, latency: float = 0.0) -> Cluster:
    return Cluster.from_dict({
        "name": "toy-cluster",
        "devices": [{"id": f"d{i}", "memory": memory, "peak_flops": 1e9, "mem_bandwidth": 1e18} for i in range(n)],
        "topology": {"intra_host": {"bandwidth": 1e9, "latency": latency}},
    })


def make_problem(graph: ModelGraph, cluster: Cluster | None = None, **options: object) -> Problem:
    opts = PlanOptions(**{"memory_margin": 0.0, **options})  # type: ignore[arg-type]
    return Problem(graph, cluster or make_cluster(), RooflineModel(overhead=0.0), opts)


@pytest.fixture
def chain() -> Problem:
    """a(1 s) → b(2 s) → c(4 s); a→b carries 1 s of data, b→c 2 s."""
    return make_problem(make_graph([("a", 1), ("b", 2), ("c", 4)], [("a", "b", 1), ("b", "c", 2)]))


SPLIT = {"a": "d0", "b": "d0", "c": "d1"}


def test_layer_times_are_exact(chain: Problem) -> None:
    assert chain.time == [[1.0] * 3, [2.0] * 3, [4.0] * 3]
    assert chain.transfer(1, 0, 1) == 2.0
    assert chain.transfer(1, 0, 0) == 0.0


def test_stage_times_overlap(chain: Problem) -> None:
    ev = evaluate(chain, SPLIT)
    assert ev.valid
    assert [(s.device, s.layers) for s in ev.stages] == [("d0", ["a", "b"]), ("d1", ["c"])]
    assert [(s.compute, s.recv, s.send, s.time) for s in ev.stages] == [(3.0, 0.0, 2.0, 3.0), (4.0, 2.0, 0.0, 4.0)]
    assert ev.bottleneck == 4.0


def test_stage_times_serial(chain: Problem) -> None:
    problem = make_problem(chain.graph, comm="serial")
    ev = evaluate(problem, SPLIT)
    assert [s.time for s in ev.stages] == [5.0, 6.0]
    assert ev.bottleneck == 6.0


def test_stage_times_by_device_index(chain: Problem) -> None:
    assert stage_times(chain, [0, 0, 1]) == ([3.0, 4.0, 0.0], [0.0, 2.0, 0.0], [2.0, 0.0, 0.0])


def test_link_latency_is_added_per_transfer() -> None:
    graph = make_graph([("a", 1), ("b", 1)], [("a", "b", 3)])
    problem = make_problem(graph, make_cluster(latency=0.5))
    ev = evaluate(problem, {"a": "d0", "b": "d1"})
    assert (ev.stages[0].send, ev.stages[1].recv) == (3.5, 3.5)


def test_output_crosses_to_each_device_once() -> None:
    # p feeds x (1 s of data) and y (3 s of data): its output is the larger tensor, 3 s
    graph = make_graph([("p", 1), ("x", 1), ("y", 1)], [("p", "x", 1), ("p", "y", 3)])
    problem = make_problem(graph)
    same = evaluate(problem, {"p": "d0", "x": "d1", "y": "d1"})
    assert (same.stages[0].send, same.stages[1].recv) == (3.0, 3.0)
    apart = evaluate(problem, {"p": "d0", "x": "d1", "y": "d2"})
    assert [(s.recv, s.send) for s in apart.stages] == [(0.0, 6.0), (3.0, 0.0), (3.0, 0.0)]


@pytest.mark.parametrize(("comm", "microbatches", "latency"), [
    ("overlap", 1, 7.0), ("overlap", 4, 19.0), ("serial", 1, 11.0), ("serial", 4, 29.0)])
def test_latency_is_fill_and_drain(chain: Problem, comm: str, microbatches: int, latency: float) -> None:
    problem = make_problem(chain.graph, comm=comm, microbatches=microbatches)
    ev = evaluate(problem, SPLIT)
    times = [s.time for s in ev.stages]
    assert ev.latency == latency == sum(times) + (microbatches - 1) * max(times)


def test_schedule_is_a_flow_shop(chain: Problem) -> None:
    ev = evaluate(make_problem(chain.graph, microbatches=3), SPLIT)
    assert ev.schedule == [[(0.0, 3.0), (3.0, 6.0), (6.0, 9.0)],
                           [(3.0, 7.0), (7.0, 11.0), (11.0, 15.0)]]


def test_memory_counts_params_peak_live_set_and_boundaries_in_flight() -> None:
    """Inference memory (pipeplan.costmodel.memory.planner_terms): weights 100 + 200, plus the peak live set of
    one microbatch, 37 at b (a's 10-byte output still read, b's 20 out + 7 workspace), plus
    2 · (in_flight − 1) boundary copies of the largest cut, a's 10 bytes."""
    graph = make_graph([("a", 1), ("b", 1)], [("a", "b", 1)], memory={"a": (100, 10, 5), "b": (200, 20, 7)})
    assert evaluate(make_problem(graph, microbatches=4), {"a": "d0", "b": "d0"}).stages[0].memory == 300 + 37 + 6 * 10
    assert evaluate(make_problem(graph, microbatches=4, in_flight=2),
                    {"a": "d0", "b": "d0"}).stages[0].memory == 300 + 37 + 2 * 10


def test_valid_plan_has_no_violation(chain: Problem) -> None:
    assert violation(chain, SPLIT) is None
    assert violation(chain, SPLIT, ["d0", "d1"]) is None


def test_non_convex_stage_is_a_cycle(chain: Problem) -> None:
    message = violation(chain, {"a": "d0", "b": "d1", "c": "d0"})
    assert message is not None and "cycle" in message


def test_backward_order_is_named(chain: Problem) -> None:
    message = violation(chain, SPLIT, ["d1", "d0"])
    assert message is not None and "backwards" in message and "b -> c" in message


def test_order_missing_a_device(chain: Problem) -> None:
    message = violation(chain, SPLIT, ["d0"])
    assert message is not None and "every used device" in message


def test_order_listing_a_device_twice(chain: Problem) -> None:
    ev = evaluate(chain, SPLIT, ["d0", "d1", "d1"])
    assert ev.violation is not None and "exactly once" in ev.violation


def test_memory_over_capacity_names_device_and_shortfall() -> None:
    graph = make_graph([("a", 1), ("b", 1)], [("a", "b", 1)], memory={"a": (1500, 0, 0)})
    problem = make_problem(graph, make_cluster(memory=1000))
    message = violation(problem, {"a": "d0", "b": "d1"})
    assert message is not None and "'d0'" in message and "500 bytes short" in message
    with pytest.raises(PlanError, match="500 bytes short"):
        make_plan(problem, {"a": "d0", "b": "d1"}, Certificate("test", "HEURISTIC", 0.0))


def test_max_devices_exceeded(chain: Problem) -> None:
    problem = make_problem(chain.graph, max_devices=1)
    message = violation(problem, SPLIT)
    assert message is not None and "max_devices=1" in message


@pytest.mark.parametrize(("assignment", "named"), [
    ({"a": "d0", "b": "d0", "c": "gpu9"}, "gpu9"),
    ({"a": "d0", "b": "d0"}, "'c'"),
    ({**SPLIT, "zzz": "d0"}, "zzz"),
])
def test_structural_errors_raise_naming_the_culprit(chain: Problem, assignment: dict[str, str], named: str) -> None:
    with pytest.raises(PlanError, match=named):
        evaluate(chain, assignment)


def test_index_assignment_of_wrong_length(chain: Problem) -> None:
    with pytest.raises(PlanError, match="every layer"):
        evaluate(chain, [0, 1])


# -- plans as JSON ------------------------------------------------------------------------------


@pytest.fixture
def plan(chain: Problem) -> Plan:
    cert = Certificate("test", "HEURISTIC", 4.0, best_bound=3.5, gap=0.125, details={"note": [1, 2]})
    return make_plan(chain, SPLIT, cert)


def test_plan_reports_its_scores(plan: Plan) -> None:
    assert (plan.bottleneck, plan.latency, plan.throughput) == (4.0, 19.0, 0.25)
    assert plan.assignment() == SPLIT and plan.device_order() == ["d0", "d1"]


def test_plan_round_trips_through_json(plan: Plan, tmp_path: Path) -> None:
    assert Plan.from_dict(plan.to_dict()) == plan
    path = tmp_path / "plan.json"
    plan.save(path)
    assert Plan.load(path) == plan


def _break(doc: dict[str, object], key: str, value: object) -> str:
    return json.dumps({**doc, key: value})


@pytest.mark.parametrize(("key", "value", "match"), [
    ("format", "other", "not a pipeplan plan"),
    ("version", 99, "unknown plan version"),
    ("stages", [1], "malformed plan"),
    ("options", {"microbatches": 0}, "microbatches"),
])
def test_malformed_plan_file(plan: Plan, tmp_path: Path, key: str, value: object, match: str) -> None:
    path = tmp_path / "plan.json"
    path.write_text(_break(plan.to_dict(), key, value))
    with pytest.raises(PlanError, match=match):
        Plan.load(path)


def test_unreadable_plan_file(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(PlanError, match="cannot read plan"):
        Plan.load(tmp_path / "bad.json")
    with pytest.raises(PlanError, match="cannot read plan"):
        Plan.load(tmp_path / "missing.json")


def test_plan_missing_a_field(plan: Plan) -> None:
    doc = plan.to_dict()
    del doc["stages"]
    with pytest.raises(PlanError, match="stages"):
        Plan.from_dict(doc)


def test_plan_with_a_non_numeric_bottleneck(plan: Plan, tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(_break(plan.to_dict(), "bottleneck", "fast"))
    with pytest.raises(PlanError):
        Plan.load(path)
