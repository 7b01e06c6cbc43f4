"""A plan records exactly which cost model made it, and a run re-predicts with that model or says why not."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.provenance import load_recorded_cost_model
from pipeplan.costmodel.registry import SHIPPED, load_cost_model, shipped_for
from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import RunOptions
from pipeplan.executor.options import resolve
from pipeplan.executor.run import repredict
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.simulate import make_plan
from tests.cli_run import run
from tests.executor_helpers import cpu_cluster

XEON, EPYC = SHIPPED[0].model, SHIPPED[1].model


def _sha(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def _own_model(dst: Path) -> Path:
    """The shipped Xeon model with one more metadata field: the same predictions, another file."""
    with zipfile.ZipFile(XEON) as src, zipfile.ZipFile(dst, "w") as out:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "meta.json":
                data = json.dumps({**json.loads(data), "note": "mine"}).encode()
            out.writestr(item, data)
    return dst


def test_plan_made_with_a_model_file_records_its_path_and_digest(tmp_path: Path) -> None:
    mine = _own_model(tmp_path / "mine.zip")
    out = tmp_path / "plan.json"
    result = run("plan", "mlp", "--batch", "8", "--cluster", "local-cpu", "--costmodel", "mine.zip",
                 "--time-limit", "5", "--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    assert doc["version"] == 3  # 3: the typed certificate.solver
    assert doc["costmodel"] == str(mine.resolve())  # absolute: `run` may start elsewhere
    assert doc["costmodel_digest"] == _sha(mine) != _sha(XEON)
    assert Plan.load(out).to_dict()["costmodel_digest"] == doc["costmodel_digest"]  # survives a round trip


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Plan, object, object]:
    """A two-stage mlp plan made with a copy of the shipped model, and a run setup for it."""
    mine = _own_model(tmp_path / "mine.zip")
    cluster_path = cpu_cluster(tmp_path / "c.yaml", 2)
    graph = capture_model("mlp", 4)
    problem = Problem(graph, load_cluster(str(cluster_path)), load_cost_model(str(mine)), PlanOptions(microbatches=2))
    order = [layer.name for layer in graph.layers]
    assignment = {name: "cpu0" if i < 4 else "cpu1" for i, name in enumerate(order)}
    plan = make_plan(problem, assignment, Certificate("test", "HEURISTIC", 0.0), order=["cpu0", "cpu1"])
    return mine, plan, graph, resolve(plan, RunOptions(batches=1, cluster=str(cluster_path)))


def test_run_repredicts_with_the_plans_own_model(setup) -> None:
    mine, plan, graph, run_setup = setup
    assert plan.costmodel == str(mine.resolve()) and plan.costmodel_digest == _sha(mine)
    times, spec, notes = repredict(plan, graph, run_setup)
    assert spec == str(mine.resolve()) and notes == []
    assert times == pytest.approx([s.compute for s in plan.stages])  # idle run, same model: same figures


def test_a_missing_or_changed_model_file_is_said_not_replaced(setup) -> None:
    mine, plan, graph, run_setup = setup
    made_with = _sha(mine)
    shutil.copy(EPYC, mine)  # retrained in place: another model under the same name
    times, spec, notes = repredict(plan, graph, run_setup)
    assert times is None and spec is None
    assert "not the one the plan was made with" in notes[0] and made_with in notes[0] and _sha(EPYC) in notes[0]
    mine.unlink()
    times, _, notes = repredict(plan, graph, run_setup)
    assert times is None and "no such model file" in notes[0] and str(mine.resolve()) in notes[0]


def test_a_model_asked_for_at_run_time_is_used_and_named(setup) -> None:
    mine, plan, graph, run_setup = setup
    asked = replace(run_setup, options=replace(run_setup.options, costmodel="analytic"))
    times, spec, notes = repredict(plan, graph, asked)
    assert spec == "analytic" and times is not None
    assert notes == [f"stage times re-predicted with 'analytic' as asked, not with the plan's cost model "
                     f"{plan.costmodel!r} ({_sha(mine)})"]


def test_version_1_plans_load_and_trust_their_spec(setup) -> None:
    _, plan, graph, run_setup = setup
    doc = plan.to_dict()
    doc.update(version=1, costmodel="learned-xeon")
    del doc["costmodel_digest"]
    old = Plan.from_dict(doc)
    assert old.costmodel_digest is None
    times, spec, notes = repredict(old, graph, run_setup)
    assert spec == "learned-xeon" and notes == [] and times is not None


def test_a_shipped_name_is_found_by_digest_on_another_cpu() -> None:
    # a plan made with "learned" on another CPU than this machine's, re-predicted here
    other = next(s for s in SHIPPED if s.model != shipped_for().model)
    model = load_recorded_cost_model("learned", _sha(other.model))
    assert model.spec == f"learned-{other.name}" and model.digest == _sha(other.model)
    with pytest.raises(ValueError, match="not the one the plan was made with"):
        load_recorded_cost_model("learned", "sha256:" + "0" * 64)
