"""Capture reports the real work: custom operators, ``torch.cond``, dead layers (issue 16, item 4)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from pipeplan.costmodel.capture import capture, capture_program
from pipeplan.costmodel.capture.ops import _FORMULAS, register_flop_formula
from pipeplan.costmodel.dataset import main_op
from pipeplan.executor import split_program
from tests.executor_helpers import run_in_two_stages

# -- custom operators ------------------------------------------------------------------------


@torch.library.custom_op("pipeplan_test::scaled_mm", mutates_args=())
def _scaled_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x @ w) * 2.0


@_scaled_mm.register_fake
def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[1])


@torch.library.custom_op("pipeplan_test::routed_mm", mutates_args=())
def _routed_mm(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    out, start = x.new_zeros(x.shape[0], w.shape[2]), 0
    for expert, n in enumerate(counts.tolist()):  # needs real values: no body on fake tensors
        out[start:start + n] = x[start:start + n] @ w[expert]
        start += n
    return out


@_routed_mm.register_fake
def _(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[2])


class _Custom(nn.Module):
    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op
        self.proj = nn.Linear(8, 16)
        self.w = nn.Parameter(torch.randn(4, 16, 32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        if self.op == "scaled":
            return torch.ops.pipeplan_test.scaled_mm(h, self.w[0])
        return torch.ops.pipeplan_test.routed_mm(h, self.w, torch.tensor([3, 0, 2, 1]))


@pytest.fixture
def routed_formula() -> Iterator[None]:
    register_flop_formula("pipeplan_test::routed_mm",
                          lambda x, w, counts, out_shape=None: 2 * x[0] * x[1] * w[2])
    yield
    _FORMULAS.pop("pipeplan_test::routed_mm")


def test_custom_op_is_counted_from_its_python_body(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        graph = capture(_Custom("scaled"), (torch.randn(6, 8),))
    assert "aten.linear" in graph["proj"].ops
    assert graph.total_flops == 2 * 6 * 8 * 16 + 2 * 6 * 16 * 32  # proj, then the body's matmul
    assert "uncounted_ops" not in graph.meta and not caplog.records


def test_uncountable_custom_op_is_named_not_silently_free(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        graph = capture(_Custom("routed"), (torch.randn(6, 8),))
    (layer,) = [layer.name for layer in graph.layers if "pipeplan_test.routed_mm" in layer.ops]
    assert graph.meta["uncounted_ops"] == {"pipeplan_test::routed_mm": [layer]}
    assert graph.total_flops == graph["proj"].flops == 2 * 6 * 8 * 16  # the routed matmul: 0, but named
    assert "pipeplan_test::routed_mm" in caplog.text and "register_flop_formula" in caplog.text


def test_registered_formula_counts_a_custom_op(routed_formula: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        graph = capture(_Custom("routed"), (torch.randn(6, 8),))
    assert graph.total_flops == 2 * 6 * 8 * 16 + 2 * 6 * 16 * 32
    assert "uncounted_ops" not in graph.meta and not caplog.records


def test_register_flop_formula_refuses_a_bare_name() -> None:
    with pytest.raises(ValueError, match="namespace::name"):
        register_flop_formula("moe_mm", lambda *a, **k: 0)


class _Fourier(nn.Module):
    """FNet's token mixing (a 2-D FFT of a real input, its real part kept), then a real FFT and its inverse."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.fft.fftn(x, dim=(-2, -1)).real, torch.fft.irfft(torch.fft.rfft(x, dim=-1), n=128, dim=-1)


