"""Deployments of plans that borrow memory: lenders as deployment processes, borrowed weights
streamed to their stages over gloo as a run streams them, answers against the unsplit model; and
the harvest plans a deployment refuses (to switch to one, or one that fetches once per batch).

The harvesting plans are scored by the planner's own harvest scorer on chosen cuts and loans, as
``tests/executor/test_executor_harvest.py`` makes them: mlp on cpu0 (up to net.4) and cpu1, with
net.2's weights kept by cpu2 (a device outside the pipeline) and net.6's by the host's memory.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import PlanMismatchError, RunOptions
from pipeplan.executor.deploy import Deployment, ServeOptions, deploy_plan
from pipeplan.executor.deploy_loans import check_servable
from pipeplan.executor.deploy_options import refuse_loans
from pipeplan.executor.source import rebuild
from pipeplan.planner.harvest import HarvestOptions
from pipeplan.planner.harvest_score import Lending
from pipeplan.planner.harvest_solve import harvest_plan
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import PlanOptions, Problem
from tests.cli_run import run
from tests.executor_helpers import cpu_cluster, plan_with_cuts

pytestmark = pytest.mark.timeout(180)

HOST = "host:localhost"  # cpu_cluster's devices sit on host "localhost"
LOANS = {"net.2": "cpu2", "net.6": HOST}
SWITCH_REFUSED = r"borrows memory \(its harvest section keeps the weights of 2 layers \(net\.2, net\.6\) on cpu2, " \
                 r"host:localhost\), which a deployment cannot switch to"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cpu_cluster(tmp_path_factory.mktemp("clusters") / "cpu3.yaml", 3)  # cpu2 runs no stage


def _loan_plan(cluster: Path, fetch: str = "microbatch", loans: dict[str, str] = LOANS) -> Plan:
    graph = capture_model("mlp", 4)
    problem = Problem(graph, load_cluster(str(cluster)), options=PlanOptions(microbatches=2))
    lending = Lending(problem, HarvestOptions.of(host_memory="1GiB", fetch=fetch))
    order = [layer.name for layer in graph.layers]
    dev_of = [0 if i < order.index("net.4") else 1 for i in range(len(order))]
    return harvest_plan(lending, dev_of, loans, Certificate("test-loans", "HEURISTIC", 0.0), ["cpu0", "cpu1"])


@pytest.fixture(scope="module")
def harvesting(cluster: Path) -> Plan:
    plan = _loan_plan(cluster)
    assert plan.harvest is not None and {(x.layer, x.lender) for x in plan.harvest.loans} == set(LOANS.items())
    return plan


def _plain(cluster: Path) -> Plan:
    return plan_with_cuts(capture_model("mlp", 4), cluster, ["net.4"])


def _options(cluster: Path, **kw: object) -> RunOptions:
    return RunOptions(**{"cluster": str(cluster), "timeout": 20.0, "calibrate": False, **kw})


def _answers(d: Deployment, samples: torch.Tensor) -> list[torch.Tensor]:
    futures = [d.submit(s) for s in samples]
    return [f.result(timeout=60) for f in futures]


def _assert_same(answers: list[torch.Tensor], model: torch.nn.Module, samples: torch.Tensor) -> None:
    with torch.no_grad():
        expected = model(samples)
    # the same operators on the same weights, but not the same shapes: one sample at a time against the
    # whole batch at once, and a CPU's matmul kernels may sum in another order for another shape (on the
    # Xeon of family 6, model 207 the last bits differ), so equal up to fp32 reduction order
    scale = float(expected.abs().max())
    for got, want in zip(answers, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * scale)


def _lent_bytes() -> dict[str, int]:
    graph = capture_model("mlp", 4)
    return {layer: graph[layer].param_bytes for layer in LOANS}


def test_a_deployment_streams_borrowed_weights_from_its_lender_processes(cluster: Path, harvesting: Plan,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    model = rebuild(harvesting).model
    samples = torch.randn(24, 256)
    with deploy_plan(harvesting, options=_options(cluster, timeout=2.0), serving=ServeOptions(max_wait_ms=1)) as d:
        names = sorted(p.name for p in multiprocessing.active_children())
        assert names == [f"pipeplan-deploy-{x}" for x in ("cpu0", "cpu1", "cpu2", HOST)]
        first = _answers(d, samples[:12])
        time.sleep(3.0)  # idle for longer than any transfer may wait: a lender waits for requests regardless
        second = _answers(d, samples[12:])
        # A live switch moves no lent weights: switching to a harvest plan is refused, and so is a
        # re-plan that would pick one; the deployment keeps serving its layout.
        with pytest.raises(PlanMismatchError, match="the plan " + SWITCH_REFUSED):
            d.switch(harvesting)
        monkeypatch.setattr("pipeplan.planner.replan.replan", lambda *a, **k: harvesting)
        with pytest.raises(PlanMismatchError, match="the re-planned layout " + SWITCH_REFUSED):
            d.replan(load_cluster(str(cluster)))
        monkeypatch.undo()
        third = _answers(d, samples[:4])
        # Switching away: the lenders stop, their weights come back from the deployment's copy.
        record = d.switch(_plain(cluster), why="away from borrowing")
        assert sorted(record.stopped) == ["cpu2", HOST]
        assert record.bytes_reloaded == sum(_lent_bytes().values()) and record.bytes_sent == 0
        fourth = _answers(d, samples[4:8])
        stats = d.stats()
    assert d.failure is None and stats.answered == 32 and stats.failed == 0
    _assert_same(first + second, model, samples)
    _assert_same(third + fourth, model, samples[:8])
    assert not multiprocessing.active_children()

    assert d.totals is not None
    totals = {t["device"]: t for t in d.totals}
    assert set(totals) == {"cpu0", "cpu1", "cpu2", HOST}
    lent = _lent_bytes()
    for device, layer, lender in (("cpu0", "net.2", "cpu2"), ("cpu1", "net.6", HOST)):
        # Every step of the first layout fetched the borrowed layer, from its lender alone.
        fetched = totals[device]["loans"]["fetched"]
        assert set(fetched["lenders"]) == {lender} and fetched["bytes"] == fetched["fetches"] * lent[layer]
        assert 7 <= fetched["fetches"] < totals[device]["steps"]  # 28 samples in 4s: 7 microbatches at least
        # The lender held exactly the lent weights (measured), and served at least every fetch.
        held = totals[lender]["lent"]
        assert held["memory"]["home"] == lent[layer] and held["served"]["layers"] == [layer]
        assert held["served"]["requests"] >= fetched["fetches"]
        # The plan's memory map capped them.
        assert held["memory"]["cap"] is not None and totals[device]["loans"]["memory"]["cap"] is not None
        assert totals[lender]["stage"] is None


def test_a_stage_lends_from_its_own_process_and_the_deployment_closes_borrowing(cluster: Path) -> None:
    # cpu0 runs stage 0 and keeps stage 1's net.4 beside it; stage 1's net.6 stays with the host.
    plan = _loan_plan(cluster, loans={"net.4": "cpu0", "net.6": HOST})
    model = rebuild(plan).model
    samples = torch.randn(12, 256)
    with deploy_plan(plan, options=_options(cluster), serving=ServeOptions(max_wait_ms=1)) as d:
        answers = _answers(d, samples)
    _assert_same(answers, model, samples)
    assert d.failure is None and d.totals is not None and not multiprocessing.active_children()
    totals = {t["device"]: t for t in d.totals}
    assert set(totals) == {"cpu0", "cpu1", HOST}  # no process for a lender that runs a stage
    graph = capture_model("mlp", 4)
    served, fetched = totals["cpu0"]["loans"]["served"], totals["cpu1"]["loans"]["fetched"]
    assert served["layers"] == ["net.4"] and served["borrowers"] == [1]
    assert fetched["lenders"]["cpu0"]["bytes"] == fetched["lenders"]["cpu0"]["fetches"] * graph["net.4"].param_bytes
    assert set(fetched["lenders"]) == {"cpu0", HOST} and fetched["lenders"]["cpu0"]["fetches"] >= 3
    assert served["requests"] >= fetched["lenders"]["cpu0"]["fetches"]


def test_a_lender_process_that_dies_is_replanned_around(cluster: Path, harvesting: Plan) -> None:
    model = rebuild(harvesting).model
    samples = torch.randn(16, 256)
    with deploy_plan(harvesting, options=_options(cluster, timeout=3.0), serving=ServeOptions(max_wait_ms=1)) as d:
        first = _answers(d, samples[:8])
        victim = next(p for p in multiprocessing.active_children() if p.name == "pipeplan-deploy-cpu2")
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        # cpu0 holds net.2 prefetched for its next two steps; the supervisor notices the death meanwhile.
        deadline = time.monotonic() + 60
        while not d.stats().switches and time.monotonic() < deadline:
            time.sleep(0.05)
        second = _answers(d, samples[8:])
        stats = d.stats()
    _assert_same(first + second, model, samples)
    assert d.failure is None and stats.answered == 16 and stats.failed == 0
    [record] = stats.switches
    assert record.why.startswith("recovery: cpu2 lost"), record.why
    assert "cpu2" not in record.devices_after and record.bytes_reloaded >= _lent_bytes()["net.2"]
    assert not multiprocessing.active_children()


def test_what_a_deployment_refuses(cluster: Path, harvesting: Plan) -> None:
    batched = _loan_plan(cluster, fetch="batch")
    with pytest.raises(PlanMismatchError, match=r"fetches borrowed weights once per batch .* a deployment runs one "
                                                r"microbatch a step\. Run it with `pipeplan run`"):
        deploy_plan(batched, options=_options(cluster))
    with pytest.raises(PlanMismatchError, match=r"a deployment takes no memory caps .* `pipeplan run`"):
        deploy_plan(_plain(cluster), options=_options(cluster, memory_caps={"cpu0": "1GiB"}))
    assert not multiprocessing.active_children()
    # A harvest section that lends nothing is any plan, to start with or to switch to.
    assert harvesting.harvest is not None
    nothing = dataclasses.replace(harvesting, harvest=dataclasses.replace(harvesting.harvest, loans=[]))
    check_servable(nothing)
    refuse_loans(nothing)
    refuse_loans(_plain(cluster))
    with pytest.raises(PlanMismatchError, match="the plan " + SWITCH_REFUSED):
        refuse_loans(harvesting)


def test_pipeplan_deploy_serves_a_harvest_plan_and_refuses_the_rest_with_status_2(
        cluster: Path, harvesting: Plan, tmp_path: Path) -> None:
    path = tmp_path / "harvest.json"
    harvesting.save(path)
    served = run("deploy", "--plan", str(path), "--cluster", str(cluster), "--requests", "12", "--check", "12",
                 "--no-calibrate")
    assert served.returncode == 0, served.stderr
    assert "12 answers" in served.stdout and "deployment of 2 stages" in served.stdout, served.stdout
    assert "cpu0 fetched borrowed weights" in served.stdout and f"lender {HOST} held 513 KiB" in served.stdout

    # Switching to it: refused before the deployment starts, not after N requests.
    plain = tmp_path / "plain.json"
    _plain(cluster).save(plain)
    result = run("deploy", "--plan", str(plain), "--cluster", str(cluster), "--requests", "4",
                 "--switch", f"{path}@2")
    assert result.returncode == 2, result.stderr
    assert f"pipeplan deploy: error: --switch {path} borrows memory" in result.stderr, result.stderr
    assert "Deploy it afresh" in result.stderr and "without --harvest" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""

    batched = tmp_path / "batched.json"
    _loan_plan(cluster, fetch="batch").save(batched)
    result = run("deploy", "--plan", str(batched), "--cluster", str(cluster), "--requests", "4")
    assert result.returncode == 2, result.stderr
    assert "pipeplan deploy: error: the plan fetches borrowed weights once per batch" in result.stderr
    assert "--fetch microbatch" in result.stderr and "Traceback" not in result.stderr and result.stdout == ""
    assert not multiprocessing.active_children()
