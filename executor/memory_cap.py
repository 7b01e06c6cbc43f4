"""Per-device memory caps on weights, enforced by accounting in the process that holds them.

Every process of a run that holds weights (a stage, a lender) keeps a :class:`WeightLedger`: the
bytes of the tensors it really holds, measured from their storages (not taken from the plan), and
a cap.  The ledger is checked before weights arrive: at start for the stage's own weights and the
weights it lends, and before every fetch of a borrowed layer for the buffers it is received into.
Going over raises :class:`MemoryCapError`, naming the device, what it would hold and the cap.

Why accounting and not an OS limit: ``RLIMIT_AS`` and ``RLIMIT_DATA`` count every mapping of the
process (torch's libraries, thread stacks, allocator arenas: hundreds of MiB that vary by run),
and Linux does not enforce ``RLIMIT_RSS``, so an OS limit would cap noise instead of the weights
the plan places.  Activations and workspace are not counted (a CPU allocator keeps no per-tensor
record of them); the cap is on weights: own, staged (fetched) and lent.  Fetched buffers are
tracked by weak reference, so a buffer still alive after its layer ran (a leak) stays counted.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable

import torch

from pipeplan.costmodel.units import format_bytes
from pipeplan.executor.errors import RunError

__all__ = ["MemoryCapError", "WeightLedger", "storage_bytes"]


class MemoryCapError(RunError):
    """A device would hold more weight bytes than its memory cap."""


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (meta tensors hold none): what the process
    really keeps for them, a storage shared by two tensors counted once."""
    seen: dict[tuple[str, int], int] = {}
    for t in tensors:
        if t.device.type == "meta":
            continue
        storage = t.untyped_storage()
        seen[(str(t.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


class WeightLedger:
    """The weight bytes one process holds, against its device's cap (None: uncapped).

    ``home`` are the weights it keeps for the whole run (its stage's, and what it lends);
    :meth:`stage` adds fetched buffers, which count until they are garbage.  ``peak`` is the most
    it held at once, measured when each fetch was staged.
    """

    def __init__(self, device: str, cap: int | None, home: Iterable[torch.Tensor], what: str = "its own") -> None:
        self.device = device
        self.cap = cap
        self.home = storage_bytes(home)
        self.peak = self.home
        self._staged: list[tuple[weakref.ref[torch.Tensor], int]] = []
        self._lock = threading.Lock()
        if cap is not None and self.home > cap:
            raise MemoryCapError(f"{device} holds {format_bytes(self.home)} of weights ({what}), over its memory "
                                 f"cap of {format_bytes(cap)}: {format_bytes(self.home - cap)} too many; raise the "
                                 f"cap (--memory-cap {device}=SIZE) or plan with less memory on {device}")

    def staged(self) -> int:
        """Bytes of fetched buffers still alive."""
        with self._lock:
            self._staged = [(ref, n) for ref, n in self._staged if ref() is not None]
            return sum(n for _, n in self._staged)

    def held(self) -> int:
        return self.home + self.staged()

    def stage(self, tensors: list[torch.Tensor], layer: str, lender: str) -> None:
        """Count ``tensors`` (buffers about to receive ``layer``'s weights from ``lender``), or raise
        :class:`MemoryCapError` if holding them would pass the cap."""
        new = storage_bytes(tensors)
        before = self.held()
        if self.cap is not None and before + new > self.cap:
            raise MemoryCapError(
                f"{self.device} would hold {format_bytes(before + new)} of weights ({format_bytes(self.home)} its own, "
                f"{format_bytes(before - self.home)} staged, {format_bytes(new)} for layer {layer!r} from {lender}), "
                f"over its memory cap of {format_bytes(self.cap)}; raise the cap (--memory-cap {self.device}=SIZE) "
                "or plan with less memory on it")
        with self._lock:
            self._staged += [(weakref.ref(t), storage_bytes([t])) for t in tensors]
        self.peak = max(self.peak, before + new)

    def as_dict(self) -> dict[str, int | None]:
        return {"cap": self.cap, "home": self.home, "peak": self.peak}
