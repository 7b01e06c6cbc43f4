"""A model built on the meta device (the zoo's LLM-scale models) can be planned, not run: the
executor says so before starting any process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from pipeplan.costmodel.capture import capture
from pipeplan.executor import RunOptions, run_plan
from pipeplan.executor.errors import PlanMismatchError
from tests.executor_helpers import cpu_cluster, plan_with_cuts


def test_a_meta_device_model_is_refused_with_the_reason(tmp_path: Path) -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(2, 8, device="meta")
    graph = capture(model, (x,))  # planning needs shapes only
    cluster = cpu_cluster(tmp_path / "c.yaml", 2)
    plan = plan_with_cuts(graph, cluster, ["2"])
    with pytest.raises(PlanMismatchError, match=r"built on the meta device \('0.weight' has no data\)"):
        run_plan(plan, model, (x,), options=RunOptions(cluster=str(cluster)))
