"""``--costmodel table:FILE``: measured seconds per layer and device type from any profiler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeplan.costmodel.registry import load_cost_model
from pipeplan.costmodel.table import TableCostModel, TableError
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.problem import PlanOptions, Problem
from tests.cost_tables import two_types

JSON_TABLE = {"format": "pipeplan.costs", "version": 1,
              "times": {"a": {"A100": 0.004, "T4": 0.008}, "b": {"A100": 0.002, "T4": 0.003},
                        "c": {"A100": 0.002, "T4": 0.003}},
              "edges": [{"src": "a", "dst": "b", "bytes": 1_000_000}, {"src": "b", "dst": "c", "bytes": 1_000_000}]}


def test_a_json_table_gives_times_edges_and_the_exact_optimum(tmp_path: Path) -> None:
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(JSON_TABLE))
    model = load_cost_model(f"table:{path}")
    assert isinstance(model, TableCostModel)
    assert model.spec == f"table:{path.resolve()}" and model.digest is not None
    graph = model.graph("abc")
    assert [layer.name for layer in graph.layers] == ["a", "b", "c"] and graph.edge_bytes("a", "b") == 1_000_000
    problem = Problem(graph, two_types(), model, PlanOptions(microbatches=1, comm="serial"))
    plan = solve(problem, SolverOptions(time_limit=30.0, workers=1, seed=0))
    # 7 ms two ways: a on the A100 (4 + 1 ms send) and b+c on the T4 (6 + 1 ms receive), or a+b on
    # the A100 (6 + 1) and c on the T4 (3 + 1); the second has the lower latency (11 ms against 14)
    assert plan.bottleneck == pytest.approx(0.007, rel=1e-12)
    assert plan.assignment() == {"a": "fast", "b": "fast", "c": "slow"}
    assert plan.latency == pytest.approx(0.011, rel=1e-12)
    assert plan.costmodel == model.spec and plan.certificate.status == "OPTIMAL"


def test_a_csv_table_reads_columns_by_device_type_and_ids_first(tmp_path: Path) -> None:
    path = tmp_path / "costs.csv"
    path.write_text("layer,A100,T4,slow\na,0.004,0.008,0.5\nb,0.002,0.003,\n")
    model = load_cost_model(f"table:{path}")
    cluster = two_types()
    fast, slow = cluster.devices
    graph = TableCostModel(model.times).graph()  # type: ignore[attr-defined]
    assert model.layer_time(graph["a"], fast) == 0.004
    assert model.layer_time(graph["a"], slow) == 0.5  # the device's id wins over its type
    assert model.layer_time(graph["b"], slow) == 0.003  # an empty cell falls back to the type


def test_bad_tables_are_refused_naming_the_problem(tmp_path: Path) -> None:
    cluster = two_types()
    model = TableCostModel({"a": {"A100": 0.001}}, source="t")
    graph = model.graph()
    with pytest.raises(TableError, match="layer 'a' has no time for device 'slow' \\(type 'T4'\\)"):
        model.layer_time(graph["a"], cluster.devices[1])
    bad = tmp_path / "bad.csv"
    bad.write_text("name,A100\na,1\n")
    with pytest.raises(TableError, match="first row must be 'layer'"):
        load_cost_model(f"table:{bad}")
    bad.write_text("layer,A100\na,fast\n")
    with pytest.raises(TableError, match="'fast' is not a number of seconds"):
        load_cost_model(f"table:{bad}")
    with pytest.raises(TableError, match="must be a non-negative number, got -1"):
        TableCostModel({"a": {"A100": -1}})
    doc = {**JSON_TABLE, "edges": [{"src": "a", "dst": "zz", "bytes": 1}]}
    bad_json = tmp_path / "bad.json"
    bad_json.write_text(json.dumps(doc))
    with pytest.raises(TableError, match="names 'zz', which has no times"):
        load_cost_model(f"table:{bad_json}").graph()  # type: ignore[attr-defined]
    with pytest.raises(TableError, match=r"cost table .*missing\.json"):
        load_cost_model(f"table:{tmp_path / 'missing.json'}")
