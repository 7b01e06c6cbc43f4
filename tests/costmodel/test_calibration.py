"""Runs feed back: measured stage compute calibrates later plans (issue 16, item 3)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.calibration import WINDOW, CalibratedCostModel, CalibrationStore, Observation, device_key
from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.registry import load_cost_model
from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import RunOptions, run_plan
from tests.executor_helpers import cpu_cluster, plan_with_cuts


def test_factor_is_the_geometric_mean_of_recent_ratios(tmp_path: Path) -> None:
    store = CalibrationStore(tmp_path / "c.json")
    store.add([Observation("m", "cpu", "idle", 1.0, r) for r in (2.0, 8.0)])
    assert store.factor("m", "cpu", "idle") == pytest.approx(4.0)
    store.add([Observation("m", "cpu", "1×compute", 1.0, 10.0)])
    assert store.factor("m", "cpu", "1×compute") == pytest.approx(10.0)
    assert store.factor("m", "cpu", "2×memory") == pytest.approx(4.0)  # unseen load: the idle factor
    assert store.factor("other", "cpu", "idle") == 1.0
    store.add([Observation("m", "cpu", "idle", 1.0, 3.0)] * (WINDOW + 5))  # old runs age out
    assert store.factor("m", "cpu", "idle") == pytest.approx(3.0)
    assert len(json.loads(store.path.read_text())["observations"]) == WINDOW + 1


def test_a_model_with_runs_of_its_own_takes_their_factor(tmp_path: Path) -> None:
    store = CalibrationStore(tmp_path / "c.json")
    store.add([Observation("m", "cpu", "idle", 1.0, 0.5, model="small"),
               Observation("m", "cpu", "idle", 1.0, 2.0, model="big"),
               Observation("m", "cpu", "1×compute", 1.0, 3.0, model="big")])
    assert store.factor("m", "cpu", "idle", model="small") == pytest.approx(0.5)
    assert store.factor("m", "cpu", "idle", model="big") == pytest.approx(2.0)
    assert store.factor("m", "cpu", "1×compute", model="big") == pytest.approx(3.0)
    assert store.factor("m", "cpu", "1×compute", model="small") == pytest.approx(0.5)  # its own idle runs
    assert store.factor("m", "cpu", "1×compute", model="never-run") == pytest.approx(3.0)  # every model's
    assert store.factor("m", "cpu", "idle", model="never-run") == pytest.approx(1.0)  # √(0.5 × 2)
    assert store.factor("m", "cpu", "idle") == pytest.approx(1.0)
    # Each model keeps its own window: another model's many runs do not push this one's out.
    store.add([Observation("m", "cpu", "idle", 1.0, 4.0, model="big")] * (WINDOW + 5))
    assert store.factor("m", "cpu", "idle", model="small") == pytest.approx(0.5)
    assert store.factor("m", "cpu", "idle", model="big") == pytest.approx(4.0)


def test_a_plan_prices_its_model_with_that_models_factor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeplan.planner.problem import Problem

    monkeypatch.setenv("PIPEPLAN_CALIBRATION", str(tmp_path / "c.json"))
    cluster = load_cluster("hetero-a100-t4")
    t4 = device_key(cluster.device("gpu2"))
    CalibrationStore().add([Observation("analytic", t4, "idle", 1.0, 2.5, model="mlp"),
                            Observation("analytic", t4, "idle", 1.0, 0.4, model="gpt2")])
    graph = capture_model("mlp", 4)
    base = Problem(graph, cluster, RooflineModel())
    calibrated = Problem(graph, cluster, load_cost_model("calibrated:analytic"))
    column = cluster.devices.index(cluster.device("gpu2"))
    assert [row[column] for row in calibrated.time] == pytest.approx([2.5 * row[column] for row in base.time])
    assert calibrated.costmodel.spec == "calibrated:analytic"  # the plan still records what was asked
    bound = calibrated.costmodel
    assert isinstance(bound, CalibratedCostModel)
    # mlp ran on the T4 only: the A100's factor is nobody's (1), and not mlp's own
    assert (bound.own_runs(cluster.device("gpu2")), bound.own_runs(cluster.device("gpu0"))) == (1, 0)


def test_malformed_store_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match=f"calibration file {path} is malformed .*remove it"):
        CalibrationStore(path).factor("m", "cpu", "idle")
    with pytest.raises(ValueError, match="positive finite times"):
        Observation("m", "cpu", "idle", 0.0, 1.0)


def test_calibrated_model_scales_its_base_per_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPEPLAN_CALIBRATION", str(tmp_path / "c.json"))
    cluster = load_cluster("hetero-a100-t4")
    a100, t4 = cluster.device("gpu0"), cluster.device("gpu2")
    CalibrationStore().add([Observation("analytic", device_key(t4), "idle", 1.0, 2.5)])
    model = load_cost_model("calibrated:analytic")
    assert isinstance(model, CalibratedCostModel) and model.spec == "calibrated:analytic"
    layer = capture_model("mlp", 4).layers[0]
    base = RooflineModel()
    assert model.layer_time(layer, t4) == pytest.approx(2.5 * base.layer_time(layer, t4))
    assert model.layer_time(layer, a100) == base.layer_time(layer, a100)


def test_a_run_records_its_stages_and_reports_before_and_after(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.json"
    monkeypatch.setenv("PIPEPLAN_CALIBRATION", str(path))
    spec = cpu_cluster(tmp_path / "cluster.yaml", 2)
    plan = plan_with_cuts(capture_model("mlp", 8), spec, ["net.4"])
    report = run_plan(plan, options=RunOptions(batches=2, cluster=str(spec)))
    assert report is not None
    rows = json.loads(path.read_text())["observations"]
    assert [(r["costmodel"], r["load"], r["model"]) for r in rows] == [("analytic", "idle", "mlp")] * 2
    for row, stage in zip(rows, report.stages, strict=True):
        assert row["measured"] == stage.measured["compute"]
        assert row["predicted"] == pytest.approx(stage.predicted_at_load["compute"])
    note = next(n for n in report.notes if n.startswith("calibration"))
    assert "with the device factors before this run (from other models' runs; mlp had none)" in note
    assert "calibrated:analytic" in note
    # Both stages are one core of one CPU: one factor, the geometric mean of their ratios.
    expected = math.exp(sum(math.log(r["measured"] / r["predicted"]) for r in rows) / 2)
    cpu = load_cluster(str(spec)).device("cpu0")
    assert CalibratedCostModel(RooflineModel()).factor(cpu) == pytest.approx(expected)
    assert CalibratedCostModel(RooflineModel(), model="mlp").factor(cpu) == pytest.approx(expected)
    # A run that asks not to leaves the store alone.
    run_plan(plan, options=RunOptions(batches=1, cluster=str(spec), calibrate=False))
    assert len(json.loads(path.read_text())["observations"]) == 2
    # The next run of the same model is priced by its own runs, and says so.
    again = run_plan(plan, options=RunOptions(batches=1, cluster=str(spec)))
    assert again is not None
    assert any("(from 2 stage times of mlp's earlier runs)" in n for n in again.notes)
