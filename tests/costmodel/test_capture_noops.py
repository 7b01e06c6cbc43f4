"""Capture drops the conversions eager PyTorch skips: a cast to the dtype a tensor already has."""

from __future__ import annotations

import torch
from torch import nn

from pipeplan.costmodel.capture import CapturedProgram, capture_program
from tests.executor_helpers import run_in_two_stages


class _Scan(nn.Module):
    """A recurrence stepped token by token, casting each step as RecurrentGemma's scan does."""

    def __init__(self, casts: bool) -> None:
        super().__init__()
        self.casts = casts
        self.gate = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, outs = x.new_zeros(x.shape[0], 8), []
        for t in range(x.shape[1]):
            step = x[:, t].type(torch.float32).to(x.device) if self.casts else x[:, t]
            h = torch.sigmoid(self.gate(h)) * h + step
            outs.append(h.to(x.dtype).type_as(step) if self.casts else h)
        return torch.stack(outs, 1).to(torch.float64)  # a real conversion, kept


def _ops(captured: CapturedProgram) -> list[str]:
    return [str(n.target) for n in captured.program.graph.nodes if n.op == "call_function"]


def test_casts_to_the_same_dtype_leave_no_trace_in_the_graph() -> None:
    x = torch.randn(2, 6, 8)
    casting, plain = _Scan(casts=True).eval(), _Scan(casts=False).eval()
    plain.load_state_dict(casting.state_dict())
    with_casts, without = capture_program(casting, (x,)), capture_program(plain, (x,))

    # 6 steps × (type, to, to, type_as) and their metadata checks are gone; the float64 cast stays
    assert _ops(with_casts) == _ops(without)
    assert _ops(with_casts).count("aten.to.dtype") == 1
    assert "aten._assert_tensor_metadata.default" not in _ops(with_casts)
    # so the layers the planner prices are the plain model's: same work, same kernel launches
    assert [(layer.name, layer.flops, layer.bytes_read, layer.bytes_written, layer.kernels)
            for layer in with_casts.graph.layers] == \
           [(layer.name, layer.flops, layer.bytes_read, layer.bytes_written, layer.kernels)
            for layer in without.graph.layers]


def test_the_graph_without_casts_still_computes_the_model() -> None:
    torch.manual_seed(0)
    model, x = _Scan(casts=True).eval(), torch.randn(2, 6, 8)
    with torch.no_grad():
        out, expected = run_in_two_stages(model, x, 5), model(x)
    assert out.dtype == torch.float64
    assert torch.equal(out, expected)


class _ReturnsACast(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.to(torch.float32), (x * 2).to(torch.bfloat16)


def test_a_cast_that_is_an_output_or_changes_the_dtype_is_kept() -> None:
    """The program's signature names its outputs, so a no-op cast returned as one stays; a cast to
    bfloat16 does work."""
    x = torch.randn(2, 4)
    captured = capture_program(_ReturnsACast().eval(), (x,))
    ops = _ops(captured)
    assert ops.count("aten.to.dtype") == 2
    out = captured.program.module()(x)
    assert torch.equal(out[0], x) and out[1].dtype == torch.bfloat16
