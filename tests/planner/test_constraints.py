"""Placement constraints and the transfer rule: each changes the exact optimum as worked out by hand,
conflicts are refused naming what conflicts, and every planner and the simulator keep to them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import Cluster
from pipeplan.planner.baselines import chain_dp, uniform
from pipeplan.planner.builder import GraphBuilder
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import PlanError, PlanOptions, Problem
from pipeplan.planner.simulate import evaluate, violation

EXACT = SolverOptions(time_limit=30.0, workers=2, seed=0)
ROOFLINE = RooflineModel(overhead=0.0)
MS = 1e-3


def cluster(*types: tuple[str, float], memory: int = 2**30, bandwidth: float = 1e9) -> Cluster:
    """Devices d0, d1, … of the given (type, GFLOP/s), every pair linked at ``bandwidth``, no latency:
    1e6 FLOPs take 1 ms at 1 GFLOP/s and 1e6 bytes take 1 ms to cross."""
    devices = [{"id": f"d{i}", "type": t, "memory": memory, "peak_flops": speed * 1e9, "mem_bandwidth": 1e12}
               for i, (t, speed) in enumerate(types)]
    links = [{"a": f"d{a}", "b": f"d{b}", "bandwidth": bandwidth, "latency": 0.0}
             for a, b in itertools.combinations(range(len(types)), 2)]
    return Cluster.from_dict({"name": "hand", "devices": devices, "links": links})


def chain(*mflops: float, params: int = 0) -> GraphBuilder:
    """l0 → l1 → …, each ``mflops`` million FLOPs, handing on nothing (transfers are free)."""
    b = GraphBuilder("chain")
    for i, m in enumerate(mflops):
        b.layer(f"l{i}", flops=int(m * 1e6), param_bytes=params, inputs={f"l{i - 1}": 0} if i else {})
    return b


def planned(graph: GraphBuilder, where: Cluster, **options: Any) -> tuple[Problem, Plan]:
    problem = Problem(graph.build(), where, ROOFLINE, PlanOptions(microbatches=1, **options))
    plan = solve(problem, EXACT)
    assert plan.certificate.status == "OPTIMAL"
    assert violation(problem, plan.assignment(), plan.device_order()) is None
    return problem, plan


TWO = cluster(("generic", 1.0), ("generic", 1.0))


def test_pins_force_the_layers_between_them_onto_the_same_device() -> None:
    # Four 1 ms layers on two devices: 2 | 2 is 2 ms.  l0 and l3 pinned to d0 take l1 and l2 with
    # them (a stage is convex): everything on d0, 4 ms.
    assert planned(chain(1, 1, 1, 1), TWO)[1].bottleneck == pytest.approx(2 * MS, rel=1e-9)
    _, plan = planned(chain(1, 1, 1, 1), TWO, pins=[("l0", "d0"), ("l3", "d0")])
    assert plan.bottleneck == pytest.approx(4 * MS, rel=1e-9)
    assert plan.assignment() == dict.fromkeys(["l0", "l1", "l2", "l3"], "d0")


def test_a_glob_pinned_to_a_device_type_uses_only_devices_of_that_type() -> None:
    # Four 2e6-FLOP layers; d0 ("fast", 2 GFLOP/s) runs one in 1 ms, d1 and d2 ("slow") in 2 ms.
    # Free: fast takes two (2 ms), each slow one (2 ms): 2 ms; nothing below 2 ms lets a slow device
    # hold a layer.  Every layer pinned to "slow": two per slow device, 4 ms.
    three = cluster(("fast", 2.0), ("slow", 1.0), ("slow", 1.0))
    assert planned(chain(2, 2, 2, 2), three)[1].bottleneck == pytest.approx(2 * MS, rel=1e-9)
    _, plan = planned(chain(2, 2, 2, 2), three, pins=["l*=slow"])
    assert plan.bottleneck == pytest.approx(4 * MS, rel=1e-9)
    assert sorted(plan.device_order()) == ["d1", "d2"]


def test_keeping_two_layers_together_forbids_the_balanced_cut() -> None:
    # 1 ms each on two devices: 2 | 2 is 2 ms; with l1 and l2 together the best is 1 | 3 or 3 | 1.
    _, plan = planned(chain(1, 1, 1, 1), TWO, keep_together=[("l1", "l2")])
    assert plan.bottleneck == pytest.approx(3 * MS, rel=1e-9)
    assert plan.assignment()["l1"] == plan.assignment()["l2"]


def test_forbidding_a_device_by_id_or_type_leaves_the_others() -> None:
    # Three 1 ms layers on three devices: 1 ms; with one forbidden, 2 | 1: 2 ms; with a type that
    # two devices have, all on the third: 3 ms.
    three = cluster(("a", 1.0), ("b", 1.0), ("b", 1.0))
    assert planned(chain(1, 1, 1), three)[1].bottleneck == pytest.approx(1 * MS, rel=1e-9)
    _, plan = planned(chain(1, 1, 1), three, forbid_devices=["d1"])
    assert plan.bottleneck == pytest.approx(2 * MS, rel=1e-9) and "d1" not in plan.device_order()
    _, plan = planned(chain(1, 1, 1), three, forbid_devices=["b"])
    assert plan.bottleneck == pytest.approx(3 * MS, rel=1e-9) and plan.device_order() == ["d0"]


def test_the_stage_cap_is_max_devices() -> None:
    three = cluster(("a", 1.0), ("a", 1.0), ("a", 1.0))
    _, plan = planned(chain(1, 1, 1), three, max_devices=2)
    assert plan.bottleneck == pytest.approx(2 * MS, rel=1e-9) and len(plan.stages) == 2


def fan_out() -> GraphBuilder:
    # src (1 ms) hands 0.8 MB (0.8 ms to cross) to each of a and b (0.5 ms each)
    b = GraphBuilder("fan")
    b.layer("src", flops=1_000_000)
    b.layer("a", flops=500_000, inputs={"src": 800_000})
    b.layer("b", flops=500_000, inputs={"src": 800_000})
    return b


def test_paying_per_consumer_edge_changes_the_optimum() -> None:
    # Per receiving device: src | a b costs max(1, 0.8 sent once) = 1 ms, and a b max(1, 0.8) = 1 ms.
    # Per consumer edge src sends twice (1.6 ms), so the best is src a | b: max(1.5, 0.8) = 1.5 ms
    # (all on one device: 2 ms).
    _, per_device = planned(fan_out(), TWO)
    assert per_device.bottleneck == pytest.approx(1.0 * MS, rel=1e-9)
    assert per_device.stages[0].send == pytest.approx(0.8 * MS, rel=1e-9)
    problem, per_edge = planned(fan_out(), TWO, transfer="per-edge")
    assert per_edge.bottleneck == pytest.approx(1.5 * MS, rel=1e-9)
    # the simulator charges the per-device plan twice for src's output under the per-edge rule
    ev = evaluate(problem, per_device.assignment(), per_device.device_order())
    assert ev.bottleneck == pytest.approx(1.6 * MS, rel=1e-9)


def test_evaluate_names_the_constraint_a_plan_breaks() -> None:
    problem = Problem(chain(1, 1, 1, 1).build(), TWO, ROOFLINE,
                      PlanOptions(pins=[("l0", "d0")], keep_together=[("l2", "l3")]))
    assert violation(problem, {"l0": "d1", "l1": "d1", "l2": "d1", "l3": "d1"}) == (
        "layer 'l0' is on 'd1', which it may not use: pin l0=d0 allows only d0")
    assert violation(problem, {"l0": "d0", "l1": "d0", "l2": "d0", "l3": "d1"}) == (
        "keep_together[0] ('l2', 'l3') must share one device but is split over d0, d1")
    assert violation(problem, ["d0", "d0", "d1", "d1"]) is None
    forbidden = Problem(chain(1, 1).build(), TWO, ROOFLINE, PlanOptions(forbid_devices=["d1"]))
    assert violation(forbidden, ["d0", "d1"]) == (
        "layer 'l1' is on 'd1', which it may not use: forbid_devices rules out d1")


def test_baselines_reject_plans_that_break_the_constraints_and_chain_dp_plans_around_them() -> None:
    problem = Problem(chain(1, 1, 1, 1).build(), TWO, ROOFLINE,
                      PlanOptions(microbatches=1, keep_together=[("l1", "l2")]))
    with pytest.raises(PlanError, match=r"uniform produced an invalid plan: keep_together\[0\].*split over d0, d1"):
        uniform(problem)
    assert chain_dp(problem).bottleneck == pytest.approx(3 * MS, rel=1e-9)
    pinned = Problem(chain(1, 1, 1, 1).build(), TWO, ROOFLINE, PlanOptions(microbatches=1, pins=[("l0", "d1")]))
    plan = chain_dp(pinned)
    assert plan.assignment()["l0"] == "d1" and plan.certificate.status == "HEURISTIC"


@pytest.mark.parametrize("options, message", [
    ({"pins": [("l0", "d1")], "forbid_devices": ["d1"]},
     "pin l0=d1 leaves layer 'l0' no device: forbid_devices rules out d1"),
    ({"pins": [("l0", "d0"), ("l0", "d1")]},
     "pin l0=d1 leaves layer 'l0' no device: pin l0=d0 allows only d0"),
    ({"pins": [("l0", "d0"), ("l2", "d0"), ("l1", "d1")]},
     "the layers pinned to d0 \\+ the layers between them .* must share one device, but no device is allowed"),
    ({"pins": [("blok*", "d0")]}, "pin blok\\*=d0: no layer of 'chain' is named or matches 'blok\\*'"),
    ({"pins": [("l0", "gpu9")]},
     "pin l0=gpu9: cluster 'hand' has no device or device type 'gpu9' \\(devices: d0, d1; types: generic\\)"),
    ({"forbid_devices": ["generic"]}, "forbid_devices \\(generic\\) rules out every device of 'hand'"),
    ({"keep_together": [("l0", "l9")]}, "keep_together\\[0\\]: no layer of 'chain' is named or matches 'l9'"),
    ({"keep_together": [("l0 l1",)]}, "keep_together\\[0\\]: no layer of 'chain' is named or matches 'l0 l1'"),
    ({"keep_together": [("l0",)]}, "keep_together\\[0\\] \\(l0\\) names only layer 'l0': a group keeps two or more"),
    ({"pins": ["l0:d1"]}, "pin 'l0:d1': write LAYERS=DEVICE"),
    ({"transfer": "per-tensor"}, "transfer must be 'per-device' or 'per-edge', got 'per-tensor'"),
])
def test_conflicting_or_unknown_constraints_are_named(options: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        Problem(chain(1, 1, 1).build(), TWO, ROOFLINE, PlanOptions(**options))


GIB = 2**30


@pytest.mark.parametrize("options, message", [
    ({"keep_together": [("l0", "l1")]},
     r"keep_together\[0\] \('l0', 'l1'\) needs 0\.80 GiB; the largest device 'd0' offers 0\.50 GiB"),
    ({"max_devices": 2},
     r"max_devices=2 caps the plan at 2 stages, whose devices offer at most 1\.00 GiB after the 0% margin, "
     r"but chain needs 1\.20 GiB; it needs at least 3 devices"),
    ({"forbid_devices": ["d2"]}, r"chain needs 1\.20 GiB but the 2 devices of 'hand' that forbid_devices leaves "
                                 r"offer 1\.00 GiB"),
])
def test_constraints_memory_cannot_meet_are_named(options: dict[str, Any], message: str) -> None:
    # three layers of 0.4 GiB of weights, three devices of 0.5 GiB: one layer per device
    three = cluster(("generic", 1.0), ("generic", 1.0), ("generic", 1.0), memory=GIB // 2)
    problem = Problem(chain(1, 1, 1, params=int(0.4 * GIB)).build(), three, ROOFLINE,
                      PlanOptions(memory_margin=0.0, **options))
    with pytest.raises(PlanError, match=message):
        solve(problem, EXACT)


def test_more_devices_pinned_than_max_devices_allows_is_named() -> None:
    three = cluster(("generic", 1.0), ("generic", 1.0), ("generic", 1.0))
    problem = Problem(chain(1, 1, 1).build(), three, ROOFLINE,
                      PlanOptions(pins=["l0=d0", "l1=d1", "l2=d2"], max_devices=2))
    with pytest.raises(PlanError, match=r"the pins put layers on 3 devices \(d0, d1, d2\) but max_devices=2"):
        solve(problem, EXACT)


def test_constraints_survive_the_plan_json() -> None:
    _, plan = planned(chain(1, 1, 1, 1), TWO, pins=[("l0", "d0")], keep_together=[("l1", "l2")],
                      transfer="per-edge")
    again = Plan.from_dict(plan.to_dict())
    assert again.options == plan.options
    assert again.options.pins[0].layers == "l0" and again.options.keep_together == (("l1", "l2"),)


def test_a_valid_plans_hint_is_a_solution_of_the_constrained_model() -> None:
    # Fixed to its hint, the model must accept the plan as it is: pins, the group, the per-edge rows
    # and the relabelling within classes of interchangeable devices (d0 and d1 here, d2 pinned apart).
    from ortools.sat.python import cp_model

    from pipeplan.planner.ilp import interchangeable
    from pipeplan.planner.ilp_constraints import build_constrained, split_classes
    from pipeplan.planner.ilp_exact import plan_devices
    from pipeplan.planner.ilp_ticks import Ticks
    from pipeplan.planner.simulate import make_plan

    three = cluster(("generic", 1.0), ("generic", 1.0), ("generic", 1.0))
    problem = Problem(fan_out().build(), three, ROOFLINE,
                      PlanOptions(transfer="per-edge", pins=[("a", "d2")], keep_together=[("src", "b")]))
    plan = make_plan(problem, {"src": "d1", "a": "d2", "b": "d1"}, Certificate("hand", "HEURISTIC", 0.0))
    costs = Ticks.of(problem)
    classes = split_classes(interchangeable(problem), problem.placement)
    assert classes == [[0, 1], [2]]
    built = build_constrained(problem, costs, classes)
    dev_of, order = plan_devices(problem, plan)
    built.hint(problem, costs, classes, dev_of, order)
    assert len(set(built.model.proto.solution_hint.vars)) == len(built.model.proto.variables)  # complete
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    assert solver.solve(built.model) == cp_model.OPTIMAL
    assert solver.value(built.bottleneck) == costs.bottleneck(problem, dev_of)
    assert [problem.devices[d] for d in built.read(solver)[0]] == ["d0", "d2", "d0"]  # d1 relabelled d0
