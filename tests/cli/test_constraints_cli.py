"""`pipeplan plan` and `compare` with constraints and the transfer rule, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from pipeplan.planner.builder import GraphBuilder
from tests.cli_run import run


def graph_file(tmp_path: Path) -> Path:
    """Six layers in a chain, heavy enough (10 GFLOP each) that the ILP spreads them."""
    b = GraphBuilder("six")
    for i in range(6):
        b.layer(f"l{i}", flops=10**10, inputs={f"l{i - 1}": 1 << 20} if i else {})
    path = tmp_path / "six.json"
    b.build().save(path)
    return path


def test_plan_keeps_the_pins_groups_and_forbidden_devices(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = run("plan", str(graph_file(tmp_path)), "--cluster", "hetero-a100-t4", "--pin", "l0=T4",
                 "--forbid", "gpu3", "--keep-together", "l3,l4", "--max-stages", "3", "--transfer", "per-edge",
                 "--workers", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    owner = {layer: stage["device"] for stage in doc["stages"] for layer in stage["layers"]}
    assert owner["l0"] == "gpu2"  # the one T4 left
    assert owner["l3"] == owner["l4"] and "gpu3" not in owner.values() and len(doc["stages"]) <= 3
    options = doc["options"]
    assert options["pins"] == [["l0", "T4"]] and options["keep_together"] == [["l3", "l4"]]
    assert options["forbid_devices"] == ["gpu3"] and options["transfer"] == "per-edge"
    assert options["max_devices"] == 3 and doc["certificate"]["status"] == "OPTIMAL"


def test_plan_names_an_unknown_layer_and_compare_names_the_baselines_a_constraint_rules_out(tmp_path: Path) -> None:
    graph = str(graph_file(tmp_path))
    result = run("plan", graph, "--cluster", "hetero-a100-t4", "--pin", "blocks.*=gpu0")
    assert result.returncode == 2
    assert "pipeplan plan: error: pin blocks.*=gpu0: no layer of 'six' is named or matches 'blocks.*'" in result.stderr
    result = run("compare", graph, "--cluster", "hetero-a100-t4", "--pin", "l5=gpu0", "--workers", "1",
                 "--png", str(tmp_path / "cmp.png"))
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("│ uniform")]
    assert rows and "no plan" in rows[0]  # its reason wraps in the table's cell: the pin it breaks
    assert "l5=gpu0 allows" in result.stdout
