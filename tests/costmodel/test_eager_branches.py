"""Capture exports the branch eager runs where a model's code asks whether it is being exported
(``costmodel/capture/eager_branches.py``), and the branch written for export when eager's cannot be exported."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from pipeplan.costmodel.capture import capture_program
from pipeplan.executor.stages import split_program


def is_torchdynamo_exporting() -> bool:  # as transformers' models import it: a global of the model's module
    return torch.compiler.is_exporting()


def is_torchdynamo_compiling() -> bool:
    return torch.compiler.is_compiling()


def _ops(captured) -> list[str]:
    return [op for la in captured.graph.layers for op in la.ops]


class _Solve(nn.Module):
    """Eager solves the unit lower-triangular system in one call; exported, row by row (as the gated delta rule)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        lower = torch.tril(a, -1) + torch.eye(a.shape[-1])
        if not is_torchdynamo_exporting():
            return torch.linalg.solve_triangular(lower, b, upper=False, unitriangular=True)
        rows = [b[0]]
        for i in range(1, b.shape[0]):
            rows.append(b[i] - (lower[i, :i, None] * torch.stack(rows)).sum(0))
        return torch.stack(rows)


class _CheckedWhenEager(nn.Module):
    """Eager checks a value export cannot know (so eager's branch cannot be exported)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not is_torchdynamo_compiling() and bool((x > 100).any()):
            raise ValueError("values above 100")
        return x * 2


def test_the_graph_holds_the_branch_eager_runs_and_the_flags_are_restored() -> None:
    a, b = torch.randn(12, 12), torch.randn(12, 3)
    captured = capture_program(_Solve().eval(), (a, b))
    ops = _ops(captured)
    assert "aten.linalg_solve_triangular" in ops and "aten.stack" not in ops and len(ops) < 10
    (stage,) = split_program(captured, [[la.name for la in captured.graph.layers]])
    with torch.no_grad():
        assert torch.equal(stage.module(a, b)[0], _Solve()(a, b))
    assert globals()["is_torchdynamo_exporting"] is is_torchdynamo_exporting  # this module's own again
    assert is_torchdynamo_exporting.__name__ == "is_torchdynamo_exporting"


def test_a_branch_eager_cannot_export_is_exported_as_written_for_export(caplog: pytest.LogCaptureFixture) -> None:
    x = torch.randn(4, 5)
    with caplog.at_level(logging.INFO, logger="pipeplan.costmodel.capture"):
        captured = capture_program(_CheckedWhenEager().eval(), (x,))
    assert _ops(captured) == ["aten.mul"]
    assert "exporting _CheckedWhenEager with eager's branches failed" in caplog.text
    assert f"{__name__}.is_torchdynamo_compiling" in caplog.text


def test_a_gated_delta_rule_decoder_is_captured_as_eager_runs_it_and_stages_compute_the_same() -> None:
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextModel

    torch.manual_seed(0)
    config = Qwen3_5TextConfig(vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=32, linear_key_head_dim=16,
                               linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                               layer_types=["linear_attention", "full_attention"], use_cache=False)
    model = Qwen3_5TextModel(config).eval()
    ids = (torch.randint(0, 500, (2, 128)),)
    captured = capture_program(model, ids)
    ops = _ops(captured)
    # eager's triangular solves, not export's forward substitution over the 64-token chunks' rows
    assert ops.count("aten.linalg_solve_triangular") == 2 and ops.count("aten.select") < 50 and len(ops) < 400
    names = [la.name for la in sorted(captured.graph.layers, key=lambda la: la.order)]
    stages = split_program(captured, [names[:len(names) // 2], names[len(names) // 2:]])
    with torch.no_grad():
        want = model(*ids).last_hidden_state
        middle = stages[0].module(*ids)
        got = stages[1].module(*[middle[stages[0].outputs.index(name)] for name in stages[1].inputs])[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
