"""Planning a model never captured: a cost table's rows as a chain, with output and parameter bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeplan.costmodel.table import LayerSizes, TableError, load_table
from tests.cli_run import run
from tests.cost_tables import two_types

GIB = 2**30
CSV = f"""layer,A100,T4,output_bytes,param_bytes
a,0.004,0.008,1000000,{int(0.6 * GIB)}
b,0.002,0.003,1000000,{int(0.6 * GIB)}
c,0.002,0.003,,
"""


def test_a_csv_tables_rows_are_a_chain_with_their_sizes(tmp_path: Path) -> None:
    path = tmp_path / "costs.csv"
    path.write_text(CSV)
    model = load_table(f"table:{path}")
    assert model.sizes == {"a": LayerSizes(1_000_000, int(0.6 * GIB)), "b": LayerSizes(1_000_000, int(0.6 * GIB))}
    graph = model.graph("abc", batch_size=8)
    assert [layer.name for layer in graph.layers] == ["a", "b", "c"] and graph.batch_size == 8
    assert graph.edge_bytes("a", "b") == graph.edge_bytes("b", "c") == 1_000_000
    assert graph["a"].param_bytes == int(0.6 * GIB) and graph["c"].param_bytes == 0
    bad = tmp_path / "bad.csv"
    bad.write_text("layer,A100,param_bytes\na,0.1,lots\n")
    with pytest.raises(TableError, match=r"bad\.csv:2 \(param_bytes\): bytes must be a non-negative integer"):
        load_table(f"table:{bad}")


def test_pipeplan_plans_a_table_with_its_times_and_memory(tmp_path: Path) -> None:
    # Serial, one microbatch, 1 MB crossing in 1 ms.  Free, 7 ms: a b on the A100 (6 + 1 send) and c
    # on the T4 (3 + 1), latency 11 ms.  But a and b hold 0.6 GiB of weights each against 1 GiB per
    # device, so they must part: a on the A100 (4 + 1) and b c on the T4 (6 + 1): still 7 ms, and
    # latency 12 ms; a on the T4 would take 8 + 1.
    (tmp_path / "costs.csv").write_text(CSV)
    two_types().save(tmp_path / "pair.yaml")
    out = tmp_path / "plan.json"
    result = run("plan", f"table:{tmp_path / 'costs.csv'}", "--cluster", str(tmp_path / "pair.yaml"),
                 "--comm", "serial", "--microbatches", "1", "--memory-margin", "0", "--workers", "1",
                 "--out", str(out))
    assert result.returncode == 0, result.stderr
    plan = json.loads(out.read_text())
    assert {layer: s["device"] for s in plan["stages"] for layer in s["layers"]} == {"a": "fast", "b": "slow",
                                                                                     "c": "slow"}
    assert plan["bottleneck"] == pytest.approx(0.007, rel=1e-12) and plan["latency"] == pytest.approx(0.012)
    assert plan["model"] == "costs" and plan["costmodel"] == f"table:{(tmp_path / 'costs.csv').resolve()}"
    refused = run("plan", f"table:{tmp_path / 'costs.csv'}", "--cluster", str(tmp_path / "pair.yaml"),
                  "--seq-len", "16")
    assert refused.returncode == 2 and "is a cost table, measured at fixed shapes: --seq-len" in refused.stderr
