"""The borrowing stage's side of harvesting: stream lent weights in ahead of use, drop them after.

A stage whose module was cut by :func:`pipeplan.executor.loan_cut.cut_loans` calls its
:class:`Fetched` modules for a borrowed layer's weights and its :class:`Released` modules when
the layer is done.  Behind them, a :class:`Streamer` thread walks the stage's borrowed layers in
the order the forward runs them, round and round (microbatch after microbatch), and for each one
asks its lender for the weights and receives them into fresh buffers, over the run's fetch group
(gloo point-to-point, a process group apart from the pipeline's):

- the borrower sends ``[FETCH, j, 0]`` (an int64 tensor of :data:`REQUEST_WORDS`, tag
  :data:`REQUEST_TAG`) to the lender, which answers with layer j's tensors packed in one byte buffer
  (tag :data:`REPLY_TAG`, :func:`pipeplan.executor.weight_pack.pack`), which the borrower views as
  the tensors; ``[DONE, 0, 0]`` says the borrower is done (the stash's requests share the channel:
  :mod:`pipeplan.executor.stash`);
- at most ``STAGING_BUFFERS`` (2, as the planner counts) layers are held at once: the one running
  and the next, prefetched while it runs (more only where the stage's borrowed layers interleave,
  :func:`pipeplan.executor.loan_cut.live_loans`).  The thread waits for a :meth:`Streamer.release` before it
  allocates a third, and the :class:`~pipeplan.executor.memory_cap.WeightLedger` is asked before each
  allocation, so a fetch that would pass the device's cap fails the stage instead of happening.

What is measured: per fetch, the bytes and the seconds from request to the last byte (the channel's
time, which the plan predicts as ``latency + bytes / bandwidth``), and how long the forward waited
for it (the part of the fetch prefetch did not hide).  A fetch counts when its layer runs, so a
prefetch for a microbatch that never comes (at the end) counts nowhere.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Sequence
from queue import Empty, Queue
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.distributed as dist
from torch import nn

from pipeplan.executor.errors import RunError
from pipeplan.executor.weight_pack import unpack
from pipeplan.planner.harvest import STAGING_BUFFERS

if TYPE_CHECKING:
    from pipeplan.executor.loan_cut import FetchSpec
    from pipeplan.executor.memory_cap import WeightLedger

__all__ = ["DONE", "FETCH", "GET", "PUT", "REPLY_TAG", "REQUEST_TAG", "REQUEST_WORDS", "STASH_REPLY_TAG",
           "STASH_TAG", "Fetched", "Released", "Streamer", "attach", "request"]

REQUEST_TAG = 7301  # distinct from the tags the pipeline uses, though the fetch group is its own
REPLY_TAG = 7302
STASH_TAG = 7303  # a stashed microbatch's activations, borrower → lender
STASH_REPLY_TAG = 7304  # and back
# A request is [op, key, bytes]: FETCH a borrowed layer's weights (key: its slot), PUT a stashed
# microbatch (key: the microbatch; the buffer follows on STASH_TAG), GET it back; DONE: no more.
REQUEST_WORDS = 3
DONE, FETCH, PUT, GET = -1, 0, 1, 2


def request(op: int, key: int = 0, nbytes: int = 0) -> torch.Tensor:
    """A request message (see the module)."""
    return torch.tensor([op, key, nbytes], dtype=torch.int64)
SWITCH_INTERVAL = 0.0005  # seconds: the GIL switch interval in a process that fetches or lends beside its stage


class Fetched(nn.Module):
    """Returns borrowed layer ``index``'s weights (a tuple), from the stage's streamer."""

    def __init__(self, index: int, layer: str) -> None:
        super().__init__()
        self.index = index
        self.layer = layer
        self.streamer: Streamer | None = None  # attached in the stage's process (see attach)

    def forward(self) -> tuple[torch.Tensor, ...]:
        if self.streamer is None:
            raise RunError(f"layer {self.layer!r} borrows its weights, but no streamer was attached to its stage")
        return self.streamer.take(self.index)


class Released(nn.Module):
    """Marks borrowed layer ``index`` done (its arguments only order it after the layer's last operator)."""

    def __init__(self, index: int, layer: str) -> None:
        super().__init__()
        self.index = index
        self.layer = layer
        self.streamer: Streamer | None = None

    def forward(self, *after: Any) -> None:
        if self.streamer is not None:
            self.streamer.release(self.index)


class _Staged(NamedTuple):
    slot: int
    tensors: tuple[torch.Tensor, ...]
    nbytes: int
    seconds: float  # request to the last byte received


class _Failed(NamedTuple):
    error: BaseException


class Streamer:
    """Prefetches a stage's borrowed layers from their lenders (see the module).

    ``device`` is where the layer runs (buffers arrive in host memory and are copied there);
    ``timeout`` bounds the forward's wait for one fetch; ``buffers`` is how many layers it may hold
    at once (more than ``STAGING_BUFFERS`` only where the stage holds more borrowed layers at once,
    :func:`pipeplan.executor.loan_cut.live_loans`).
    """

    def __init__(self, fetches: Sequence[FetchSpec], group: dist.ProcessGroup, ledger: WeightLedger,
                 device: torch.device, timeout: float, buffers: int = STAGING_BUFFERS) -> None:
        if not fetches:
            raise ValueError("a streamer needs at least one borrowed layer")
        self.fetches = list(fetches)
        self.group = group
        self.ledger = ledger
        self.device = device
        self.timeout = timeout
        self._ready: Queue[_Staged | _Failed] = Queue()
        self._credits = threading.Semaphore(max(buffers, STAGING_BUFFERS))
        self._stop = threading.Event()
        self._running: dict[int, _Staged] = {}
        self._stats_lock = threading.Lock()
        self.reset()
        # A fetch thread that waits for the GIL waits up to a switch interval (5 ms by default) after
        # each message while the forward runs Python; a shorter one lets it answer the network promptly.
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        self._thread = threading.Thread(target=self._run, name="pipeplan-streamer", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        """Start counting afresh (after the warm-up)."""
        with self._stats_lock:
            self.count, self.nbytes, self.seconds, self.waited = 0, 0, 0.0, 0.0
            self.by_lender: dict[str, list[float]] = {}  # lender → [fetches, bytes, seconds]

    def _run(self) -> None:
        try:
            for spec in itertools.cycle(self.fetches):
                self._credits.acquire()
                if self._stop.is_set():
                    break
                flat = torch.empty(spec.nbytes, dtype=torch.uint8)
                self.ledger.stage([flat], spec.layer, spec.lender_name)
                started = time.perf_counter()
                dist.send(request(FETCH, spec.slot), dst=spec.lender, group=self.group, tag=REQUEST_TAG)
                dist.recv(flat, src=spec.lender, group=self.group, tag=REPLY_TAG)
                seconds = time.perf_counter() - started
                if self.device.type != "cpu":
                    flat = flat.to(self.device)
                    self.ledger.stage([flat], spec.layer, spec.lender_name)
                self._ready.put(_Staged(spec.slot, unpack(flat, spec.tensors), flat.nbytes, seconds))
        except BaseException as exc:  # handed to the forward, which raises it as the stage's failure
            self._ready.put(_Failed(exc))
            return
        for lender in sorted({spec.lender for spec in self.fetches}):
            dist.send(request(DONE), dst=lender, group=self.group, tag=REQUEST_TAG)

    def take(self, index: int) -> tuple[torch.Tensor, ...]:
        """Borrowed layer ``index``'s weights, waiting for them if the prefetch has not brought them yet."""
        started = time.perf_counter()
        try:
            item = self._ready.get(timeout=self.timeout)
        except Empty:
            spec = self.fetches[index]
            raise RunError(f"the weights of layer {spec.layer!r} did not arrive from {spec.lender_name} within "
                           f"{self.timeout:g}s") from None
        waited = time.perf_counter() - started
        if isinstance(item, _Failed):
            raise item.error
        if item.slot != index:  # the forward's order is the cut's: anything else is a bug
            raise RunError(f"borrowed layer {index} asked for, but layer {item.slot} arrived first")
        self._running[index] = item
        lender = self.fetches[index].lender_name
        with self._stats_lock:
            self.count += 1
            self.nbytes += item.nbytes
            self.seconds += item.seconds
            self.waited += waited
            row = self.by_lender.setdefault(lender, [0, 0, 0.0])
            row[0] += 1
            row[1] += item.nbytes
            row[2] += item.seconds
        return item.tensors

    def release(self, index: int) -> None:
        """Borrowed layer ``index`` has run: drop its buffers and let the next fetch start."""
        if self._running.pop(index, None) is not None:
            self._credits.release()

    def stop(self) -> None:
        """End the prefetching (after the last microbatch) and tell the lenders this stage is done."""
        self._stop.set()
        self._credits.release()  # wake the thread if it waits for a buffer
        self._thread.join(self.timeout)
        self._running.clear()
        if self._thread.is_alive():
            raise RunError(f"the weight streamer did not stop within {self.timeout:g}s (a fetch hangs)")

    def stats(self) -> dict[str, Any]:
        """What was fetched since :meth:`reset`: totals, and per lender."""
        with self._stats_lock:
            return {"fetches": self.count, "bytes": self.nbytes, "seconds": self.seconds, "waited": self.waited,
                    "lenders": {name: {"fetches": int(c), "bytes": int(b), "seconds": s}
                                for name, (c, b, s) in self.by_lender.items()}}


def attach(module: nn.Module, streamer: Streamer | None) -> int:
    """Point every :class:`Fetched`/:class:`Released` module of ``module`` at ``streamer``; return how many."""
    found = 0
    for sub in module.modules():
        if isinstance(sub, Fetched | Released):
            sub.streamer = streamer
            found += 1
    return found
