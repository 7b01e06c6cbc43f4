"""In-model profiles (pipeplan.executor.profile_model), their tables (pipeplan.costmodel.model_profile) and the
cost model that reads them (pipeplan.costmodel.profiled): measured times first, a fitted slowdown for loads not
profiled."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.hardware import Contention, Device, cpu_model
from pipeplan.costmodel.model_profile import LevelTimes, ModelProfile, ProfiledLayer, ProfileTableError
from pipeplan.costmodel.profiled import ProfiledCostModel
from pipeplan.costmodel.registry import load_cost_model
from pipeplan.costmodel.source import capture_source
from pipeplan.executor.profile_model import ModelProfileSettings, profile_source
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.problem import PlanOptions, Problem
from tests.cli_run import run

QUICK = ModelProfileSettings(levels=(Contention(), Contention.parse("1xcompute")), min_passes=3,
                             seconds_per_level=0.05, warmup=1)
CORE = Device(id="cpu0", type="cpu-core", memory="8GiB", peak_flops="100GFLOPS", mem_bandwidth="10GB/s", cores=[0])


@pytest.fixture(scope="module")
def mlp_table() -> ModelProfile:
    return profile_source({"zoo": "mlp", "batch_size": 2}, settings=QUICK)


def _hand_made() -> ModelProfile:
    """Two layers, idle and one compute co-runner: a linear slowed 2×, an add 1.5×."""
    return ModelProfile(
        "hand", granularity="leaf", batch_size=1, dtype="fp32", device_type="cpu-core", device_name=cpu_model(),
        layers=[ProfiledLayer("fc", "linear", 100), ProfiledLayer("res", "add", 10)],
        levels=[LevelTimes(Contention(), [1.0, 3.0], forward_s=4.0),
                LevelTimes(Contention.parse("1xcompute"), [2.0, 4.5], forward_s=6.5, statistic="mean")])


def _layers() -> list:
    from pipeplan.costmodel.graph import Layer

    return [Layer("fc", "linear", "Linear", 0, flops=100, bytes_read=8, bytes_written=8, param_bytes=0,
                  activation_bytes=8, kernels=1),
            Layer("res", "add", "functional", 1, flops=10, bytes_read=8, bytes_written=8, param_bytes=0,
                  activation_bytes=8, kernels=1)]


def test_profile_times_every_layer_of_the_captured_graph_in_order(mlp_table: ModelProfile) -> None:
    graph = capture_source("mlp", 2)
    assert [la.name for la in mlp_table.layers] == [la.name for la in sorted(graph.layers, key=lambda la: la.order)]
    assert [la.flops for la in mlp_table.layers] == [la.flops for la in sorted(graph.layers, key=lambda la: la.order)]
    idle = mlp_table.levels[0]
    assert idle.load.idle and idle.statistic == "median" and idle.passes >= 3
    assert all(t > 0 for t in idle.raw_s) and all(o > 0 for o in idle.overhead_s)
    assert idle.layer_s == [max(0.0, t - o) for t, o in zip(idle.raw_s, idle.overhead_s, strict=True)]
    assert idle.forward_s > 0 and idle.graph_s is not None and idle.graph_s > 0
    loaded = mlp_table.levels[1]  # under a real co-runner process on the same core
    assert loaded.load == Contention.parse("1xcompute") and loaded.statistic == "mean" and loaded.passes >= 3
    assert all(t >= 0 for t in loaded.layer_s) and loaded.forward_s > 0
    assert mlp_table.device_name == cpu_model() and mlp_table.batch_size == 2 and mlp_table.dtype == "fp32"
    assert mlp_table.source == {"zoo": "mlp", "batch_size": 2}


def test_table_round_trips_through_json(mlp_table: ModelProfile, tmp_path: Path) -> None:
    path = mlp_table.save(tmp_path / "mlp.json")
    again = ModelProfile.load(path)
    assert again.to_dict() == mlp_table.to_dict()
    assert again.digest == mlp_table.digest and again.levels[0].layer_s == mlp_table.levels[0].layer_s


def test_profiled_loads_give_the_measured_times() -> None:
    model = ProfiledCostModel(_hand_made(), fallback=RooflineModel())
    assert model.layer_times(_layers(), CORE) == [1.0, 3.0]
    assert model.layer_times(_layers(), CORE, Contention.parse("1xcompute")) == [2.0, 4.5]


@pytest.mark.parametrize(("load", "expected"), [
    ("2xcompute", [3.0, 6.0]),  # beyond the last point: the last segment (slope 1 and 0.5 per co-runner)
    ("50%compute", [1.5, 3.75]),  # half a co-runner: halfway between idle and one
    ("30%", [1.3, 3.45]),  # 30% utilisation is one compute co-runner 30% of the time
    ("1xtenant", [2.0, 4.5]),  # a tenant is the compute kind on a CPU
    ("1xmemory", [2.0, 4.5]),  # no memory level: the profiled kinds' factors
])
def test_unprofiled_loads_are_idle_times_a_fitted_slowdown(load: str, expected: list[float]) -> None:
    model = ProfiledCostModel(_hand_made(), fallback=RooflineModel())
    assert model.layer_times(_layers(), CORE, Contention.parse(load)) == pytest.approx(expected, rel=1e-12)


def test_layers_and_devices_not_profiled_fall_back_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    model = ProfiledCostModel(_hand_made(), fallback=RooflineModel())
    other = _layers()[0]
    other.flops = 200  # same name, another batch size: not the profiled layer
    with caplog.at_level(logging.WARNING, logger="pipeplan.costmodel.profiled"):
        first = model.layer_times([other, _layers()[1]], CORE)
        model.layer_times([other], CORE)
    assert first == [RooflineModel().layer_time(other, CORE), 3.0]
    assert len([r for r in caplog.records if "has no layer 'fc'" in r.getMessage()]) == 1
    gpu = Device(id="gpu0", type="H100", memory="80GiB", peak_flops="60TFLOPS", mem_bandwidth="3TB/s")
    assert model.layer_times(_layers(), gpu) == RooflineModel().layer_times(_layers(), gpu)
    assert any("taken on 'cpu-core'" in r.getMessage() for r in caplog.records)


def test_profile_spec_loads_through_the_registry(tmp_path: Path) -> None:
    path = _hand_made().save(tmp_path / "hand.json")
    model = load_cost_model(f"profile:{path}")
    assert isinstance(model, ProfiledCostModel)
    assert model.spec == f"profile:{path.resolve()}" and model.digest is not None and model.digest.startswith("sha256:")
    assert model.layer_times(_layers(), CORE, Contention.parse("50%compute")) == pytest.approx([1.5, 3.75])


def test_missing_or_malformed_tables_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no such model profile 'nope.json'.*pipeplan profile MODEL"):
        load_cost_model("profile:nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProfileTableError, match="not readable JSON"):
        load_cost_model(f"profile:{bad}")
    bad.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ProfileTableError, match="is not a model profile"):
        load_cost_model(f"profile:{bad}")
    data = _hand_made().to_dict()
    del data["levels"][1]["layer_s"]
    bad.write_text(json.dumps(data))
    with pytest.raises(ProfileTableError, match="missing field 'layer_s'"):
        load_cost_model(f"profile:{bad}")
    data = _hand_made().to_dict()
    data["levels"][0]["layer_s"] = [1.0]
    data["levels"] = data["levels"][:1]
    bad.write_text(json.dumps(data))
    with pytest.raises(ProfileTableError, match="has 1 times for 2 layers"):
        load_cost_model(f"profile:{bad}")
    data = _hand_made().to_dict()
    data["levels"] = data["levels"][1:]
    bad.write_text(json.dumps(data))
    with pytest.raises(ProfileTableError, match="has no idle level"):
        load_cost_model(f"profile:{bad}")


def test_a_plan_made_with_the_profile_uses_its_times(mlp_table: ModelProfile, tmp_path: Path) -> None:
    path = mlp_table.save(tmp_path / "mlp.json")
    model = load_cost_model(f"profile:{path}")
    graph = capture_source("mlp", 2)
    cluster = load_cluster("local-cpu").with_load("cpu1", Contention.parse("1xcompute"))
    plan = solve(Problem(graph, cluster, model, PlanOptions(microbatches=2)), SolverOptions(time_limit=5, seed=0))
    assert plan.costmodel == f"profile:{path.resolve()}" and plan.costmodel_digest == model.digest
    names = [la.name for la in mlp_table.layers]
    measured = {"cpu0": dict(zip(names, mlp_table.levels[0].layer_s, strict=True)),  # idle
                "cpu1": dict(zip(names, mlp_table.levels[1].layer_s, strict=True))}  # 1xcompute
    assert plan.stages
    for stage in plan.stages:  # each stage costs exactly its layers' measured times under its load
        assert stage.compute == pytest.approx(sum(measured[stage.device][name] for name in stage.layers), rel=1e-6)


def test_cli_profiles_a_model_and_the_sweep_still_needs_out(tmp_path: Path) -> None:
    result = run("profile", "mlp", "--batch", "2", "--levels", "idle,1xmemory", "--seconds-per-level", "0.02",
                 "--repeats", "2", "--out", str(tmp_path / "p.json"))
    assert result.returncode == 0, result.stderr
    table = ModelProfile.load(tmp_path / "p.json")
    assert table.model == "mlp" and [lv.load.describe() for lv in table.levels] == ["idle", "1×memory"]
    assert "plan with --costmodel profile:" in result.stderr
    # the device's idle speed after each level, as the sweep checks it, and what to do if it moved
    assert "after idle: " in result.stderr and "after 1×memory: " in result.stderr
    assert ("held within 15% of the run's median" in result.stderr
            or ("off the run's median around level(s)" in result.stderr and "Profile the model again" in result.stderr))
    quiet = run("profile", "mlp", "--batch", "2", "--levels", "idle", "--seconds-per-level", "0.02", "--repeats", "2",
                "--drift-tolerance", "0", "--out", str(tmp_path / "q.json"))
    assert quiet.returncode == 0 and "after idle" not in quiet.stderr
    stop = run("profile", "mlp", "--stop-on-drift", "--out", str(tmp_path / "s.json"))
    assert stop.returncode == 2 and "drop --stop-on-drift" in stop.stderr and not (tmp_path / "s.json").exists()
    result = run("profile")
    assert result.returncode == 2 and "give --out DATA.csv for the layer sweep, or a MODEL" in result.stderr


def test_plan_uses_the_models_own_profile_when_one_matches(mlp_table: ModelProfile, tmp_path: Path) -> None:
    from pipeplan.costmodel.model_profile import default_path
    from pipeplan.planner.plan import Plan

    path = mlp_table.save(default_path("mlp", cpu_model(), tmp_path / "profiles"))
    result = run("plan", "mlp", "--batch", "2", "--cluster", "local-cpu", "--time-limit", "5", "--out", "p.json",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"costs from the model profile {path.relative_to(tmp_path)}" in " ".join(result.stdout.split())
    assert Plan.load(tmp_path / "p.json").costmodel == f"profile:{path.resolve()}"
    # Another batch size matches none of the table's layers (same names, other FLOPs): analytic.
    result = run("plan", "mlp", "--batch", "4", "--cluster", "local-cpu", "--time-limit", "5", "--out", "p4.json",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "model profile" not in result.stdout and Plan.load(tmp_path / "p4.json").costmodel == "analytic"
    # An explicit --costmodel is obeyed.
    result = run("plan", "mlp", "--batch", "2", "--cluster", "local-cpu", "--time-limit", "5", "--costmodel",
                 "analytic", "--out", "pa.json", cwd=tmp_path)
    assert result.returncode == 0 and Plan.load(tmp_path / "pa.json").costmodel == "analytic"