def test_ffts_are_counted_not_free() -> None:
    graph = capture(_Fourier(), (torch.randn(2, 64, 128),))
    points = 2 * 64 * 128
    # 5·N·log2(n) for a complex transform along dims of n points; a real one (rfft, irfft) half that
    assert graph.total_flops == 5 * points * 13 + 2 * (5 * points * 7 // 2)
    assert "uncounted_ops" not in graph.meta


def test_moe_experts_of_transformers_are_counted() -> None:
    transformers = pytest.importorskip("transformers")
    hidden, inter, experts, top_k, batch, seq = 32, 48, 4, 2, 2, 8
    config = transformers.MixtralConfig(
        hidden_size=hidden, intermediate_size=inter, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=64, max_position_embeddings=32, num_local_experts=experts,
        num_experts_per_tok=top_k, use_cache=False)
    model = transformers.MixtralForCausalLM(config).eval()
    graph = capture(model, (torch.randint(0, 64, (batch, seq)),))
    grouped = [layer for layer in graph.layers if any("grouped_mm" in op for op in layer.ops)]
    rows = batch * seq * top_k  # every token meets top_k experts
    # gate and up projections in one grouped matmul, then the down projection
    assert sorted(layer.flops for layer in grouped) == [2 * rows * inter * hidden, 2 * rows * hidden * 2 * inter]
    assert {layer.kind for layer in grouped} == {"matmul"}
    assert "uncounted_ops" not in graph.meta
    # the fallback the exported graph runs loops over the experts, one mm each: the layer runs that many
    # kernels, and is named by the grouped matmul, not by the transpose before it
    assert [layer.kernels for layer in grouped] == [experts, experts]
    assert {main_op(layer) for layer in grouped} == {"transformers.grouped_mm_fallback"}


class _SortedExperts(nn.Module):
    """Experts whose weights need no transpose, routed inside the module: the sort that orders the tokens by
    expert, their counts and the grouped matmul are one layer (GPT-OSS's kind)."""

    def __init__(self, experts: int = 4, width: int = 16) -> None:
        super().__init__()
        self.experts = experts
        self.weight = nn.Parameter(torch.randn(experts, width, width))
        self.bias = nn.Parameter(torch.randn(experts, width))

    def forward(self, x: torch.Tensor, expert_ids: torch.Tensor) -> torch.Tensor:
        order = torch.sort(expert_ids).indices
        counts = torch.histc(expert_ids.float(), bins=self.experts, min=0, max=self.experts - 1)
        offsets = torch.cumsum(counts, 0).to(torch.int32)
        out = torch.ops.transformers.grouped_mm_fallback(x[order], self.weight, offsets)
        return out + self.bias[expert_ids[order]]


def test_a_layer_that_routes_before_its_grouped_matmul_is_named_by_the_matmul() -> None:
    pytest.importorskip("transformers.integrations.moe")  # registers transformers::grouped_mm_fallback
    graph = capture(_SortedExperts().eval(), (torch.randn(12, 16), torch.randint(0, 4, (12,))))
    [experts] = [layer for layer in graph.layers if "transformers.grouped_mm_fallback" in layer.ops]
    assert experts.ops.index("aten.sort") < experts.ops.index("transformers.grouped_mm_fallback")
    assert main_op(experts) == "transformers.grouped_mm_fallback"  # not a sort of this many kernels
    assert experts.flops == 2 * 12 * 16 * 16 and experts.kernels > 4


# -- torch.cond --------------------------------------------------------------------------------


class _Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.big = nn.Sequential(nn.Linear(4, 16), nn.Linear(16, 4))
        self.small = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pre(x)
        return torch.cond(h.sum() > 0, lambda t: self.big(t), lambda t: self.small(t), (h,))


def test_cond_captures_with_the_costlier_branch() -> None:
    graph = capture(_Branchy(), (torch.randn(2, 4),))
    assert graph["pre"].flops == 2 * 2 * 4 * 4
    # a planner must provision for the branch that may run: the larger one (2·2·4·16 twice)
    assert graph.total_flops == 2 * 2 * 4 * 4 + 2 * (2 * 2 * 4 * 16)
    assert any("cond" in layer.ops for layer in graph.layers)


# -- dead layers -------------------------------------------------------------------------------


class _Dead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.unused, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        self.unused(torch.relu(y))  # computed, never used
        return self.c(y)


class _InPlace(nn.Module):
    """``out[:, :2] = …`` writes into a tensor that is used later: not dead."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        out[:, :2] = self.a(x)[:, :2]
        return out + 1


def test_dead_layers_are_dropped_and_the_program_still_splits() -> None:
    model, x = _Dead().eval(), torch.randn(2, 4)
    graph = capture(model, (x,))
    assert [layer.name for layer in graph.layers] == ["a", "c"]
    assert graph.meta["dropped_dead"] == ["relu", "unused"]
    assert graph.total_flops == 2 * (2 * 2 * 4 * 4)
    torch.testing.assert_close(run_in_two_stages(model, x, 1), model(x))


def test_in_place_writes_are_not_dead() -> None:
    model, x = _InPlace().eval(), torch.randn(3, 4)
    graph = capture(model, (x,))
    assert "a" in graph and graph["a"].flops == 2 * 3 * 4 * 4
    assert "dropped_dead" not in graph.meta
    torch.testing.assert_close(run_in_two_stages(model, x, 1), model(x))


def test_cond_model_runs_split_into_stages() -> None:
    """The branches are subgraphs of the exported program: the stage that calls cond gets them."""
    torch.manual_seed(0)
    model, x = _Branchy().eval(), torch.randn(2, 4)
    captured = capture_program(model, (x,))
    layers = [layer.name for layer in captured.graph.layers]
    first, rest = layers[:1], layers[1:]
    stages = split_program(captured, [first, rest])
    seen = set()
    for _ in range(200):  # random inputs until both branches have run
        x = torch.randn(2, 4) * 3
        with torch.no_grad():
            out = stages[1].module(*stages[0].module(x))
            torch.testing.assert_close(out[0], model(x), rtol=0, atol=0)
            seen.add(bool(model.pre(x).sum() > 0))
        if len(seen) == 2:
            break
    assert seen == {True, False}


def test_a_custom_op_body_that_blocks_is_left_uncounted_not_waited_for() -> None:
    """The stalling op sleeps for an hour: capture gives up on its body and names it."""
    import time as _time

    from tests.executor_helpers import stalling_model

    model, args = stalling_model(2)
    started = _time.monotonic()
    graph = capture(model, args)
    assert _time.monotonic() - started < 30
    assert graph.meta["uncounted_ops"] == {"pipeplan_test::stall": ["boom"]}
