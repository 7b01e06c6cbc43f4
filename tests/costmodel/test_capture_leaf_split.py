"""A leaf module that runs two or more matmuls is not one layer: GPT-OSS's experts are such a module.

Every row a cost model is fitted on holds one matmul or convolution; a leaf module doing a whole routed
mixture (two grouped matmuls and the routing around them) as one layer was priced at 3.3× its time.
Such a module's operators are grouped as a module with children groups its glue: a layer per chain.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeplan.costmodel.capture import capture_program
from tests.costmodel.allowed_cuts import every_allowed_cut


class Experts(nn.Module):
    """Two weight matrices used by hand, no child module: a leaf that runs two matmuls."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Parameter(torch.randn(8, 16) / 4)
        self.down = nn.Parameter(torch.randn(16, 8) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.nn.functional.gelu(x @ self.up)
        return hidden.clamp(-2, 2) @ self.down


class OneMatmul(nn.Module):
    """A weight used by hand once, with a bias and an activation: a leaf that stays one layer."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8) / 4)
        self.bias = nn.Parameter(torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.weight + self.bias)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = OneMatmul()
        self.experts = Experts()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.experts(self.proj(x))


def test_a_leaf_running_two_matmuls_becomes_a_layer_per_matmul() -> None:
    torch.manual_seed(0)
    graph = capture_program(Block().eval(), (torch.randn(4, 8),)).graph
    heavy = {la.name: [op for op in la.ops if op in ("aten.matmul", "aten.mm")] for la in graph.layers}
    assert heavy["proj"] == ["aten.matmul"]  # one matmul: still the module's one layer
    experts = {name: ops for name, ops in heavy.items() if name.startswith("experts:")}
    assert len(experts) == 2 and all(len(ops) == 1 for ops in experts.values())
    assert "experts" not in heavy
    assert sum(la.flops for la in graph.layers) == 2 * 4 * 8 * 8 + 2 * 4 * 8 * 16 * 2


def test_the_split_layers_cut_exactly() -> None:
    torch.manual_seed(0)
    assert every_allowed_cut(Block(), torch.randn(4, 8)) == []


def test_coarser_granularities_keep_the_module_whole() -> None:
    torch.manual_seed(0)
    graph = capture_program(Block().eval(), (torch.randn(4, 8),), granularity="depth:1").graph
    assert [la.name for la in graph.layers if la.name.startswith("experts")] == ["experts"]
