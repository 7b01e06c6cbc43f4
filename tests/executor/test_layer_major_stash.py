"""A layer-major batch whose microbatches are stashed between layers (:mod:`pipeplan.executor.stash`)
gives exactly the outputs of its microbatches run one by one, on real exported stage graphs; the
batch's live activations are counted against a cap (:mod:`pipeplan.executor.stash_memory`).

The stash here is in-process (the same packing as :class:`~pipeplan.executor.stash.StashClient`,
no lender); the real one, over gloo, is ``tests/executor/test_executor_harvest.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pipeplan.executor.layer_major import _blocks, _steps, run_layer_major
from pipeplan.executor.memory_cap import MemoryCapError, WeightLedger
from pipeplan.executor.stash import StashClient, pack_values, unpack_values
from pipeplan.executor.stash_memory import BatchMeter
from tests.executor.test_layer_major import stage_inputs


class LocalStash:
    """StashClient's put/prefetch/restore, kept in this process: counts what left and came back."""

    def __init__(self) -> None:
        self.away: dict[int, torch.Tensor] = {}
        self._ready: dict[int, torch.Tensor] = {}
        self.puts: list[int] = []
        self.most_away = 0

    put = StashClient.put  # packs and drops exactly as the real one; its queue is ours
    restore = StashClient.restore

    def prefetch(self, key: int) -> None:  # back from the lender: no longer away
        if key in self.away:
            self._ready[key] = self.away.pop(key)

    def held(self) -> int:
        return 0


def _local() -> Any:
    stash = LocalStash()
    stash._entries = {}
    stash._held = 0
    stash.timeout = 1.0
    stash.lender_name = "here"
    stash._error = None
    stash.stats = {"waited": 0.0}

    class Ops:
        def put(self, op: tuple[int, int, torch.Tensor]) -> None:
            _, key, buffer = op
            stash.puts.append(key)
            stash.away[key] = buffer.clone()  # what the lender holds, and sends back: a fresh buffer
            stash.most_away = max(stash.most_away, len(stash.away))

    import threading

    stash._ops = Ops()
    stash._cond = threading.Condition()
    return stash


@pytest.mark.parametrize(("model", "cut"), [("tinygpt", "blocks.2.ln1"), ("mlp", "net.4")])
def test_stashed_microbatches_come_back_bit_for_bit(model: str, cut: str) -> None:
    module, mids = stage_inputs(model, cut, 4)
    stash = _local()
    with torch.no_grad():
        one_by_one = [module(*mid) for mid in mids]
        together = run_layer_major(module, mids, stash=stash)
    for mine, theirs in zip(together, one_by_one, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))
    blocks = len(_blocks(module, _steps(module)))
    assert blocks > 1
    # At each of the blocks − 1 boundaries, all microbatches but the one that goes on leave.
    assert len(stash.puts) == (blocks - 1) * 3
    assert stash.most_away == 3 and not stash.away and not stash._ready and not stash._entries


def test_strides_survive_the_stash() -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    views = [base.t(), base[1:, ::2], torch.tensor(3.5), torch.empty(0, 3), base[2]]
    flat, metas = pack_values(views)
    back = unpack_values(flat.clone(), metas)
    for a, b in zip(views, back, strict=True):
        assert torch.equal(a, b) and a.stride() == b.stride() and a.dtype == b.dtype


def test_a_batch_over_its_cap_fails_naming_the_device_and_the_bytes() -> None:
    module, mids = stage_inputs("mlp", "net.4", 4)
    weights = list(module.buffers())
    ledger = WeightLedger("cpu1", None, weights)
    meter = BatchMeter(ledger, 4)
    with torch.no_grad():
        run_layer_major(module, mids, meter=meter)
    assert meter.activations > 0 and meter.peak == ledger.home + meter.activations
    # A cap between the weights and the batch's peak: the weights fit, the live activations do not.
    cap = ledger.home + meter.activations // 2
    tight = BatchMeter(WeightLedger("cpu1", cap, weights), 4)
    with pytest.raises(MemoryCapError, match=r"cpu1 would hold .* of weights, .* of live activations of its "
                                             r"layer-major batch of 4 microbatches\) running .* of microbatch \d, "
                                             r"over its memory cap of .*: .* too many"), torch.no_grad():
        run_layer_major(module, mids, meter=tight)
