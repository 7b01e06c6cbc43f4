"""Helpers for the executor's tests: clusters of this machine's usable cores, plans with chosen cuts, a
captured model run as two stage modules in one process, and a model whose middle layer raises when it runs
(but exports fine)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from pipeplan.costmodel.cluster import Cluster, load_cluster
from pipeplan.costmodel.cluster_detect import write_core_cluster
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.simulate import make_plan


def cpu_cluster(path: Path, devices: int) -> Path:
    """A ``local-cpu``-like spec with ``devices`` one-core devices, on the cores this process may use
    (cycled when there are fewer cores than devices), written to ``path``."""
    return write_core_cluster(path, devices, name=f"test-cpu-{devices}")


def plan_with_cuts(graph: ModelGraph, cluster_path: Path, first_layers: Sequence[str],
                   microbatches: int = 2) -> Plan:
    """A plan (scored by ``make_plan``) whose stage k > 0 starts at layer ``first_layers[k - 1]``."""
    cluster: Cluster = load_cluster(str(cluster_path))
    order = [layer.name for layer in graph.layers]
    bounds = [0, *(order.index(name) for name in first_layers), len(order)]
    assignment = {name: f"cpu{k}" for k in range(len(bounds) - 1) for name in order[bounds[k]:bounds[k + 1]]}
    problem = Problem(graph, cluster, options=PlanOptions(microbatches=microbatches))
    return make_plan(problem, assignment, Certificate("test-cuts", "HEURISTIC", 0.0),
                     order=[f"cpu{k}" for k in range(len(bounds) - 1)])


class _Explode(nn.Module):
    """Divides an integer tensor of zeros by itself: traced by export, raises when it runs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        zero = (x * 0).long()
        return x + (zero // zero).float()


class Exploding(nn.Module):
    """Three layers, ``a``, ``boom``, ``c``; the middle one raises ``ZeroDivisionError`` at run time."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.boom: nn.Module = _Explode()
        self.c = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.boom(self.a(x)))


def run_in_two_stages(model: nn.Module, x: torch.Tensor, cut: int) -> torch.Tensor:
    """``model(x)`` captured and split after its first ``cut`` layers, the two stage modules called in turn:
    the first output."""
    from pipeplan.costmodel.capture import capture_program
    from pipeplan.executor import split_program

    cp = capture_program(model, (x,))
    names = [layer.name for layer in cp.graph.layers]
    values: tuple[torch.Tensor, ...] = (x,)
    for stage in split_program(cp, [names[:cut], names[cut:]]):
        values = stage.module(*values)
    return values[0]


class _IndexedPatches(nn.Module):
    """Pix2Struct's input convention: each float patch starts with its row and column, which index embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.rows, self.cols = nn.Embedding(9, 8), nn.Embedding(9, 8)
        self.proj, self.out = nn.Linear(6, 8), nn.Linear(8, 4)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        rows, cols = patches[..., 0].long(), patches[..., 1].long()
        return self.out(torch.relu(self.proj(patches[..., 2:]) + self.rows(rows) + self.cols(cols)))


def indexed_patches_model(batch_size: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The factory a plan names as ``tests.executor_helpers:indexed_patches_model``: 16 patches of a 4×4 grid,
    rows and columns 1-4 (0 is padding) in the first two of each patch's 8 floats."""
    ids = torch.arange(16)
    places = torch.stack([ids // 4 + 1, ids % 4 + 1], dim=1).float().expand(batch_size, 16, 2)
    return _IndexedPatches().eval(), (torch.cat([places, torch.randn(batch_size, 16, 6)], dim=2),)


def exploding_model(batch_size: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The factory a plan names as ``tests.executor_helpers:exploding_model``."""
    return Exploding().eval(), (torch.randn(batch_size, 16),)


@torch.library.custom_op("pipeplan_test::stall", mutates_args=())
def stall(x: torch.Tensor) -> torch.Tensor:
    """Never finishes (well, after an hour): a stage that hangs.  A custom operator, so that export
    keeps it in the graph and the stage process must import this module to run it."""
    time.sleep(3600)
    return x.clone()


@stall.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _Stall(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.pipeplan_test.stall(x)


def stalling_model(batch_size: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """``tests.executor_helpers:stalling_model``: layers ``a``, ``boom`` (hangs here), ``c``."""
    model = Exploding()
    model.boom = _Stall()
    return model.eval(), (torch.randn(batch_size, 16),)
