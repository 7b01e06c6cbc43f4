"""Lending a stage's weights, in one process: the cut module, the weights ledger, the caps' syntax.

The runs over gloo are in ``test_executor_harvest.py``; here the cut stage is run with its fetches
answered from the lent tensors themselves, to show that the rewritten graph computes what the
stage did and holds none of the lent weights.
"""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

from pipeplan.costmodel.capture import capture_program
from pipeplan.executor import PlanMismatchError, split_program
from pipeplan.executor.harvest_stream import Fetched, Released
from pipeplan.executor.lending import parse_caps
from pipeplan.executor.loan_cut import cut_loans, live_loans
from pipeplan.executor.memory_cap import MemoryCapError, WeightLedger, storage_bytes
from pipeplan.executor.weight_pack import unpack


class Tied(nn.Module):
    """Two layers that read one weight (``b`` uses ``a``'s), and one of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.c = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x).relu()
        return self.c(h @ self.a.weight.t())


class Reused(nn.Module):
    """Modules called twice: the layers run b, a, c, b@1, a@1."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(self.b(self.c(self.a(self.b(x)))))


class _Local:
    """Answers a cut stage's fetches from the lent tensors, in this process (no lender, no network)."""

    def __init__(self, lent: dict[int, tuple[torch.Tensor, ...]]) -> None:
        self.lent = lent
        self.log: list[str] = []

    def take(self, index: int) -> tuple[torch.Tensor, ...]:
        self.log.append(f"take {index}")
        return self.lent[index]

    def release(self, index: int) -> None:
        self.log.append(f"release {index}")


def test_a_cut_stage_holds_no_lent_weight_and_computes_the_same() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
    x = torch.randn(3, 16)
    stage = split_program(capture_program(model, (x,)), [["0", "1", "2", "3", "4"]])[0].module
    before = storage_bytes(stage.buffers())
    with torch.no_grad():
        expected = stage(x)
    fetches, lent, kept = cut_loans(stage, 0, {"4": (2, "cpu2"), "0": (1, "host:h")})
    assert kept == [] and [(f.layer, f.lender) for f in fetches] == [("0", 1), ("4", 2)]  # in run order
    assert [f.nbytes for f in fetches] == [(16 * 32 + 32) * 4, (32 * 4 + 4) * 4]
    assert storage_bytes(stage.buffers()) == before - sum(f.nbytes for f in fetches)
    weights = {item.slot: unpack(item.flat.clone(), spec.tensors) for item, spec in zip(lent, fetches, strict=True)}
    assert torch.equal(weights[0][0], model[0].weight.detach()) and torch.equal(weights[1][1], model[4].bias.detach())
    local = _Local(weights)
    for sub in stage.modules():
        if isinstance(sub, Fetched | Released):
            sub.streamer = local  # type: ignore[assignment]
    with torch.no_grad():
        got = stage(x)
    assert torch.equal(got[0], expected[0])
    assert local.log == ["take 0", "release 0", "take 1", "release 1"]  # each layer's weights dropped after it
    assert live_loans(stage) == 1


def test_a_module_called_twice_keeps_its_weights_at_home() -> None:
    # Its second call is another layer ("a@1") that reads the same weights: lending them to "a" alone
    # would leave "a@1" without them, so they stay; "c", called once, is lent.
    model, x = Reused().eval(), torch.randn(2, 8)
    stage = split_program(capture_program(model, (x,)), [["b", "a", "c", "b@1", "a@1"]])[0].module
    fetches, lent, kept = cut_loans(stage, 0, {"a": (1, "cpu1"), "b": (1, "cpu1"), "c": (1, "cpu1")})
    assert [f.layer for f in fetches] == ["c"] and kept == ["a", "b"] and live_loans(stage) == 1
    local = _Local({item.slot: unpack(item.flat, spec.tensors) for item, spec in zip(lent, fetches, strict=True)})
    for sub in stage.modules():
        if isinstance(sub, Fetched | Released):
            sub.streamer = local  # type: ignore[assignment]
    with torch.no_grad():
        assert torch.equal(stage(x)[0], model(x))


def test_a_tied_weight_stays_at_home() -> None:
    x = torch.randn(2, 8)
    stage = split_program(capture_program(Tied().eval(), (x,)), [["a", "t", "c"]])[0].module  # t: the transpose
    names = {n.target for n in stage.graph.nodes if n.op == "get_attr"}
    fetches, _, kept = cut_loans(stage, 0, {"a": (1, "cpu1"), "c": (1, "cpu1")})
    # a's weight is also read by layer t (its transpose): only a's bias can be lent.
    assert [f.layer for f in fetches] == ["a", "c"] and [len(f.tensors) for f in fetches] == [1, 2]
    assert kept == [] and len({n.target for n in stage.graph.nodes if n.op == "get_attr"}) == len(names) - 3


def test_the_ledger_counts_fetched_buffers_until_they_are_garbage() -> None:
    home = [torch.zeros(256)]  # 1 KiB
    ledger = WeightLedger("cpu1", 4096, home)
    buffers = [torch.zeros(512)]  # 2 KiB
    ledger.stage(buffers, "l1", "cpu2")
    assert (ledger.home, ledger.held(), ledger.peak) == (1024, 3072, 3072)
    with pytest.raises(MemoryCapError, match=r"cpu1 would hold 5 KiB .* for layer 'l2' from cpu2\), over its "
                                             r"memory cap of 4 KiB"):
        ledger.stage([torch.zeros(512)], "l2", "cpu2")
    del buffers
    gc.collect()
    ledger.stage([torch.zeros(512)], "l2", "cpu2")  # the first buffer is gone: room again
    assert ledger.peak == 3072


def test_home_weights_over_the_cap_are_refused_at_once() -> None:
    weight = torch.zeros(1024)
    with pytest.raises(MemoryCapError, match=r"cpu0 holds 4 KiB of weights \(its stage's\), over its memory cap "
                                             r"of 1 KiB: 3 KiB too many"):
        WeightLedger("cpu0", 1024, [weight, weight[:10]], what="its stage's")  # a view counts once
    assert storage_bytes([weight, weight[:10], torch.empty(8, device="meta")]) == 4096


@pytest.mark.parametrize(("items", "message"), [
    (["cpu1"], "write DEVICE=SIZE"),
    (["cpu1=lots"], "memory cap of cpu1"),
    (["=2MiB"], "write DEVICE=SIZE"),
])
def test_bad_caps_are_refused(items: list[str], message: str) -> None:
    with pytest.raises(PlanMismatchError, match=message):
        parse_caps(items)
    assert parse_caps(["cpu1=2MiB", "host:h=1GB"]) == {"cpu1": "2MiB", "host:h": "1GB"}
