"""`pipeplan plan` on CPU cores with a wake model: the ILP's plan over all the cores against the plan
without the loaded ones, each replayed as run, and the faster one kept (--keep-loaded: the first)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeplan.cli_inputs import read_cluster
from pipeplan.costmodel.registry import load_cost_model
from pipeplan.costmodel.wake import WakeModel
from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor.as_run import plan_as_run
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import Problem
from tests.cli_run import run

MS = 1e-3
ARGS = ("plan", "mlp", "--batch", "64", "--cluster", "local-cpu", "--costmodel", "analytic", "--load", "cpu0=2xcompute")
# a model whose stages are long enough to gain from the loaded core, with one co-runner there
LONGER = ("plan", "tinygpt", "--batch", "8", "--cluster", "local-cpu", "--costmodel", "analytic", "--load",
          "cpu0=1xcompute")


def _wake(recv_delay: float) -> WakeModel:
    return WakeModel(cpu="test cpu", measured_at="2026-11-24", sleeps=[1 * MS, 16 * MS], penalty_fixed=[0.1 * MS] * 2,
                     penalty_rate=[0.0, 0.0], credit={"2xcompute": [1.0 * MS, 1.0 * MS]}, stage_fixed=0.05 * MS,
                     stage_rate=0.1, recv_delay={"2xcompute": recv_delay})


def _printed(stdout: str) -> tuple[dict[str, float], str]:
    """Each candidate's printed samples/s as run, and the one chosen."""
    line = re.sub(r"\s+", " ", stdout)
    found = dict(re.findall(r"(all devices|without the loaded cpu0): \d+ stages? \([^)]*\), about ([\d,.]+) samples/s",
                            line))
    chosen = re.search(r"→ chose (all devices|without the loaded cpu0)", line)
    assert found and chosen is not None, stdout
    return {k: float(v.replace(",", "")) for k, v in found.items()}, chosen.group(1)


def _as_run(plan: Plan, args: tuple[str, ...] = ARGS) -> float:
    problem = Problem(capture_model(args[1], int(args[3])), read_cluster("local-cpu", [args[-1]]),
                      load_cost_model("analytic"), plan.options)
    found = plan_as_run(problem, plan)
    assert found is not None and found[1].cpu == "test cpu"
    return plan.options.microbatches * plan.batch_size / found[0].batch_seconds


def test_without_a_wake_model_the_ilp_plan_is_printed_alone(tmp_path: Path) -> None:
    result = run(*ARGS, "--out", str(tmp_path / "plan.json"))  # the suite runs with PIPEPLAN_WAKE=none
    assert result.returncode == 0, result.stderr
    assert "as run here" not in result.stdout
    assert Plan.load(tmp_path / "plan.json").options.forbid_devices == ()


def test_a_slow_receive_on_the_loaded_core_leaves_it_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A message to the loaded core arrives 30 ms late: the plan over both cores, if it uses cpu0 at
    all, is slower as run than cpu1 alone, and the plan saved is cpu1's, which records cpu0 as forbidden."""
    monkeypatch.setenv("PIPEPLAN_WAKE", str(_wake(30 * MS).save(tmp_path / "wake.json")))
    out = tmp_path / "plan.json"
    result = run(*ARGS, "--out", str(out))
    assert result.returncode == 0, result.stderr
    printed, chosen = _printed(result.stdout)
    kept = run(*ARGS, "--keep-loaded", "--out", str(tmp_path / "kept.json"))
    assert kept.returncode == 0, kept.stderr
    over_all = Plan.load(tmp_path / "kept.json")
    plan = Plan.load(out)
    assert printed["all devices"] == pytest.approx(_as_run(over_all), abs=0.05)
    assert printed["without the loaded cpu0"] == pytest.approx(_as_run(plan if chosen != "all devices" else
                                                                       over_all), abs=0.05)
    assert "cpu0" in over_all.device_order()  # the ILP, pricing compute alone, uses the loaded core
    assert chosen == "without the loaded cpu0"
    assert printed["without the loaded cpu0"] > printed["all devices"]
    # the plan on cpu1 alone, scored on the problem as asked: the options are the user's, not the choice's
    assert plan.device_order() == ["cpu1"] and plan.options.forbid_devices == ()
    assert plan.certificate.status == "FEASIBLE" and plan.certificate.details["as_run"]["chosen"] == chosen
    assert plan.certificate.best_bound == over_all.certificate.best_bound
    assert "kept the plan over all the devices" in re.sub(r"\s+", " ", kept.stdout)


def test_the_plan_over_all_cores_stays_when_it_runs_faster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPEPLAN_WAKE", str(_wake(0.0).save(tmp_path / "wake.json")))
    out = tmp_path / "plan.json"
    result = run(*LONGER, "--out", str(out))
    assert result.returncode == 0, result.stderr
    printed, chosen = _printed(result.stdout)
    assert chosen == "all devices" and printed["all devices"] > printed["without the loaded cpu0"]
    plan = Plan.load(out)
    assert set(plan.device_order()) == {"cpu0", "cpu1"} and plan.options.forbid_devices == ()
    assert _as_run(plan, LONGER) == pytest.approx(printed["all devices"], abs=0.05)
