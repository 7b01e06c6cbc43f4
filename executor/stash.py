"""Stashed activations (``HarvestOptions.stash``): a layer-major stage keeps the microbatches it is
not computing with a lender, and fetches each back before it runs.

The plan (:mod:`pipeplan.planner.harvest_stash`) names a lender per stashing stage.  The borrower's
:class:`StashClient` (a thread beside the stage, over the run's fetch group, the channel its
borrowed weights use) takes a microbatch's state after a layer (:meth:`StashClient.put`: its
activations packed into one byte buffer, sent as ``[PUT, m, bytes]`` then the buffer on
``STASH_TAG``), and brings it back when asked (:meth:`StashClient.prefetch`: ``[GET, m, bytes]``,
answered on ``STASH_REPLY_TAG``; :meth:`StashClient.restore` waits for it and puts the values back).
One thread does both, in order, so a microbatch's PUT always precedes its GET; the layer-major
runner (:mod:`pipeplan.executor.layer_major`) asks for the next microbatch's state while the current
one computes.  The lender's :class:`StashStore` holds the buffers between the two, checked against
its device's cap.

Values keep their bytes, shapes and strides exactly (each tensor's storage span is packed and
viewed back with its strides, :func:`pack_values`), so outputs are bit-identical.  Tensors that
share storage with the weights or the stage's inputs (the pipeline's receive buffers) stay: they
cost the stage nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from queue import Queue
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch.utils import _pytree as pytree

from pipeplan.costmodel.units import format_bytes
from pipeplan.executor.errors import RunError
from pipeplan.executor.harvest_stream import DONE, GET, PUT, REQUEST_TAG, STASH_REPLY_TAG, STASH_TAG, request
from pipeplan.executor.memory_cap import MemoryCapError

__all__ = ["StashClient", "StashError", "StashStore", "StorageKey", "borrowers_of", "pack_values", "storage_key",
           "unpack_values"]

StorageKey = tuple[str, int]


class StashError(RunError):
    """The stash's transfers failed (a lender gone, a timeout): not the stage's forward's fault, so
    the run blames whoever failed first (the lender, when its cap refused a stash)."""


def storage_key(t: torch.Tensor) -> StorageKey:
    return str(t.device), t.untyped_storage().data_ptr()


class _Meta(NamedTuple):
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # bytes into the packed buffer
    span: int  # elements of the storage the tensor spans


def _span(t: torch.Tensor) -> int:
    return 0 if t.numel() == 0 else 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))


def pack_values(tensors: list[torch.Tensor]) -> tuple[torch.Tensor, list[_Meta]]:
    """The tensors' storage spans in one byte buffer, and how to view each back (strides kept)."""
    metas, end = [], 0
    for t in tensors:
        end += -end % t.element_size()
        metas.append(_Meta(t.dtype, tuple(t.shape), tuple(t.stride()), end, _span(t)))
        end += metas[-1].span * t.element_size()
    flat = torch.empty(end, dtype=torch.uint8)
    for t, meta in zip(tensors, metas, strict=True):
        if meta.span:
            raw = t.detach().as_strided((meta.span,), (1,)).contiguous().view(torch.uint8)
            flat[meta.offset:meta.offset + raw.numel()] = raw
    return flat, metas


def unpack_values(flat: torch.Tensor, metas: list[_Meta]) -> list[torch.Tensor]:
    """Views of ``flat`` (from :func:`pack_values`) as the tensors, with their strides: no copy."""
    out = []
    for m in metas:
        size = torch.empty((), dtype=m.dtype).element_size()
        raw = flat[m.offset:m.offset + m.span * size].view(m.dtype)
        out.append(raw.as_strided(m.shape, m.stride) if m.span else torch.empty(m.shape, dtype=m.dtype))
    return out


@dataclass
class _Entry:
    """A stashed microbatch: which values left, how to rebuild them, and its buffer's size."""

    nodes: list[Any]
    specs: list[pytree.TreeSpec]
    leaves: list[list[Any]]  # per node its leaves, a tensor's place held by None
    metas: list[_Meta]
    nbytes: int


