"""Harvesting for real: borrowed weights held by lender processes and streamed to their stages over gloo.

The plans are scored by the planner's own harvest scorer (:func:`pipeplan.planner.harvest_solve.harvest_plan`)
on chosen cuts and loans, so each test knows which layer is lent by whom; the runs are real stage and
lender processes on this machine's cores, checked against the unsplit model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeplan.cli import main as pipeplan
from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import PlanMismatchError, RunOptions, StageFailure, run_plan, split_program
from pipeplan.executor.launch import free_port
from pipeplan.executor.lender import LenderFailure
from pipeplan.executor.memory_cap import storage_bytes
from pipeplan.executor.source import rebuild
from pipeplan.planner.harvest import HarvestOptions
from pipeplan.planner.harvest_score import Lending
from pipeplan.planner.harvest_solve import harvest_plan
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import PlanOptions, Problem
from tests.executor_helpers import cpu_cluster

pytestmark = pytest.mark.timeout(240)
slow = pytest.mark.slow  # real stage and lender processes: 10–30 s a run on one core

HOST = "host:localhost"  # cpu_cluster's devices sit on host "localhost"
# tinygpt's second half (blocks 2 and 3): the layers with weights of their own (the head is tied to tok)
BLOCK_LAYERS = [f"blocks.{b}.{name}" for b in (2, 3) for name in ("attn.qkv", "attn.proj", "fc", "proj")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cpu_cluster(tmp_path_factory.mktemp("clusters") / "cpu3.yaml", 3)  # cpu2 runs no stage


def loan_plan(model: str, cluster: Path, cut: str, loans: dict[str, str], batch: int = 2, fetch: str = "microbatch",
              microbatches: int = 2, stashes: dict[str, str] | None = None) -> Plan:
    """Two stages (cpu0 up to ``cut``, cpu1 from it) whose layers keep weights with ``loans``' lenders
    (and whose activations stash with ``stashes``' lenders)."""
    graph = capture_model(model, batch)
    problem = Problem(graph, load_cluster(str(cluster)), options=PlanOptions(microbatches=microbatches))
    lending = Lending(problem, HarvestOptions.of(host_memory="1GiB", fetch=fetch, stash=bool(stashes)))
    order = [layer.name for layer in graph.layers]
    dev_of = [0 if i < order.index(cut) else 1 for i in range(len(order))]
    return harvest_plan(lending, dev_of, loans, Certificate("test-loans", "HEURISTIC", 0.0), ["cpu0", "cpu1"],
                        stashes=stashes or {})


def stage_weights(plan: Plan) -> list[int]:
    """Bytes of weights each stage module holds when nothing is lent, measured from its tensors."""
    programs = split_program(rebuild(plan).captured, [s.layers for s in plan.stages])
    return [storage_bytes(p.module.buffers()) for p in programs]


def _options(cluster: Path, **kw: object) -> RunOptions:
    return RunOptions(**{"batches": 2, "warmup": 1, "cluster": str(cluster), "timeout": 30.0, "calibrate": False,
                         **kw})


@slow
def test_a_neighbour_outside_the_pipeline_lends_and_the_borrower_holds_less(cluster: Path) -> None:
    plan = loan_plan("tinygpt", cluster, "blocks.2.ln1", {name: "cpu2" for name in BLOCK_LAYERS})
    assert plan.harvest is not None and {s.device for s in plan.stages} == {"cpu0", "cpu1"}
    report = run_plan(plan, options=_options(cluster))
    assert report is not None and report.check is not None and report.check["ok"], report and report.check
    borrower = report.stages[1].loans
    assert borrower is not None and borrower["layers"] == BLOCK_LAYERS  # in the order the stage runs them
    graph = capture_model("tinygpt", 2)
    lent = sum(graph[name].param_bytes for name in BLOCK_LAYERS)
    # Every microbatch fetches exactly the borrowed weights, from cpu2 alone.
    assert borrower["fetch"]["bytes"] == lent == borrower["fetch"]["predicted_bytes"]
    assert set(borrower["fetch"]["lenders"]) == {"cpu2"} and borrower["fetch"]["seconds"] > 0
    assert borrower["fetch"]["bandwidth"] > 0 and borrower["fetch"]["predicted"] > 0
    # Measured from the tensors: the stage holds its own weights and at most two borrowed layers at a time.
    without = stage_weights(plan)[1]
    memory = borrower["memory"]
    assert memory["home"] == without - lent
    largest = max(graph[name].param_bytes for name in BLOCK_LAYERS)
    assert memory["home"] < memory["peak"] <= memory["home"] + 2 * largest < without
    # The lender is a process of its own that held exactly the lent weights and served every fetch.
    (lender,) = report.lenders
    assert lender["lender"] == "cpu2" and lender["memory"]["home"] == lent
    assert lender["served"]["bytes"] >= (report.batches + report.warmup) * report.microbatches * lent
    assert report.stages[0].loans is not None and report.stages[0].loans["layers"] == []


@slow
def test_a_stage_lends_to_another_and_the_host_tier_lends_to_both(cluster: Path) -> None:
    plan = loan_plan("mlp", cluster, "net.4", {"net.2": HOST, "net.4": "cpu0", "net.6": HOST}, batch=4)
    report = run_plan(plan, options=_options(cluster, schedule="1f1b"))
    assert report is not None and report.check is not None and report.check["ok"]
    first, second = (s.loans for s in report.stages)
    assert first is not None and second is not None
    assert first["layers"] == ["net.2"] and set(first["fetch"]["lenders"]) == {HOST}
    assert second["layers"] == ["net.4", "net.6"] and set(second["fetch"]["lenders"]) == {"cpu0", HOST}
    # Stage 0's own process served net.4 to stage 1, beside running its stage: it holds net.4, not net.2.
    graph = capture_model("mlp", 4)
    net2, net4 = graph["net.2"].param_bytes, graph["net.4"].param_bytes
    assert first["served"]["layers"] == ["net.4"] and first["served"]["bytes"] >= 6 * net4
    assert first["memory"]["home"] == stage_weights(plan)[0] - net2 + net4
    (host,) = report.lenders
    assert host["lender"] == HOST and host["served"]["borrowers"] == [0, 1]
    assert second["fetch"]["lenders"][HOST]["link_bandwidth"] == HarvestOptions().host_bandwidth


@slow
@pytest.mark.parametrize(("caps", "failure", "named"), [
    ({"cpu1": "1MiB"}, StageFailure, r"stage 1 on cpu1 failed: MemoryCapError: cpu1 would hold 1\.01 MiB .*"
                                     r"layer 'net\.4' from cpu2\), over its memory cap of 1 MiB"),
    ({"cpu2": "1MiB"}, LenderFailure, r"lender cpu2 .* failed: MemoryCapError: cpu2 holds 1\.5 MiB of weights "
                                      r"\(lent to other stages\), over its memory cap of 1 MiB"),
])
def test_a_cap_too_small_fails_naming_the_device(cluster: Path, caps: dict[str, str], failure: type[Exception],
                                                 named: str) -> None:
    plan = loan_plan("mlp", cluster, "net.4", {"net.4": "cpu2", "net.6": "cpu2"}, batch=4)
    with pytest.raises(failure, match=named):
        run_plan(plan, options=_options(cluster, memory_caps=caps))


@slow
def test_the_memory_map_caps_by_default(cluster: Path) -> None:
    plan = loan_plan("mlp", cluster, "net.4", {"net.6": "cpu2"}, batch=4)
    assert plan.harvest is not None
    report = run_plan(plan, options=_options(cluster, check_batches=0))
    assert report is not None
    row = {r.device: r for r in plan.harvest.memory}["cpu1"]
    assert report.stages[1].loans is not None
    assert report.stages[1].loans["memory"]["cap"] == row.capacity - row.reserved


@slow
def test_fetching_once_per_batch_serves_each_borrowed_layer_once_a_batch(cluster: Path) -> None:
    # fetch="batch": each borrowing stage runs its 4 microbatches layer-major, so each borrowed layer
    # is fetched once per batch (once per microbatch would be 4 times), and the outputs still match:
    # stage 0 (one loan) sends its batch only once all of it has run, stage 1 borrows 8 layers.
    loans = {"blocks.0.fc": "cpu2", **{name: "cpu2" for name in BLOCK_LAYERS}}
    plan = loan_plan("tinygpt", cluster, "blocks.2.ln1", loans, fetch="batch", microbatches=4)
    assert plan.harvest is not None and plan.harvest.options.fetch == "batch"
    report = run_plan(plan, options=_options(cluster))
    assert report is not None and report.check is not None and report.check["ok"], report and report.check
    first, borrower = (s.loans for s in report.stages)
    assert first is not None and first["fetch"]["fetches"] == 1 / 4
    assert borrower is not None and borrower["fetch"]["mode"] == "batch"
    graph = capture_model("tinygpt", 2)
    lent = sum(graph[name].param_bytes for name in BLOCK_LAYERS)
    # Taken by the forward: 8 layers a batch, 2 a microbatch; a quarter of the weights a microbatch.
    assert borrower["fetch"]["fetches"] == len(BLOCK_LAYERS) / 4
    assert borrower["fetch"]["bytes"] == lent / 4 == borrower["fetch"]["predicted_bytes"]
    # Served by the lender, warm-up included: once per batch, plus at most the two layers the
    # streamer prefetched for a batch that never came.
    (lender,) = report.lenders
    rounds, layers = report.batches + report.warmup, len(loans)
    assert rounds * layers <= lender["served"]["requests"] <= rounds * layers + 2 * 2
    assert lender["served"]["requests"] < rounds * report.microbatches * layers
    # Still at most two borrowed layers held at once.
    largest = max(graph[name].param_bytes for name in BLOCK_LAYERS)
    assert borrower["memory"]["home"] < borrower["memory"]["peak"] <= borrower["memory"]["home"] + 2 * largest


@slow
@pytest.mark.parametrize("keeper", ["cpu2", "cpu0"])
def test_a_stash_lender_holds_the_batch_between_layers_and_the_outputs_match(cluster: Path, keeper: str) -> None:
    # stash=True, M = 4: cpu1 runs its batch layer-major, fetching blocks 2-3's weights from cpu2,
    # and keeps the microbatches it is not computing between layers with cpu2 (which runs no stage),
    # or with cpu0 (whose stage process holds them beside running stage 0).
    plan = loan_plan("tinygpt", cluster, "blocks.2.ln1", {name: "cpu2" for name in BLOCK_LAYERS}, fetch="batch",
                     microbatches=4, stashes={"cpu1": keeper})
    assert plan.harvest is not None and [(s.borrower, s.lender) for s in plan.harvest.stashes] == [("cpu1", keeper)]
    row = {r.device: r for r in plan.harvest.memory}[keeper]
    assert row.lent_stash == plan.harvest.stashes[0].bytes > 0
    report = run_plan(plan, options=_options(cluster))
    assert report is not None and report.check is not None and report.check["ok"], report and report.check
    assert report.check["max_abs_diff"] == 0.0, report.check  # bit for bit
    borrower = report.stages[1].loans
    assert borrower is not None and borrower["stash"]["lender"] == keeper
    stash = borrower["stash"]
    # Each batch, 3 of the 4 microbatches leave at every layer boundary and all come back.
    assert stash["puts"] == stash["gets"] > 0 and (stash["puts"] * 4) % 3 == 0
    assert stash["bytes"] > 0 and stash["bandwidth"] > 0
    # The lender served them: counted in and out, warm-up included, and held at most M - 1 at once.
    (lender,) = report.lenders  # cpu2, with a process of its own, lends the weights either way
    first = report.stages[0].loans
    served = lender["served"]["stash"] if keeper == "cpu2" else (first or {})["served"]["stash"]
    rounds = report.batches + report.warmup
    assert served["puts"] == served["gets"] == stash["puts"] * report.microbatches * rounds
    assert 0 < served["peak"] <= plan.harvest.stashes[0].bytes  # within what the plan charged the lender
    # The borrower's memory, counted against its cap: weights, live activations, stash buffers.
    batch = borrower["memory"]["batch"]
    assert batch["activations"] > 0 and batch["peak"] <= borrower["memory"]["cap"]


@slow
@pytest.mark.parametrize(("stashes", "caps", "failure", "named"), [
    # cpu1's weights (0.5 MiB at most, fetched ones included) fit 1.5 MiB; its batch's live activations do not.
    (None, {"cpu1": "1.5MiB"}, StageFailure,
     r"stage 1 on cpu1 failed: MemoryCapError: cpu1 would hold [\d.]+ MiB \([\d.]+ KiB of weights, "
     r"[\d.]+ (K|M)iB of live "
     r"activations of its layer-major batch of 4 microbatches\) running \w+ of microbatch \d, over its memory cap "
     r"of 1\.5 MiB"),
    # cpu2 lends 1.51 MiB of weights and cannot also hold the stash (0.94 MiB at most) in 2 MiB.
    ({"cpu1": "cpu2"}, {"cpu2": "2MiB"}, LenderFailure,
     r"lender cpu2 .* failed: MemoryCapError: cpu2 would hold [\d.]+ MiB \(1\.51 MiB of weights lent to other "
     r"stages, [\d.]+ KiB of stashed activations, [\d.]+ KiB more from rank 1\), over its memory cap of 2 MiB"),
])
def test_a_cap_too_small_for_the_batch_or_the_stash_fails_naming_the_device(
        cluster: Path, stashes: dict[str, str] | None, caps: dict[str, str], failure: type[Exception],
        named: str) -> None:
    plan = loan_plan("tinygpt", cluster, "blocks.2.ln1", {name: "cpu2" for name in BLOCK_LAYERS}, fetch="batch",
                     microbatches=4, stashes=stashes)
    with pytest.raises(failure, match=named):
        run_plan(plan, options=_options(cluster, memory_caps=caps, timeout=10.0))


def test_a_loan_the_stages_do_not_run_is_refused(cluster: Path) -> None:
    plan = loan_plan("mlp", cluster, "net.4", {"net.6": "cpu2"}, batch=4)
    assert plan.harvest is not None
    plan.harvest.loans[0].borrower = "cpu0"  # net.6 runs on cpu1
    with pytest.raises(PlanMismatchError, match=r"lends layer 'net\.6' to 'cpu0', but no stage on 'cpu0' runs it"):
        run_plan(plan, options=_options(cluster))



@slow
def test_pipeplan_run_prints_the_loans_and_takes_caps(cluster: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    plan = loan_plan("mlp", cluster, "net.4", {"net.2": "cpu2", "net.6": HOST}, batch=4)
    plan.save(tmp_path / "plan.json")
    out = tmp_path / "run.json"
    rc = pipeplan(["run", "--plan", str(tmp_path / "plan.json"), "--cluster", str(cluster), "--batches", "2",
                   "--memory-cap", "cpu0=3MiB", "--report", str(out), "--no-calibrate"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "outputs match the unsplit model" in printed and "borrowed weights (per microbatch)" in printed
    report = json.loads(out.read_text())
    assert report["stages"][0]["loans"]["memory"]["cap"] == 3 * 2**20
    assert sorted(x["lender"] for x in report["lenders"]) == ["cpu2", HOST]
    assert pipeplan(["run", "--plan", str(tmp_path / "plan.json"), "--cluster", str(cluster),
                     "--memory-cap", "gpu7=1GiB"]) == 2
    assert "--memory-cap names 'gpu7', which cluster" in capsys.readouterr().err


@slow
def test_torchrun_starts_the_lender_as_a_rank_of_its_own(cluster: Path, tmp_path: Path) -> None:
    plan = loan_plan("mlp", cluster, "net.4", {"net.4": "cpu2", "net.6": "cpu0"}, batch=4)
    plan.save(tmp_path / "plan.json")

    def torchrun(processes: int) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes), "--master-port",
               str(free_port()), "-m", "pipeplan.executor", "--plan", str(tmp_path / "plan.json"), "--cluster",
               str(cluster), "--batches", "2", "--no-calibrate", "--report", str(tmp_path / "run.json")]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=200, cwd=Path(__file__).parents[2])

    done = torchrun(3)  # two stages and cpu2, which lends and runs no stage
    assert done.returncode == 0, done.stderr[-3000:]
    assert "outputs match the unsplit model" in done.stdout
    report = json.loads((tmp_path / "run.json").read_text())
    assert [x["lender"] for x in report["lenders"]] == ["cpu2"]
    assert set(report["stages"][1]["loans"]["fetch"]["lenders"]) == {"cpu0", "cpu2"}
    wrong = torchrun(2)
    assert wrong.returncode != 0 and "2 stages and 1 lender that runs no stage" in wrong.stderr
