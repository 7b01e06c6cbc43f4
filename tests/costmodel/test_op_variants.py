"""Layers named by the operator that sets their cost: the tanh-approximated GELU is told apart from the exact
one (a cost model that never saw it prices it as before), and a convolution whose module first works on its
weights (BiT's weight standardisation) is named by its convolution."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pipeplan.costmodel.capture import capture
from pipeplan.costmodel.dataset import main_op
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.layerspecs import parse_spec
from pipeplan.costmodel.learned import LearnedCostModel
from pipeplan.costmodel.profile import targets_from_specs
from pipeplan.costmodel.registry import SHIPPED, load_cost_model
from tests.reference_device import reference_device


class TwoGelus(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32)
        self.exact = nn.GELU()
        self.tanh = nn.GELU(approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tanh(self.proj(self.exact(x)))


class StandardisedConv(nn.Conv2d):
    """BiT's convolution, cut down: the weight is normalised in every forward before it convolves."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None, training=True,
                         momentum=0.0, eps=1e-8).reshape_as(self.weight)
        return F.conv2d(x, w, self.bias, self.stride, self.padding)


def test_capture_names_the_tanh_gelu_apart_from_the_exact_one() -> None:
    graph = capture(TwoGelus().eval(), (torch.randn(2, 16, 32),))
    ops = {layer.name: main_op(layer) for layer in graph.layers}
    assert ops == {"exact": "aten.gelu", "proj": "aten.linear", "tanh": "aten.gelu[tanh]"}
    # a graph file keeps the variant
    assert [la.ops for la in ModelGraph.from_json(graph.to_json()).layers] == [la.ops for la in graph.layers]


def test_the_sweep_times_a_tanh_gelu_by_key() -> None:
    (target,) = targets_from_specs([parse_spec("activation:b=2,c=16,hw=8,rank=3,op=7")])
    assert main_op(target.layer) == "aten.gelu[tanh]"
    (exact,) = targets_from_specs([parse_spec("activation:b=2,c=16,hw=8,rank=3,op=6")])
    assert main_op(exact.layer) == "aten.gelu"


def test_a_model_that_never_saw_the_variant_prices_it_as_its_base_operator() -> None:
    graph = capture(TwoGelus().eval(), (torch.randn(2, 16, 32),))
    exact, tanh = (next(la for la in graph.layers if la.name == name) for name in ("exact", "tanh"))
    assert (exact.input_shapes, exact.bytes_read) == (tanh.input_shapes, tanh.bytes_read)
    for shipped in SHIPPED:
        model = load_cost_model(f"learned-{shipped.name}")
        assert isinstance(model, LearnedCostModel)
        if "aten.gelu[tanh]" in model.vocabulary["main_op"]:
            continue  # this one was profiled on it
        device = reference_device(model)
        assert model.layer_times([tanh], device, check_cpu=False) == model.layer_times([exact], device,
                                                                                          check_cpu=False)


def test_a_weight_standardised_convolution_is_named_by_its_convolution() -> None:
    graph = capture(StandardisedConv(8, 16, 3, padding=1).eval(), (torch.randn(2, 8, 12, 12),))
    (layer,) = graph.layers
    assert layer.kind == "conv" and layer.ops.index("aten.batch_norm") < layer.ops.index("aten.conv2d")
    assert main_op(layer) == "aten.conv2d"