@dataclass
class StashClient:
    """The borrower's side (see the module): one thread sends stashes out and brings them back."""

    lender: int  # the lender's rank in the fetch group
    lender_name: str
    group: dist.ProcessGroup
    timeout: float
    stats: dict[str, Any] = field(default_factory=dict)
    _entries: dict[int, _Entry] = field(default_factory=dict)
    _ready: dict[int, torch.Tensor] = field(default_factory=dict)
    _held: int = 0  # bytes of buffers on this side: waiting to leave, or back and not yet restored

    def __post_init__(self) -> None:
        self._ops: Queue[tuple[int, int, torch.Tensor | int]] = Queue()  # (op, key, buffer or its bytes)
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self.reset()
        self._thread = threading.Thread(target=self._run, name="pipeplan-stash", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        """Start counting afresh (after the warm-up)."""
        with self._cond:
            self.stats = {"puts": 0, "gets": 0, "bytes_out": 0, "bytes_in": 0, "seconds": 0.0, "waited": 0.0,
                          "lender": self.lender_name}

    def held(self) -> int:
        with self._cond:
            return self._held

    def put(self, key: int, env: dict[Any, Any], keep: set[StorageKey]) -> None:
        """Send microbatch ``key``'s tensors in ``env`` (but those in ``keep``'s storages) to the lender,
        and drop them from ``env``."""
        nodes, specs, leaves, tensors = [], [], [], []
        for node, value in env.items():
            flat, spec = pytree.tree_flatten(value)
            found = [x for x in flat if isinstance(x, torch.Tensor)]
            if not found or any(storage_key(t) in keep for t in found):
                continue
            nodes.append(node)
            specs.append(spec)
            leaves.append([None if isinstance(x, torch.Tensor) else x for x in flat])
            tensors += found
        buffer, metas = pack_values(tensors)
        for node in nodes:
            del env[node]
        self._entries[key] = _Entry(nodes, specs, leaves, metas, buffer.numel())
        with self._cond:
            self._held += buffer.numel()
        self._ops.put((PUT, key, buffer))

    def prefetch(self, key: int) -> None:
        """Ask for microbatch ``key``'s stash back (it arrives while the forward computes)."""
        if key in self._entries:
            self._ops.put((GET, key, self._entries[key].nbytes))

    def restore(self, key: int, env: dict[Any, Any]) -> None:
        """Put microbatch ``key``'s stashed values back in ``env``, waiting for them if need be."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        started = time.perf_counter()
        with self._cond:
            if not self._cond.wait_for(lambda: key in self._ready or self._error is not None, self.timeout):
                raise StashError(f"the stashed activations of microbatch {key} did not come back from "
                               f"{self.lender_name} within {self.timeout:g}s")
            if self._error is not None:
                raise StashError(f"stashing activations with {self.lender_name} failed: "
                               f"{type(self._error).__name__}: {self._error}") from self._error
            buffer = self._ready.pop(key)
            self._held -= buffer.numel()
            self.stats["waited"] += time.perf_counter() - started
        tensors = iter(unpack_values(buffer, entry.metas))
        for node, spec, leaves in zip(entry.nodes, entry.specs, entry.leaves, strict=True):
            env[node] = pytree.tree_unflatten([next(tensors) if x is None else x for x in leaves], spec)

    def _run(self) -> None:
        try:
            while True:
                op, key, item = self._ops.get()
                if op == DONE:
                    dist.send(request(DONE), dst=self.lender, group=self.group, tag=REQUEST_TAG)
                    return
                started = time.perf_counter()
                if isinstance(item, torch.Tensor):  # a PUT
                    buffer = item
                    dist.send(request(PUT, key, buffer.numel()), dst=self.lender, group=self.group, tag=REQUEST_TAG)
                    dist.send(buffer, dst=self.lender, group=self.group, tag=STASH_TAG)
                    with self._cond:
                        self._held -= buffer.numel()
                        self.stats["puts"] += 1
                        self.stats["bytes_out"] += buffer.numel()
                        self.stats["seconds"] += time.perf_counter() - started
                    continue
                nbytes = item
                back = torch.empty(nbytes, dtype=torch.uint8)
                with self._cond:
                    self._held += nbytes
                dist.send(request(GET, key, nbytes), dst=self.lender, group=self.group, tag=REQUEST_TAG)
                dist.recv(back, src=self.lender, group=self.group, tag=STASH_REPLY_TAG)
                with self._cond:
                    self._ready[key] = back
                    self.stats["gets"] += 1
                    self.stats["bytes_in"] += nbytes
                    self.stats["seconds"] += time.perf_counter() - started
                    self._cond.notify_all()
        except BaseException as exc:  # raised by restore, in the forward
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def stop(self) -> None:
        """Tell the lender this stage is done (after the last batch) and end the thread."""
        self._ops.put((DONE, 0, 0))
        self._thread.join(self.timeout)
        if self._thread.is_alive():
            raise RunError(f"the activation stash did not stop within {self.timeout:g}s (a transfer hangs)")


class StashStore:
    """The lender's side: the stashes it holds, by (borrower rank, microbatch), against its cap
    (``cap`` less ``home``, the weights it lends)."""

    def __init__(self, device: str, cap: int | None, home: int) -> None:
        self.device, self.cap, self.home = device, cap, home
        self._held: dict[tuple[int, int], torch.Tensor] = {}
        self.bytes = 0
        self.stats = {"puts": 0, "gets": 0, "bytes": 0, "peak": 0}

    def put(self, group: dist.ProcessGroup, src: int, key: int, nbytes: int) -> None:
        if self.cap is not None and self.home + self.bytes + nbytes > self.cap:
            raise MemoryCapError(
                f"{self.device} would hold {format_bytes(self.home + self.bytes + nbytes)} "
                f"({format_bytes(self.home)} of weights lent to other stages, {format_bytes(self.bytes)} of stashed "
                f"activations, {format_bytes(nbytes)} more from rank {src}), over its memory cap of "
                f"{format_bytes(self.cap)}: {format_bytes(self.home + self.bytes + nbytes - self.cap)} too many; "
                f"raise the cap (--memory-cap {self.device}=SIZE) or plan with a larger lender")
        buffer = torch.empty(nbytes, dtype=torch.uint8)
        dist.recv(buffer, src=src, group=group, tag=STASH_TAG)
        self._held[src, key] = buffer
        self.bytes += nbytes
        self.stats["puts"] += 1
        self.stats["bytes"] += nbytes
        self.stats["peak"] = max(self.stats["peak"], self.bytes)

    def get(self, group: dist.ProcessGroup, src: int, key: int) -> None:
        buffer = self._held.pop((src, key), None)
        if buffer is None:
            raise RunError(f"rank {src} asked for stashed microbatch {key}, which this lender does not hold")
        dist.send(buffer, dst=src, group=group, tag=STASH_REPLY_TAG)
        self.bytes -= buffer.numel()
        self.stats["gets"] += 1
        self.stats["bytes"] += buffer.numel()


def borrowers_of(stashes: Iterable[tuple[int, tuple[int, str]]], rank: int) -> list[int]:
    """The stages (ranks) that stash with lender ``rank``, from ``LoanSetup.stashes.items()``."""
    return sorted(k for k, (lender, _) in stashes if lender == rank)
