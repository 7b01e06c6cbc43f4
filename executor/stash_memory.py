"""A layer-major stage's memory against its device's cap: weights, and the batch's live activations.

:class:`~pipeplan.executor.memory_cap.WeightLedger` counts weights only.  A stage that runs its batch
layer-major (``fetch="batch"``, :mod:`pipeplan.executor.layer_major`) holds every microbatch's
live activations at once, which is what the planner charges it (``max(workspace_v, M·live_v)``, or
one microbatch's set and two stash buffers with ``stash=True``), so :class:`BatchMeter` counts
those too: after each operator (each block with no cap), the distinct storages of every value the
batch holds, less the weights (counted by the ledger) and the stage's inputs (the pipeline's receive
buffers, held whichever way the stage runs), plus the stash's buffers on this side.  Going over the
cap raises :class:`~pipeplan.executor.memory_cap.MemoryCapError` naming the device and the bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree

from pipeplan.costmodel.units import format_bytes
from pipeplan.executor.memory_cap import MemoryCapError
from pipeplan.executor.stash import StorageKey, storage_key

if TYPE_CHECKING:
    from pipeplan.executor.memory_cap import WeightLedger
    from pipeplan.executor.stash import StashClient

__all__ = ["BatchMeter", "storages_of", "tensors_of"]


def tensors_of(values: Iterable[Any]) -> list[torch.Tensor]:
    """Every tensor in ``values`` (tuples and lists of them included)."""
    return [x for v in values for x in pytree.tree_leaves(v) if isinstance(x, torch.Tensor)]


def storages_of(values: Iterable[Any]) -> set[StorageKey]:
    """The storages of every tensor in ``values``: what a stage holds whatever way it runs (its
    weights, its inputs) and neither stashes nor counts as the batch's activations."""
    return {storage_key(t) for t in tensors_of(values)}


class BatchMeter:
    """Weights, live activations and stash buffers of one layer-major stage, against its cap."""

    def __init__(self, ledger: WeightLedger, microbatches: int, stash: StashClient | None = None) -> None:
        self.ledger = ledger
        self.microbatches = microbatches
        self.stash = stash
        self.peak = ledger.peak  # weights, activations and stash buffers at once
        self.activations = 0  # the most live activation bytes seen
        self.stash_buffers = 0  # the most stash bytes on this side seen

    @property
    def strict(self) -> bool:
        """Whether to check after every operator (a cap to keep), not once a block."""
        return self.ledger.cap is not None

    def check(self, envs: Sequence[Mapping[Any, Any]], shared: Mapping[Any, Any],
              inputs: Sequence[Sequence[Any]], where: str) -> None:
        """Count what the batch holds now; raise :class:`MemoryCapError` over the cap."""
        skip = storages_of([*shared.values(), *(x for args in inputs for x in args)])
        seen: dict[StorageKey, int] = {}
        for env in envs:
            for t in tensors_of(env.values()):
                if t.device.type != "meta":
                    key = storage_key(t)
                    if key not in skip:
                        seen[key] = t.untyped_storage().nbytes()
        live = sum(seen.values())
        stash = self.stash.held() if self.stash is not None else 0
        weights = self.ledger.held()
        total = weights + live + stash
        self.activations = max(self.activations, live)
        self.stash_buffers = max(self.stash_buffers, stash)
        self.peak = max(self.peak, total)
        cap = self.ledger.cap
        if cap is not None and total > cap:
            device = self.ledger.device
            buffers = f", {format_bytes(stash)} of stash buffers" if self.stash is not None else ""
            advice = ("" if self.stash is not None else ", stash them with a lender (--stash)")
            raise MemoryCapError(
                f"{device} would hold {format_bytes(total)} ({format_bytes(weights)} of weights, {format_bytes(live)} "
                f"of live activations of its layer-major batch of {self.microbatches} microbatches{buffers}) {where}, "
                f"over its memory cap of {format_bytes(cap)}: {format_bytes(total - cap)} too many; raise the cap "
                f"(--memory-cap {device}=SIZE){advice} or plan with fetch='microbatch'")

    def as_dict(self) -> dict[str, int]:
        return {"peak": self.peak, "activations": self.activations, "stash_buffers": self.stash_buffers}
