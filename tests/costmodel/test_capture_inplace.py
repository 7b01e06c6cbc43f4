"""In-place writes under export: no cut the layer DAG allows may reorder a write and a read of one tensor.

``torch.export`` keeps ``buf[..., i] = …`` as ``copy_`` into a view, and ``x.mul_(2)`` as ``mul_``: an
operator that writes a tensor another operator read earlier, with no data edge between them. Kimi Linear's
delta rule (forward substitution into slices) computed garbage when cut at leaf granularity. Every cut the
captured DAG permits must compute the model's outputs, exactly.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeplan.costmodel.capture import capture_program
from pipeplan.costmodel.capture.inplace import kept_together
from tests.costmodel.allowed_cuts import every_allowed_cut


class WriteAfterRead(nn.Module):
    """One module reads ``buf``; then a slice of ``buf`` is overwritten, and ``buf`` scaled in place."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        buf = x.clone()
        head = buf[:, :4]  # a view, read after its base is written
        r = self.a(buf)
        buf[:, 4:] = self.b(x)[:, 4:]
        buf.mul_(2)
        return r + buf + head.sum(-1, keepdim=True)


class Halve(nn.Module):
    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return t * 0.5


class ForwardSubstitution(nn.Module):
    """Rows of a lower-triangular system rewritten in place, each from the rows before it, as ``transformers``
    solves the delta rule under export; a module reads each row (one layer for its five calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)
        self.halve = Halve()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        system = self.proj(x).tril(-1)
        for i in range(1, 6):
            row = self.halve(system[..., i, :i])
            system[..., i, :i] = row + (row.unsqueeze(-2) @ system[..., :i, :i]).squeeze(-2)
        return (system + torch.eye(6)) @ x


class FilledBySlices(nn.Module):
    """A buffer made empty, filled slice by slice from two modules, read whole by a third (multi-head latent
    attention's keys in DeepSeek-V2 and Kimi Linear): the reader takes the buffer, not the writes' results."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 4)
        self.b = nn.Linear(8, 4)
        self.c = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = x.new_empty(x.shape[0], 8)
        keys[:, :4] = self.a(x)
        keys[:, 4:] = self.b(x)
        return self.c(keys)


def test_a_write_never_moves_before_an_earlier_read_of_its_tensor() -> None:
    torch.manual_seed(0)
    assert every_allowed_cut(WriteAfterRead(), torch.randn(3, 8)) == []


def test_forward_substitution_into_slices_stays_exact_under_every_cut() -> None:
    torch.manual_seed(0)
    assert every_allowed_cut(ForwardSubstitution(), torch.randn(2, 6, 6)) == []


def test_a_model_without_in_place_writes_keeps_its_layers() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    assert [la.name for la in capture_program(model, (torch.randn(2, 4),)).graph.layers] == ["0", "1", "2"]


def test_a_buffer_filled_by_slices_is_read_only_after_every_write() -> None:
    torch.manual_seed(0)
    assert every_allowed_cut(FilledBySlices(), torch.randn(3, 8)) == []


def test_each_operator_in_its_own_layer_the_writes_their_views_and_the_reader_are_kept_together() -> None:
    program = torch.export.export(FilledBySlices().eval(), (torch.randn(3, 8),), strict=False)
    ops = [n for n in program.graph.nodes if n.op == "call_function"]
    own = {n.name: i for i, n in enumerate(ops)}  # no layer orders anything yet
    # the buffer's creator stays apart: it reaches them as one tensor
    assert kept_together(ops, own.get, lambda layer: set()) == [{"slice_1", "copy_", "slice_2", "copy__1", "linear_2"}]
    # with every operator in one layer, nothing is left to join
    assert kept_together(ops, lambda name: 0, lambda layer: set()) == []
