"""The report's arithmetic on hand-made timings, and the run options refused before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import PlanMismatchError, RunOptions
from pipeplan.executor.options import parse_loads, resolve
from pipeplan.executor.report import build_report, relative_error, report_table, verdict
from pipeplan.planner.plan import Plan
from tests.executor_helpers import cpu_cluster, plan_with_cuts


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cpu_cluster(tmp_path_factory.mktemp("c") / "c.yaml", 2)


@pytest.fixture(scope="module")
def plan(cluster: Path) -> Plan:
    return plan_with_cuts(capture_model("mlp", 4), cluster, ["net.4"], microbatches=2)


def _result(stage: int, rows: list[list[float]]) -> dict[str, object]:
    return {"stage": stage, "device": f"cpu{stage}", "host": "h", "cores": [0], "threads": 1, "corunners": 0,
            "start": 0.0, "end": 0.055, "timings": rows, "check": None, "phases": {}}


def test_report_splits_waiting_into_idle_and_transfer(plan: Plan, cluster: Path) -> None:
    setup = resolve(plan, RunOptions(batches=1, cluster=str(cluster)))
    # batch, microbatch, recv start/end, compute start/end, send end, send wait (seconds)
    first = [[0, 0, 0.000, 0.000, 0.000, 0.010, 0.011, 0.0],
             [0, 1, 0.011, 0.011, 0.011, 0.021, 0.030, 0.008]]
    # microbatch 0: waits from 0 to 0.013, the data was posted at 0.010: 10 ms idle, 3 ms transfer;
    # microbatch 1: the data was there (0.021) before it waited (0.033): 1 ms transfer, no idle.
    second = [[0, 0, 0.000, 0.013, 0.013, 0.033, 0.033, 0.0],
              [0, 1, 0.033, 0.034, 0.034, 0.054, 0.055, 0.001]]
    report = build_report(plan, setup, [_result(1, second), _result(0, first)], at_load=[0.5, 0.5])
    s0, s1 = report.stages
    assert s1.measured["idle"] == pytest.approx(0.005)
    assert s1.measured["recv"] == pytest.approx(0.002)
    assert s1.measured["compute"] == pytest.approx(0.020)
    assert s0.measured["send"] == pytest.approx(0.005)
    assert s0.microbatches[1]["send_wait"] == pytest.approx(0.008)
    assert report.throughput == pytest.approx(1 * 2 * 4 / 0.055)
    assert report.latency == pytest.approx(0.054)
    assert report.microbatch_latency == pytest.approx((0.033 + 0.043) / 2)
    times = [s.time for s in plan.stages]
    assert report.predicted_latency == pytest.approx(sum(times) + max(times))
    assert s1.error["compute"] == pytest.approx(relative_error(0.020, plan.stages[1].compute))
    assert s1.predicted_at_load is not None and s1.predicted_at_load["compute"] == 0.5
    assert report.to_dict()["format"] == "pipeplan.run"
    assert report_table(report).row_count == 2
    assert verdict(report) == "outputs not checked"
    report.check = {"ok": False, "message": "max |diff| 3.0 on batch 0"}
    assert verdict(report) == "OUTPUTS DIFFER: max |diff| 3.0 on batch 0"


def test_relative_error() -> None:
    assert relative_error(1.5, 1.0) == pytest.approx(0.5)
    assert relative_error(1.0, 0.0) is None


def test_options_are_checked_before_anything_starts(plan: Plan, cluster: Path, tmp_path: Path) -> None:
    with pytest.raises(PlanMismatchError, match="--load names 'cpu7', which runs no stage"):
        resolve(plan, RunOptions(cluster=str(cluster), loads={"cpu7": "1xcompute"}))
    with pytest.raises(PlanMismatchError, match="cannot load cluster 'nowhere'"):
        resolve(plan, RunOptions(cluster="nowhere"))
    with pytest.raises(PlanMismatchError, match="batches must be at least 1"):
        RunOptions(batches=0)
    with pytest.raises(PlanMismatchError, match="unknown schedule 'zigzag'"):
        RunOptions(schedule="zigzag")
    with pytest.raises(PlanMismatchError, match="write DEVICE=LEVEL"):
        parse_loads(["cpu1"])
    with pytest.raises(ValueError, match="cannot read load 'lots'"):
        parse_loads(["cpu1=lots"])
    assert parse_loads([" cpu1 = 2xmemory "]) == {"cpu1": "2xmemory"}

    forbidden = max(os.sched_getaffinity(0)) + 1
    spec = cluster.read_text().replace("cores: [", f"cores: [{forbidden}, ", 1)
    (tmp_path / "bad.yaml").write_text(spec)
    with pytest.raises(PlanMismatchError, match=rf"device 'cpu0' is cores \[{forbidden}, "):
        resolve(plan, RunOptions(cluster=str(tmp_path / "bad.yaml")))


def test_setup_pins_each_stage_to_its_device_cores(plan: Plan, cluster: Path) -> None:
    setup = resolve(plan, RunOptions(cluster=str(cluster), loads={"cpu1": "1xmemory"}))
    usable = sorted(os.sched_getaffinity(0))
    assert setup.backend == "gloo" and setup.device_type == "cpu" and setup.microbatches == 2
    assert [s.cores for s in setup.stages] == [(usable[0],), (usable[1 % len(usable)],)]
    assert [s.threads for s in setup.stages] == [1, 1]
    assert [s.load for s in setup.stages] == [None, "1xmemory"]
