"""Activations beyond the 2-D ReLU and GELU: swept on the 3-D and 4-D maps models apply them to, so a cost
model prices MobileNet's ReLU6 or a gated MLP's SiLU from measurements of that very operator."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipeplan.costmodel.capture import capture
from pipeplan.costmodel.dataset import layer_features, main_op
from pipeplan.costmodel.gpu_sweep import gpu_sweep
from pipeplan.costmodel.layerspecs import ACTIVATIONS, activation_shape, default_sweep, parse_spec
from pipeplan.costmodel.profile import targets_from_specs


def test_the_sweep_draws_every_activation_on_both_ranks() -> None:
    specs = [s for s in default_sweep(per_kind=80) if s.kind == "activation"]
    assert len(specs) == 80 and len({s.key for s in specs}) == 80
    params = [dict(s.params) for s in specs]
    drawn = set(range(len(ACTIVATIONS) - 1))  # all but the last, the tanh GELU, given by key only
    assert {p["op"] for p in params} == drawn and {p["rank"] for p in params} == {3, 4}
    for spec, p in zip(specs[:12], params[:12], strict=True):
        module, (x,) = spec.build()
        assert isinstance(module, ACTIVATIONS[p["op"]][1]) and x.dim() == p["rank"]
        assert x.numel() == p["b"] * p["c"] * p["hw"] ** 2 <= 16 * 2**20
        with torch.no_grad():
            assert module(x).shape == x.shape


class DepthwiseBlock(nn.Module):
    """MobileNetV2's depthwise step, cut down: a depthwise convolution, batch norm, then ReLU6 (a leaf
    module of its own, as ``transformers`` builds it)."""

    def __init__(self, width: int = 24) -> None:
        super().__init__()
        self.conv = nn.Conv2d(width, width, 3, padding=1, groups=width, bias=False)
        self.norm = nn.BatchNorm2d(width)
        self.act = nn.ReLU6()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.conv(x)))


def test_a_swept_relu6_has_the_features_of_a_mobilenets() -> None:
    graph = capture(DepthwiseBlock().eval(), (torch.randn(2, 24, 28, 28),))
    captured = next(la for la in graph.layers if la.name == "act")
    (swept,) = targets_from_specs([parse_spec("activation:b=2,c=24,hw=28,rank=4,op=0")])
    assert (captured.kind, main_op(captured)) == ("activation", "aten.hardtanh")
    # every feature a cost model reads of the layer is the same: what it was measured as is what it prices
    assert layer_features(swept.layer) == layer_features(captured)


@pytest.mark.parametrize("key, op, shape", [
    ("activation:b=2,c=256,hw=8,rank=3,op=1", "aten.silu", [2, 64, 256]),  # a gated MLP's SiLU on 64 tokens
    ("activation:b=4,c=96,hw=14,rank=4,op=2", "aten.hardswish", [4, 96, 14, 14]),  # MobileNetV3, LeViT
    ("activation:b=1,c=64,hw=7,rank=4,op=3", "aten.sigmoid", [1, 64, 7, 7]),  # a squeeze-excitation gate
])
def test_each_swept_activation_is_its_own_operator(key: str, op: str, shape: list[int]) -> None:
    spec = parse_spec(key)
    (target,) = targets_from_specs([spec])
    assert list(activation_shape(dict(spec.params))) == shape
    assert (target.layer.kind, main_op(target.layer), target.layer.input_shapes) == ("activation", op, [shape])
    assert target.layer.bytes_written == 4 * torch.Size(shape).numel()


def test_gpu_activations_bound_their_input() -> None:
    specs = gpu_sweep(per_kind=24, kinds=("activation",))
    assert len(specs) == 24
    for spec in specs:
        p = dict(spec.params)
        assert 4 * p["b"] * p["c"] * p["hw"] ** 2 <= 8 * 2**30 and p["rank"] in (3, 4)
