"""A run predicts each stage with its waits for input priced by the CPU's wake model, and says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeplan.costmodel.wake import WakeModel
from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import RunOptions, run_plan
from pipeplan.executor.as_run import StageLoad, simulate_as_run
from tests.executor_helpers import cpu_cluster, plan_with_cuts

MS = 1e-3


def test_a_run_prices_the_waits_of_stages_that_are_not_the_bottleneck(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # a CPU whose cores lose 0.2 ms (and 10%) to any wait of a millisecond or more: large enough to see
    wake = WakeModel(cpu="test cpu", measured_at="2026-11-24", sleeps=[1 * MS, 16 * MS],
                     penalty_fixed=[0.2 * MS, 0.2 * MS], penalty_rate=[0.1, 0.1], credit={"2×compute": [0.0, 0.0]})
    monkeypatch.setenv("PIPEPLAN_WAKE", str(wake.save(tmp_path / "wake.json")))
    spec = cpu_cluster(tmp_path / "cluster.yaml", 2)
    plan = plan_with_cuts(capture_model("mlp", 8), spec, ["net.4"])
    report = run_plan(plan, options=RunOptions(batches=2, cluster=str(spec), calibrate=False, schedule="1f1b"))
    assert report is not None and report.check is not None and report.check["ok"]
    # an idle run: back to back, the stages are the plan's own figures; as run, each pays for its waits
    replay = simulate_as_run(wake, [StageLoad(s.compute, s.compute, s.recv) for s in plan.stages],
                             microbatches=report.microbatches, schedule="1f1b", batches=2, warmup=1)
    expected = replay.computes
    assert report.predicted_throughput_as_run == pytest.approx(
        report.microbatches * plan.batch_size / replay.batch_seconds)
    assert report.to_dict()["throughput_error_as_run"] == pytest.approx(
        report.throughput / report.predicted_throughput_as_run - 1)
    for stage, planned, as_run in zip(report.stages, plan.stages, expected, strict=True):
        assert stage.predicted_at_load is not None
        assert stage.predicted_at_load["compute"] == pytest.approx(as_run)
        if as_run != planned.compute:
            assert stage.predicted_at_load["back_to_back"] == pytest.approx(planned.compute)
    assert any(e > p.compute for e, p in zip(expected, plan.stages, strict=True))
    assert any("priced by the wake model of test cpu" in note and str(tmp_path / "wake.json") in note
               for note in report.notes)


def test_a_run_across_hosts_is_predicted_back_to_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This CPU's wake model says nothing of another host's CPU or of the network between them."""
    from dataclasses import replace

    from pipeplan.executor.options import resolve
    from pipeplan.executor.run import repredict_run

    wake = WakeModel(cpu="test cpu", measured_at="2026-11-24", sleeps=[1 * MS], penalty_fixed=[0.2 * MS],
                     penalty_rate=[0.0], stage_fixed=0.1 * MS)
    monkeypatch.setenv("PIPEPLAN_WAKE", str(wake.save(tmp_path / "wake.json")))
    spec = cpu_cluster(tmp_path / "cluster.yaml", 2)
    graph = capture_model("mlp", 8)
    plan = plan_with_cuts(graph, spec, ["net.4"])
    setup = resolve(plan, RunOptions(batches=2, cluster=str(spec)))
    here = repredict_run(plan, graph, setup)
    assert here.batch_seconds is not None and here.times != here.back_to_back
    apart = replace(setup, stages=tuple(replace(s, host=f"node{s.index}") for s in setup.stages))
    across = repredict_run(plan, graph, apart)
    assert across.batch_seconds is None and across.times == across.back_to_back == here.back_to_back
