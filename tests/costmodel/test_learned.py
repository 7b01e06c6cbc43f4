"""Learned cost models: fit on the shipped CPU profile, predict, explain, save and load safely."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import zipfile

import numpy as np
import pytest

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.dataset_files import read_dataset
from pipeplan.costmodel.estimators import held_out_split
from pipeplan.costmodel.hardware import NAME_ONLY_DESIGNS, Contention, Device, cpu_model, design
from pipeplan.costmodel.learned import LearnedCostModel, ModelFileError
from pipeplan.costmodel.registry import SHIPPED, SHIPPED_DATASET, SHIPPED_MODEL, load_cost_model, shipped_for
from pipeplan.costmodel.zoo import capture_model


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return read_dataset(SHIPPED_DATASET)


@pytest.fixture(scope="module")
def training_rows(rows) -> list[dict]:
    # Every other layer configuration (all its contention levels) of the profile's first run (2026-11-21:
    # eleven layer kinds and the zoo's layers, one day's speed of the VM): fitting the Gaussian processes
    # on the whole profile took 106 s of the suite's 10 minutes; half of it still holds out ~100
    # configurations, and the assertions below are about the method, not the shipped figures
    # (benchmarks/costmodel_accuracy.py tracks those; the rows appended since are other kinds, taken on
    # a day the VM ran 15% faster).
    first = [r for r in rows if str(r["measured_at"]) < "2026-11-22"]
    kept = set(sorted({r["config"] for r in first})[::2])
    return [r for r in first if r["config"] in kept]


@pytest.fixture(scope="module")
def trained(training_rows) -> LearnedCostModel:
    return LearnedCostModel.train(training_rows, seed=0)


def test_held_out_split_keeps_each_shape_on_one_side(rows) -> None:
    train, test = held_out_split(rows, test_fraction=0.25, seed=0)
    assert sorted(train + test) == list(range(len(rows)))
    assert not {rows[i]["config"] for i in train} & {rows[i]["config"] for i in test}


def test_main_model_beats_the_linear_baseline_on_held_out_shapes(trained) -> None:
    evaluation = trained.meta["evaluation"]
    main, linear = evaluation["main"]["overall"], evaluation["linear"]["overall"]
    assert main["n"] == evaluation["test_rows"] > 100
    assert main["mape"] < linear["mape"]
    assert main["mape"] < 25.0  # the benchmark tracks the real figure; this catches a broken model
    assert set(evaluation["main"]["by_contention"]) == set(trained.meta["levels"])


def test_importances_name_each_factor_once_and_sum_to_one(trained) -> None:
    imp = trained.importances()
    assert abs(sum(imp.values()) - 1.0) < 1e-9
    assert {"layer_kind", "contention_kind", "log_flops", "corunners"} <= set(imp)
    assert not any("=" in name for name in imp)


def test_predictions_follow_contention_on_the_profiled_device(trained, rows) -> None:
    graph = capture_model("mlp", 8)
    cpu = load_cluster("local-cpu").devices[0]
    layer = max(graph.layers, key=lambda la: la.flops)
    idle = trained.layer_time(layer, cpu, Contention())
    busy = trained.layer_time(layer, cpu, Contention(corunners=2, kind="compute"))
    assert 0 < idle < busy
    assert 2.0 < busy / idle < 4.5  # three processes time-share one core


def test_an_unprofiled_device_gets_the_roofline_times_the_learned_slowdown(trained) -> None:
    gpu = Device(id="g", type="A100-80GB", memory="80GiB", peak_flops="312TFLOPS", mem_bandwidth="2039GB/s")
    layer = max(capture_model("mlp", 8).layers, key=lambda la: la.flops)
    roofline = RooflineModel().layer_time(layer, gpu, Contention())
    assert trained.layer_time(layer, gpu, Contention()) == roofline
    assert trained.layer_time(layer, gpu, Contention(corunners=1, kind="compute")) > roofline


def test_a_cpu_other_than_the_profiled_one_is_named_in_one_warning(trained, caplog, monkeypatch) -> None:
    cpu = load_cluster("local-cpu").devices[0]
    layer = capture_model("mlp", 8).layers[0]
    elsewhere = dataclasses.replace(trained, meta={**trained.meta, "device_names": ["Some Other CPU 9000"]})
    with caplog.at_level(logging.WARNING, logger="pipeplan.costmodel.learned"):
        first = elsewhere.layer_time(layer, cpu)
        elsewhere.layer_time(layer, cpu)
    warned = [r.getMessage() for r in caplog.records if r.name == "pipeplan.costmodel.learned"]
    assert len(warned) == 1 and "'Some Other CPU 9000'" in warned[0] and repr(cpu_model()) in warned[0]
    assert first == trained.layer_time(layer, cpu)  # a warning, not another prediction
    caplog.clear()
    import pipeplan.costmodel.hardware as hardware

    # a CPU whose name no known design stands behind (the Xeon's does: the test below)
    monkeypatch.setattr(hardware, "cpu_name", lambda: "Test CPU")
    monkeypatch.setattr(hardware, "cpu_model", lambda: "Test CPU (cpu family 1, model 2, stepping 3)")
    here = dataclasses.replace(trained, meta={**trained.meta, "device_names": [hardware.cpu_model()]})
    legacy = dataclasses.replace(trained, meta={**trained.meta, "device_names": ["Test CPU"]})  # name only
    with caplog.at_level(logging.WARNING, logger="pipeplan.costmodel.learned"):
        here.layer_time(layer, cpu)
        legacy.layer_time(layer, cpu)
        here.layer_time(layer, Device(id="g", type="A100-80GB", memory="80GiB", peak_flops="312TFLOPS",
                                      mem_bandwidth="2039GB/s"))
    assert [r for r in caplog.records if r.name == "pipeplan.costmodel.learned"] == []


def test_save_and_load_round_trip_predicts_the_same(trained, rows, tmp_path) -> None:
    path = tmp_path / "m.zip"
    trained.save(path)
    loaded = LearnedCostModel.load(path)
    assert loaded.predict_rows(rows[:50]).tolist() == trained.predict_rows(rows[:50]).tolist()
    assert loaded.meta["evaluation"]["main"]["overall"] == trained.meta["evaluation"]["main"]["overall"]


def _shipped_with(dst, **replaced: bytes) -> None:
    """A copy of the shipped model file with some members (``meta_json=``, ``smooth_npz=``, …) replaced."""
    with zipfile.ZipFile(SHIPPED_MODEL) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            zout.writestr(name, replaced.get(name.replace(".", "_"), zin.read(name)))


def _rewrite_meta(dst, change) -> None:
    with zipfile.ZipFile(SHIPPED_MODEL) as zin:
        meta = json.loads(zin.read("meta.json"))
    change(meta)
    _shipped_with(dst, meta_json=json.dumps(meta).encode())


def test_a_model_with_another_feature_set_is_refused(tmp_path) -> None:
    bad = tmp_path / "other-features.zip"
    _rewrite_meta(bad, lambda m: m["features"].append("log_cache_misses"))
    with pytest.raises(ModelFileError, match="trained on features"):
        LearnedCostModel.load(bad)
    old = tmp_path / "old.zip"
    _rewrite_meta(old, lambda m: m.update(version=0))
    with pytest.raises(ModelFileError, match="version 0"):
        LearnedCostModel.load(old)


def test_a_file_that_would_build_arbitrary_objects_is_refused(tmp_path) -> None:
    import os

    import skops.io as sio
    from sklearn.preprocessing import FunctionTransformer

    evil = tmp_path / "evil.zip"
    _shipped_with(evil, estimators_skops=sio.dumps({"main": FunctionTransformer(os.system)}))
    with pytest.raises(ModelFileError, match="refusing to load"):
        LearnedCostModel.load(evil)
    pickled = tmp_path / "pickled-arrays.zip"
    buffer = io.BytesIO()
    np.savez(buffer, ops=np.array([FunctionTransformer(os.system)], dtype=object))
    _shipped_with(pickled, smooth_npz=buffer.getvalue())
    with pytest.raises(ModelFileError, match=r"corrupt smooth\.npz"):
        LearnedCostModel.load(pickled)
    garbage = tmp_path / "garbage.zip"
    garbage.write_bytes(b"not a zip")
    with pytest.raises(ModelFileError, match="not a pipeplan cost-model file"):
        LearnedCostModel.load(garbage)


def test_registry_names_the_shipped_model_and_refuses_unknown_specs() -> None:
    assert load_cost_model("learned").name == "learned"
    # one file is read once (the estimators are shared); each copy records the spec it was given
    learned, by_path = load_cost_model("learned"), load_cost_model(str(shipped_for().model))
    assert learned.fitted is by_path.fitted and learned.digest == by_path.digest
    assert learned.spec == "learned" and by_path.spec == str(shipped_for().model.resolve())
    assert load_cost_model("learned-xeon").fitted is load_cost_model(str(SHIPPED_MODEL)).fitted
    assert learned.digest == "sha256:" + hashlib.sha256(shipped_for().model.read_bytes()).hexdigest()
    with pytest.raises(ValueError, match="no such model file"):
        load_cost_model("nonsense")


def test_each_shipped_model_was_trained_on_its_dataset_profiled_on_its_cpu_and_is_chosen_there() -> None:
    for shipped in SHIPPED:
        model = load_cost_model(f"learned-{shipped.name}")
        data = read_dataset(shipped.dataset)
        assert isinstance(model, LearnedCostModel)
        assert model.meta["rows"] == len(data)
        assert set(model.meta["levels"]) == {str(r["contention"]) for r in data}
        # every row of its profile was measured on its CPU's design (a name-only row on the design known
        # behind that name; the Xeon's later rows name the family and model too)
        assert {design(name) for name in model.meta["device_names"]} == {design(shipped.cpu)}
        assert {design(str(r["device_name"])) for r in data} == {design(shipped.cpu)}
        assert shipped_for(shipped.cpu) is shipped
        assert set(model.fitted.smooth) >= {"aten.conv2d", "aten.linear", "aten.bmm"}
    # A CPU with no profile of its own gets the first (and its predictions warn).
    assert shipped_for("Some Other CPU 9000") is SHIPPED[0]


@pytest.mark.parametrize(("name", "model", "expected"), [
    ("AMD EPYC", "AMD EPYC (cpu family 26, model 2, stepping 1)", "epyc"),
    ("AMD EPYC", "AMD EPYC (cpu family 26, model 2, stepping 4)", "epyc"),  # another revision
    ("AMD EPYC", "AMD EPYC (cpu family 25, model 17, stepping 1)", "epyc-zen4"),  # the other "AMD EPYC"
    ("AMD EPYC", "AMD EPYC (cpu family 25, model 1, stepping 1)", "epyc-zen3"),  # a third one (Zen 3)
    ("AMD EPYC", "AMD EPYC (cpu family 25, model 49, stepping 0)", "xeon"),  # a fourth: the fallback
    ("Intel(R) Xeon(R) Processor", "Intel(R) Xeon(R) Processor (cpu family 6, model 143, stepping 8)", "xeon"),
    ("Intel(R) Xeon(R) Processor", "Intel(R) Xeon(R) Processor (cpu family 6, model 167, stepping 1)", "xeon"),
    ("Intel(R) Xeon(R) Processor", "Intel(R) Xeon(R) Processor (cpu family 6, model 207, stepping 2)", "xeon-207"),
])
def test_this_machines_cpu_picks_the_shipped_model(monkeypatch, name, model, expected) -> None:
    import pipeplan.costmodel.hardware as hardware

    monkeypatch.setattr(hardware, "cpu_name", lambda: name)
    monkeypatch.setattr(hardware, "cpu_model", lambda: model)
    assert shipped_for().name == expected


def test_the_shipped_xeon_profile_is_one_xeon_not_every_cpu_of_that_name(monkeypatch, trained, caplog) -> None:
    """Its rows give the name alone; the design it was taken on (model 167) decides.  A Xeon of model
    143 (no model of its own) falls back to it all the same, but is told, and its own probe counts
    (``registry._probed_here``)."""
    import pipeplan.costmodel.hardware as hardware
    import pipeplan.costmodel.learned as learned_module
    from pipeplan.costmodel.hardware import same_cpu

    name = "Intel(R) Xeon(R) Processor"
    monkeypatch.setattr(hardware, "cpu_name", lambda: name)
    monkeypatch.setattr(hardware, "cpu_model", lambda: f"{name} (cpu family 6, model 167, stepping 7)")
    assert same_cpu(name) and shipped_for().name == "xeon"
    model_143 = f"{name} (cpu family 6, model 143, stepping 8)"
    monkeypatch.setattr(hardware, "cpu_model", lambda: model_143)
    monkeypatch.setattr(learned_module, "cpu_model", lambda: model_143)  # the warning names this machine's CPU
    assert not same_cpu(name) and not same_cpu(NAME_ONLY_DESIGNS[name])
    assert shipped_for() is SHIPPED[0] and SHIPPED[0].cpu == name  # the fallback, now as a fallback
    cpu = load_cluster("local-cpu").devices[0]
    legacy = dataclasses.replace(trained, meta={**trained.meta, "device_names": [name]})
    with caplog.at_level(logging.WARNING, logger="pipeplan.costmodel.learned"):
        legacy.layer_time(capture_model("mlp", 8).layers[0], cpu)
    warned = [r.getMessage() for r in caplog.records if r.name == "pipeplan.costmodel.learned"]
    assert len(warned) == 1 and "model 143" in warned[0] and "(cpu family 6, model 167)'" in warned[0]


def test_coverage_counts_rows_and_held_out_configurations_per_kind(trained, training_rows) -> None:
    rows = training_rows
    cover = trained.meta["coverage"]
    _, test = held_out_split(rows, seed=0)
    held = {rows[i]["config"] for i in test}
    attention = {r["config"] for r in rows if r["layer_kind"] == "attention"}
    assert cover["by_kind"]["attention"] == {"rows": 7 * len(attention), "configs": len(attention),
                                             "held_out_configs": len(attention & held)}
    assert sum(c["rows"] for c in cover["by_kind"].values()) == len(rows)
    # the shipped CPU profile has never timed a softmax, a residual add or a reduction on its own
    assert cover["missing"] == ["softmax", "elementwise", "reduction"]
    evaluation = trained.meta["evaluation"]
    lo, hi = evaluation["main"]["overall"]["mape_interval"]
    assert lo < evaluation["main"]["overall"]["mape"] < hi
    assert evaluation["test_configs"] >= 20 and "cannot_judge" not in evaluation


def test_too_few_held_out_configurations_cannot_judge_the_model(rows, caplog) -> None:
    few = sorted({r["config"] for r in rows if r["config"].startswith("linear:")})[:8]
    small = [r for r in rows if r["config"] in few]
    with caplog.at_level(logging.WARNING, logger="pipeplan.costmodel.learned"):
        model = LearnedCostModel.train(small, seed=0)
    evaluation = model.meta["evaluation"]
    assert evaluation["test_configs"] == 2  # a quarter of 8
    assert evaluation["cannot_judge"].startswith("only 2 layer configurations held out (at least 20")
    assert "only 2 layer configurations" in caplog.text
    assert model.meta["coverage"]["by_kind"] == {"linear": {"rows": len(small), "configs": 8, "held_out_configs": 2}}
    assert "attention" in model.meta["coverage"]["missing"]
