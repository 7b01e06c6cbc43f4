"""Deployments for real: stage processes over gloo serving requests, answers against the unsplit model."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import RunOptions
from pipeplan.executor.deploy import ServeOptions, deploy_plan
from pipeplan.executor.errors import DeploymentClosed, QueueFullError, StageFailure
from pipeplan.executor.source import rebuild
from pipeplan.planner.plan import Plan
from tests.executor_helpers import cpu_cluster, plan_with_cuts

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("clusters")
    return {n: cpu_cluster(root / f"cpu{n}.yaml", n) for n in (2, 3)}


def _options(cluster: Path, **kw: object) -> RunOptions:
    return RunOptions(**{"cluster": str(cluster), "timeout": 20.0, **kw})


def _assert_same(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal up to fp32 reduction order, relative to the output's scale (as pipeplan.executor.check judges)."""
    scale = float(expected.abs().max())
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * scale)


def _unsplit(plan: Plan) -> torch.nn.Module:
    return rebuild(plan).model  # built from the plan's source, as the deployment's stages were


def test_every_request_is_answered_once_as_the_unsplit_model_would(clusters: dict[int, Path]) -> None:
    plan = plan_with_cuts(capture_model("mlp", 4), clusters[2], ["net.4"])
    model = _unsplit(plan)
    samples = torch.randn(30, 256)
    assert tuple(rebuild(plan).args[0].shape) == (4, 256)
    futures: dict[int, object] = {}

    with deploy_plan(plan, options=_options(clusters[2]), serving=ServeOptions(max_wait_ms=1)) as d:
        def client(first: int) -> None:  # two clients, interleaving their requests
            for k in range(first, len(samples), 2):
                futures[k] = d.submit(samples[k])
                if k % 7 == 0:
                    time.sleep(0.005)  # gaps, so that some microbatches leave partial

        threads = [threading.Thread(target=client, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        answers = {k: f.result(timeout=30) for k, f in futures.items()}  # type: ignore[attr-defined]
    stats = d.stats()  # after close: every stage's last report is in (they come on separate pipes)
    assert d.totals is not None and [t["steps"] for t in d.totals] == [stats.microbatches] * 2

    with torch.no_grad():
        expected = model(samples)
    for k in range(len(samples)):
        _assert_same(answers[k], expected[k])
    assert stats.submitted == stats.answered == 30 and stats.failed == stats.refused == 0
    assert stats.microbatches >= 8 and stats.padded == 4 * stats.microbatches - 30
    assert stats.queued == stats.in_flight == 0
    assert [s.device for s in stats.stages] == ["cpu0", "cpu1"]
    for s in stats.stages:
        assert s.microbatches == stats.microbatches and s.compute > 0 and s.idle >= 0 and s.transfer >= 0
    assert 0 < stats.latency["p50"] <= stats.latency["p99"] and stats.queueing["p99"] <= stats.latency["p99"]
    assert not multiprocessing.active_children()


def test_token_inputs_through_three_stages_1f1b(clusters: dict[int, Path]) -> None:
    graph = capture_model("tinygpt", 2, seq_len=16)
    plan = plan_with_cuts(graph, clusters[3], ["blocks.0.attn.qkv", "blocks.1.ln2"])
    model = _unsplit(plan)
    tokens = rebuild(plan).args[0]
    samples = torch.randint(int(tokens.min()), int(tokens.max()) + 1, (5, tokens.shape[1]))
    with deploy_plan(plan, options=_options(clusters[3], schedule="1f1b")) as d:
        answers = [f.result(timeout=30) for f in [d.submit(s) for s in samples]]
    with torch.no_grad():
        expected = model(samples)
    for got, want in zip(answers, expected, strict=True):
        _assert_same(got, want)


def test_a_full_queue_refuses_and_a_lone_request_waits_only_the_latency_bound(clusters: dict[int, Path]) -> None:
    plan = plan_with_cuts(capture_model("mlp", 4), clusters[2], ["net.4"])
    model = _unsplit(plan)
    samples = torch.randn(3, 256)
    bound = 0.3
    d = deploy_plan(plan, options=_options(clusters[2]), serving=ServeOptions(queue_size=2, max_wait_ms=bound * 1e3))
    try:
        first = [d.submit(samples[0]), d.submit(samples[1])]  # the feeder waits for 4, or for the bound
        with pytest.raises(QueueFullError, match=r"queue is full \(2 waiting\)"):
            d.submit(samples[2])
        answers = [f.result(timeout=30) for f in first]
        late = d.submit(samples[2], timeout=5.0)
        _assert_same(late.result(timeout=30), model(samples[2:3])[0].detach())
        stats = d.stats()
    finally:
        d.close()
    for got, want in zip(answers, model(samples[:2]).detach(), strict=True):
        _assert_same(got, want)
    assert stats.refused == 1 and stats.answered == 3 and stats.microbatches == 2 and stats.padded == 5
    assert stats.queueing["p50"] >= bound * 0.9  # each left when its oldest request had waited the bound
    with pytest.raises(DeploymentClosed, match="was closed"):
        d.submit(samples[0])


def test_closing_without_draining_fails_the_queued_requests(clusters: dict[int, Path]) -> None:
    plan = plan_with_cuts(capture_model("mlp", 4), clusters[2], ["net.4"])
    d = deploy_plan(plan, options=_options(clusters[2]), serving=ServeOptions(max_wait_ms=60_000))
    waiting = d.submit(torch.randn(256))  # held for a full microbatch that never comes
    d.close(drain=False)
    with pytest.raises(DeploymentClosed, match="was closed"):
        waiting.result(timeout=5)
    assert not multiprocessing.active_children()


def test_without_recovery_a_stage_that_dies_fails_the_outstanding_requests_naming_it(clusters: dict[int, Path]) -> None:
    plan = plan_with_cuts(capture_model("mlp", 4), clusters[2], ["net.4"])
    d = deploy_plan(plan, options=_options(clusters[2]), serving=ServeOptions(max_wait_ms=60_000, recover=False))
    served = [d.submit(torch.randn(256)) for _ in range(4)]  # a full microbatch leaves at once
    assert all(f.result(timeout=30).shape == (10,) for f in served)
    outstanding = d.submit(torch.randn(256))
    stage1 = next(p for p in multiprocessing.active_children() if p.name == "pipeplan-deploy-cpu1")
    start = time.monotonic()
    assert stage1.pid is not None
    os.kill(stage1.pid, signal.SIGKILL)
    with pytest.raises(StageFailure, match="stage 1 on cpu1 failed: the process was killed by SIGKILL"):
        outstanding.result(timeout=30)
    assert time.monotonic() - start < 15
    with pytest.raises(DeploymentClosed, match="stage 1 on cpu1 failed"):
        d.submit(torch.randn(256))
    with pytest.raises(StageFailure):
        d.close()
    stats = d.stats()
    assert stats.answered == 4 and stats.failed == 1 and isinstance(d.failure, StageFailure)
    assert not multiprocessing.active_children()


def test_a_stage_that_raises_fails_the_requests_in_flight(clusters: dict[int, Path]) -> None:
    from pipeplan.costmodel.capture import capture
    from tests.executor_helpers import exploding_model

    model, args = exploding_model(4)
    graph = capture(model, args, name="exploding")
    graph.meta["factory"] = "tests.executor_helpers:exploding_model"
    plan = plan_with_cuts(graph, clusters[2], ["boom"])
    d = deploy_plan(plan, options=_options(clusters[2]), serving=ServeOptions(max_wait_ms=1))
    futures = [d.submit(torch.randn(16)) for _ in range(6)]
    for f in futures:
        with pytest.raises(StageFailure, match=r"stage 1 on cpu1 failed: RuntimeError: ZeroDivisionError.*"
                                               r"running step 0"):
            f.result(timeout=30)
    with pytest.raises(StageFailure):
        d.close()
    assert d.stats().failed == 6 and not multiprocessing.active_children()


def test_the_deploy_command_serves_and_checks_a_request_stream(clusters: dict[int, Path], tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from pipeplan.cli import main as pipeplan

    plan_with_cuts(capture_model("mlp", 4), clusters[2], ["net.4"]).save(tmp_path / "plan.json")
    rc = pipeplan(["deploy", "--plan", str(tmp_path / "plan.json"), "--cluster", str(clusters[2]), "--requests",
                   "10", "--check", "10", "--max-wait-ms", "1", "--stats", str(tmp_path / "stats.json")])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "10 answers: outputs match the unsplit model" in printed and "latency p50" in printed
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["answered"] == 10 and [s["device"] for s in stats["stages"]] == ["cpu0", "cpu1"]

    # 100 requests are 25 microbatches: enough to calibrate, unless told not to
    for flags, path in (([], tmp_path / "calibrated.json"), (["--no-calibrate"], tmp_path / "not.json")):
        monkeypatch.setenv("PIPEPLAN_CALIBRATION", str(path))
        rc = pipeplan(["deploy", "--plan", str(tmp_path / "plan.json"), "--cluster", str(clusters[2]),
                       "--requests", "100", "--check", "0", "--max-wait-ms", "1", *flags])
        assert rc == 0 and path.is_file() == (not flags)
        assert ("calibration (" in capsys.readouterr().out) == (not flags)


def test_a_drained_deployment_feeds_its_stage_times_to_calibration(clusters: dict[int, Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """As a run does: each stage's measured compute against its prediction goes to the calibration
    store when the deployment closes, so later plans can use it (--costmodel calibrated:…)."""
    from pipeplan.costmodel.calibration import CalibrationStore

    monkeypatch.setenv("PIPEPLAN_CALIBRATION", str(tmp_path / "calibration.json"))
    plan = plan_with_cuts(capture_model("mlp", 4), clusters[2], ["net.4"])
    with deploy_plan(plan, options=_options(clusters[2]), serving=ServeOptions(max_wait_ms=1)) as d:
        futures = [d.submit(torch.randn(256)) for _ in range(120)]
        for f in futures:
            f.result(timeout=30)
        served = d.stats()
    assert served.microbatches >= 30
    assert len(d.calibration_notes) == 1 and d.calibration_notes[0].startswith("calibration ("), d.calibration_notes
    recorded = CalibrationStore(tmp_path / "calibration.json").observations()
    assert len(recorded) == 2  # one per stage
    for o, stage in zip(recorded, served.stages, strict=True):
        assert o.measured == pytest.approx(stage.compute, rel=0.2) and o.predicted > 0 and o.model == "mlp"
