"""Problems built by hand: keyword-only layers in any order, and evaluate() with device ids."""

from __future__ import annotations

import pytest

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.graph import GraphError
from pipeplan.planner.builder import GraphBuilder
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.problem import PlanError, PlanOptions, Problem
from pipeplan.planner.simulate import evaluate
from tests.planner_problems import cluster_of

ROOFLINE = RooflineModel(overhead=0.0)


def diamond() -> GraphBuilder:
    b = GraphBuilder("diamond")
    b.layer("out", flops=1_000_000, inputs={"left": 1_000_000, "right": 1_000_000})  # declared first
    b.layer("left", flops=3_000_000, inputs={"in": 0})
    b.layer("right", flops=3_000_000, inputs={"in": 0}, param_bytes=4 << 20, workspace_bytes=1024)
    b.layer("in", flops=1_000_000, activation_bytes=1 << 10)
    return b


def test_layers_are_ordered_topologically_whatever_the_declaration_order() -> None:
    g = diamond().build()
    assert [layer.name for layer in g.layers] == ["in", "left", "right", "out"]
    assert g.edge_bytes("left", "out") == 1_000_000 and g["right"].param_bytes == 4 << 20
    assert ROOFLINE.layer_memory(g["right"]).workspace == 1024
    assert ROOFLINE.layer_memory(g["in"]).activations == 1 << 10


def test_a_hand_built_problem_solves_to_its_exact_optimum() -> None:
    # 1 + 3 + 3 + 1 ms on two equal devices, 1 ms per 1 MB crossing, serial: in+left | right+out
    # costs 4 + 1 (send) and 4 + 1 (receive) = 5 ms; 7 ms on one side otherwise, 8 ms on one device
    options = PlanOptions(microbatches=1, comm="serial")
    problem = Problem(diamond().build(), cluster_of([1.0, 1.0]), ROOFLINE, options)
    plan = solve(problem, SolverOptions(time_limit=30.0, workers=1, seed=0))
    assert plan.bottleneck == pytest.approx(0.005, rel=1e-12)
    assert plan.certificate.status == "OPTIMAL"


def test_builder_names_what_is_wrong() -> None:
    b = GraphBuilder("bad")
    b.layer("a", inputs={"ghost": 1})
    with pytest.raises(GraphError, match="reads from 'ghost', which is not declared"):
        b.build()
    with pytest.raises(GraphError, match="declared twice"):
        b.layer("a")
    with pytest.raises(GraphError, match="flops must be a non-negative integer, got -1"):
        b.layer("c", flops=-1)
    cyclic = GraphBuilder("cyclic")
    cyclic.layer("x", inputs={"y": 1})
    cyclic.layer("y", inputs={"x": 1})
    with pytest.raises(GraphError, match="cycle"):
        cyclic.build()
    with pytest.raises(TypeError):
        b.layer("d", 5)  # type: ignore[misc]  # keyword-only sizes


def test_evaluate_takes_device_ids_or_indices_in_a_list_or_a_mapping() -> None:
    options = PlanOptions(microbatches=1, comm="serial")
    problem = Problem(diamond().build(), cluster_of([1.0, 1.0]), ROOFLINE, options)
    by_ids = evaluate(problem, ["d0", "d0", "d1", "d1"])
    by_index = evaluate(problem, [0, 0, 1, 1])
    by_name = evaluate(problem, {"in": "d0", "left": "d0", "right": "d1", "out": "d1"})
    assert by_ids.bottleneck == by_index.bottleneck == by_name.bottleneck == pytest.approx(0.005, rel=1e-12)
    with pytest.raises(PlanError, match="unknown device 'gpu9' for layer 'left'"):
        evaluate(problem, ["d0", "gpu9", "d1", "d1"])
    with pytest.raises(PlanError, match="every layer: it gives 2 for 4 layers"):
        evaluate(problem, ["d0", "d1"])
    with pytest.raises(PlanError, match="is assigned 7"):
        evaluate(problem, [0, 7, 1, 1])
