"""Chains of pointwise operators in the sweep: each is one layer with the features a real model's module of
that form gets, so a cost model prices DAC's Snake or Llama's RMSNorm from measurements of that very chain."""

from __future__ import annotations

import pytest
import torch

from pipeplan.costmodel.capture import capture
from pipeplan.costmodel.dataset import layer_features, main_op
from pipeplan.costmodel.gpu_sweep import gpu_sweep
from pipeplan.costmodel.layerspecs import default_sweep, parse_spec
from pipeplan.costmodel.pointwise_chains import CHAINS
from pipeplan.costmodel.profile import targets_from_specs


def test_the_sweep_draws_every_chain_within_its_bound() -> None:
    specs = [s for s in default_sweep(per_kind=120) if s.kind == "pointwise"]
    assert len(specs) == 120 and len({s.key for s in specs}) == 120
    assert {dict(s.params)["chain"] for s in specs} == set(range(len(CHAINS)))
    for spec in specs[:20]:
        p = dict(spec.params)
        assert p["b"] * p["c"] * p["t"] <= 16 * 2**20
        module, inputs = spec.build()
        with torch.no_grad():
            out = module(*inputs)
        # every chain keeps the shape of its main input: it is glue between layers, not a layer that resizes
        assert out.shape == max(inputs, key=lambda x: x.numel()).shape


def _without_module_type(features: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in features.items() if k != "module_type"}


def test_a_swept_snake_has_the_features_of_dacs() -> None:
    from transformers.models.dac.modeling_dac import Snake1d

    graph = capture(Snake1d(8).eval(), (torch.randn(2, 8, 1600),))
    (captured,) = graph.layers
    (swept,) = targets_from_specs([parse_spec("pointwise:b=2,c=8,t=1600,chain=0")])
    assert (captured.kind, main_op(captured), captured.kernels) == ("elementwise", "aten.add", 7)
    # what it was measured as is what it prices: kind, first operator, kernels, bytes, shapes
    assert _without_module_type(layer_features(swept.layer)) == _without_module_type(layer_features(captured))


def test_a_swept_rmsnorm_has_the_features_of_llamas() -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    graph = capture(LlamaRMSNorm(128).eval(), (torch.randn(2, 64, 128),))
    (captured,) = graph.layers
    (swept,) = targets_from_specs([parse_spec("pointwise:b=2,c=128,t=64,chain=1")])
    assert (swept.layer.kind, main_op(swept.layer)) == (captured.kind, main_op(captured)) == ("layernorm", "aten.pow")
    assert (swept.layer.bytes_read, swept.layer.bytes_written) == (captured.bytes_read, captured.bytes_written)
    assert swept.layer.input_shapes == captured.input_shapes == [[2, 64, 128]]


@pytest.mark.parametrize("chain, kind, op, kernels", [
    (2, "elementwise", "aten.mul", 5),  # rotary: mul, neg, cat, mul, add
    (6, "activation", "aten.mul", 8),  # GPT-2's GELU written out
    (7, "other", "aten.softplus", 3),  # exp(softplus(Δ)·A)
    (8, "elementwise", "aten.add", 1),  # a residual add
])
def test_each_chain_is_one_layer_of_its_own_operators(chain: int, kind: str, op: str, kernels: int) -> None:
    (target,) = targets_from_specs([parse_spec(f"pointwise:b=2,c=64,t=128,chain={chain}")])
    layer = target.layer
    assert (layer.kind, main_op(layer), layer.kernels, layer.flops) == (kind, op, kernels, 0)
    assert layer.bytes_written >= 4 * 2 * 64 * 128  # at least its output, one fp32 value per element


def test_a_chain_that_does_not_exist_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"pointwise chain 10 does not exist: choose 0–9 \(0 snake, 1 rmsnorm"):
        parse_spec("pointwise:b=1,c=8,t=8,chain=10").build()


def test_gpu_chains_bound_their_input() -> None:
    specs = gpu_sweep(per_kind=24, kinds=("pointwise",))
    assert len(specs) == 24
    for spec in specs:
        p = dict(spec.params)
        assert 4 * p["b"] * p["c"] * p["t"] <= 8 * 2**30 and p["t"] >= 128
