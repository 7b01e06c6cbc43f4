"""`pipeplan plan` on CPU cores says what the plan should do when run here, waits priced by the wake model."""

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
from pipeplan.planner.problem import PlanOptions, Problem
from tests.cli_run import run

MS = 1e-3


def test_a_cpu_plan_prints_its_throughput_as_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wake = WakeModel(cpu="test cpu", measured_at="2026-11-24", sleeps=[1 * MS, 16 * MS], penalty_fixed=[0.1 * MS] * 2,
                     penalty_rate=[0.0, 0.0], credit={"2×compute": [1.0 * MS, 1.0 * MS]}, stage_fixed=0.05 * MS,
                     stage_rate=0.1)
    out = tmp_path / "plan.json"
    args = ("plan", "mlp", "--batch", "64", "--cluster", "local-cpu", "--costmodel", "analytic", "--load",
            "cpu0=2xcompute", "--out", str(out))
    assert "as run here" not in run(*args).stdout  # no wake model (the suite's default)
    monkeypatch.setenv("PIPEPLAN_WAKE", str(wake.save(tmp_path / "wake.json")))
    result = run(*args)
    assert result.returncode == 0, result.stderr
    printed = re.search(r"wake model of test cpu: about ([\d,.]+) samples/s", result.stdout.replace("\n", ""))
    assert printed is not None, result.stdout
    plan = Plan.load(out)
    problem = Problem(capture_model("mlp", 64), read_cluster("local-cpu", ["cpu0=2xcompute"]),
                      load_cost_model("analytic"), PlanOptions(microbatches=plan.options.microbatches))
    found = plan_as_run(problem, plan)
    assert found is not None
    replay, used = found
    assert used.cpu == "test cpu" and len(replay.computes) == len(plan.stages)
    expected = plan.options.microbatches * plan.batch_size / replay.batch_seconds
    assert float(printed.group(1).replace(",", "")) == pytest.approx(expected, abs=0.05)
    # the bottleneck pays the pipeline's extra (two stages or more), the others their waits too
    if len(plan.stages) > 1:
        slowest = max(range(len(plan.stages)), key=lambda k: plan.stages[k].compute)
        assert replay.computes[slowest] >= plan.stages[slowest].compute * 1.1
