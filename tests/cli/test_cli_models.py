"""Bring your own model, on the command line: `module:function` and `file.py:function` factories
for graph, plan and run, dtypes, and the errors that point to the way to do it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_run import run
from tests.executor_helpers import cpu_cluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "models" / "my_model.py") + ":build"


def test_graph_of_a_factory_file_with_options(tmp_path: Path) -> None:
    out = tmp_path / "g.json"
    result = run("graph", EXAMPLE, "--batch", "3", "--image-size", "16", "--json", str(out))
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    assert doc["model"] == "build" and doc["batch_size"] == 3
    assert doc["meta"]["factory"] == EXAMPLE and doc["meta"]["image_size"] == 16
    assert [t["shape"] for t in doc["inputs"]] == [[3, 3, 16, 16]]
    assert {layer["name"] for layer in doc["layers"]} >= {"stem", "body.1", "head"}


def test_plan_and_run_a_factory_module_in_bf16(tmp_path: Path) -> None:
    cluster = cpu_cluster(tmp_path / "c.yaml", 2)
    plan = tmp_path / "plan.json"
    result = run("plan", "tests.tiny_models:bert_masked", "--granularity", "block", "--dtype", "bf16",
                 "--cluster", str(cluster), "--microbatches", "2", "--out", str(plan), cwd=ROOT)
    assert result.returncode == 0, result.stderr
    source = json.loads(plan.read_text())["source"]
    assert source["factory"] == "tests.tiny_models:bert_masked" and source["dtype"] == "bf16"
    result = run("run", "--plan", str(plan), "--batches", "1", "--cluster", str(cluster), cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "outputs match the unsplit model" in result.stdout and "bf16 on cpu" in result.stdout


def test_a_graph_file_refuses_shape_options(tmp_path: Path) -> None:
    out = tmp_path / "g.json"
    assert run("graph", "mlp", "--json", str(out)).returncode == 0
    result = run("graph", str(out), "--batch", "8")
    assert result.returncode == 2
    assert "is a graph file, captured with fixed shapes: --batch apply to zoo models and factories" in result.stderr


@pytest.mark.parametrize(("model", "message"), [
    ("resnet", "unknown model 'resnet': choose one of mlp, .*; or give a graph JSON file, or your own model as "
               "'package.module:function'"),
    ("nowhere.at.all:build", "model factory 'nowhere.at.all:build': cannot import 'nowhere.at.all'"),
    ("tests.tiny_models:missing", "model factory 'tests.tiny_models:missing': 'tests.tiny_models' has no "
                                  "callable 'missing'"),
    ("tests.tiny_models:transposed", None),
])
def test_model_errors_point_to_the_fix(model: str, message: str | None) -> None:
    import re

    result = run("graph", model, "--seq-len", "8", cwd=ROOT)
    assert result.returncode == 2
    expected = message or ("model factory 'tests.tiny_models:transposed' takes no seq_len parameter: drop "
                           "--seq-len or add seq_len to transposed's parameters")
    assert re.search(expected if message else re.escape(expected), result.stderr), result.stderr
