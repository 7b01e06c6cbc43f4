"""The lender's side of harvesting: hold other stages' weights and send them when asked.

A lender is either a stage process (its device also runs a stage: :class:`LenderServer` answers
in a thread beside the stage's schedule) or a process of its own (a device outside the pipeline,
or a host's memory: :func:`run_lender`, which does nothing else).  Either way it holds the
:class:`~pipeplan.executor.loan_cut.Lent` weights, checks them against its device's cap, and
answers each request ``[j]`` from a borrower (received from any rank of the fetch group) with
that borrower's layer j's weights (packed in one buffer), until every borrower has said it is done (``[-1]``).
The protocol is the borrower's, :mod:`pipeplan.executor.harvest_stream`.  A lender may also hold
stages' stashed activations (``stash=True``, :mod:`pipeplan.executor.stash`): it keeps each
``PUT`` microbatch (its :class:`~pipeplan.executor.stash.StashStore`, checked against the cap
beside the weights it lends) until the stage's ``GET`` takes it back.  Requests are served one
at a time, so borrowers that share a lender share its link, as the plan's channels assume.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from pipeplan.executor.errors import RunError, StageFailure
from pipeplan.executor.harvest_stream import (
    DONE,
    FETCH,
    GET,
    PUT,
    REPLY_TAG,
    REQUEST_TAG,
    REQUEST_WORDS,
    SWITCH_INTERVAL,
)
from pipeplan.executor.loan_cut import Lent
from pipeplan.executor.memory_cap import WeightLedger
from pipeplan.executor.stash import StashStore, borrowers_of

if TYPE_CHECKING:
    from pipeplan.executor.options import RunSetup
    from pipeplan.executor.worker import Phases

__all__ = ["LenderBuild", "LenderFailure", "LenderServer", "run_lender", "serve"]

log = logging.getLogger(__name__)


class LenderFailure(StageFailure):
    """A lender's own process failed; ``stage`` is its rank and ``device`` its name (``cpu2``, ``host:NAME``)."""

    def __init__(self, rank: int, name: str, message: str, details: str = "") -> None:
        RunError.__init__(self, f"lender {name} (rank {rank}, holding other stages' weights) failed: {message}")
        self.stage = rank
        self.device = name
        self.details = details


@dataclass
class LenderBuild:
    """What a lender process of its own gets: the weights it lends."""

    name: str  # a device id, or host:NAME
    lent: list[Lent] = field(default_factory=list)


def serve(group: dist.ProcessGroup, lent: Sequence[Lent], stats: dict[str, Any], stash_from: Sequence[int] = (),
          store: StashStore | None = None) -> None:
    """Answer borrowers' requests until each borrower in ``lent`` (and each stage in ``stash_from``,
    whose stashes ``store`` keeps) has said it is done; count in ``stats``."""
    held = {(item.borrower, item.slot): item.flat for item in lent}
    left: dict[int, int] = {}  # rank → DONEs still to come: one from its weights' streamer, one from its stash
    for rank in [*{item.borrower for item in lent}, *stash_from]:
        left[rank] = left.get(rank, 0) + 1
    request = torch.empty(REQUEST_WORDS, dtype=torch.int64)
    while left:
        src = dist.recv(request, group=group, tag=REQUEST_TAG)
        op, index, nbytes = (int(x) for x in request)
        if op == DONE:
            left[src] = left.get(src, 1) - 1
            if left[src] <= 0:
                left.pop(src)
            continue
        if op in (PUT, GET):
            if store is None:
                raise RunError(f"rank {src} stashes activations here, but this lender holds no stash")
            if op == PUT:
                store.put(group, src, index, nbytes)
            else:
                store.get(group, src, index)
            stats["stash"] = dict(store.stats)
            continue
        if op != FETCH:
            raise RunError(f"rank {src} sent an unknown request {request.tolist()}")
        flat = held.get((src, index))
        if flat is None:
            raise RunError(f"rank {src} asked for borrowed layer {index}, which this lender does not hold")
        started = time.perf_counter()
        dist.send(flat, dst=src, group=group, tag=REPLY_TAG)
        stats["requests"] += 1
        stats["bytes"] += flat.nbytes
        stats["seconds"] += time.perf_counter() - started


def _new_stats(lent: Sequence[Lent]) -> dict[str, Any]:
    return {"requests": 0, "bytes": 0, "seconds": 0.0, "layers": [item.layer for item in lent],
            "borrowers": sorted({item.borrower for item in lent})}


class LenderServer:
    """:func:`serve` in a thread, beside a stage that also lends (weights, or room for stashes)."""

    def __init__(self, group: dist.ProcessGroup, lent: Sequence[Lent], stash_from: Sequence[int] = (),
                 store: StashStore | None = None) -> None:
        self.stats = _new_stats(lent)
        self._error: BaseException | None = None
        self._lent = list(lent)
        self._stash = (list(stash_from), store)
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))  # as the streamer does, and why
        self._thread = threading.Thread(target=self._run, args=(group,), name="pipeplan-lender", daemon=True)
        self._thread.start()

    def _run(self, group: dist.ProcessGroup) -> None:
        try:
            serve(group, self._lent, self.stats, *self._stash)
        except BaseException as exc:  # raised again by join, in the stage's own thread
            self._error = exc

    def join(self, timeout: float) -> dict[str, Any]:
        """Wait until every borrower is done; raise what the server raised."""
        self._thread.join(timeout)
        if self._error is not None:
            raise RunError(f"lending weights failed: {type(self._error).__name__}: {self._error}") from self._error
        if self._thread.is_alive():
            raise RunError(f"borrowers {self.stats['borrowers']} were not done with their weights {timeout:g}s "
                           "after this stage finished")
        return dict(self.stats)


def lender_ledger(setup: RunSetup, built: LenderBuild) -> WeightLedger:
    """Pin a lender's own process (to its device's cores; a host lender is not pinned, one torch
    thread) and check the weights it lends against its cap (a run's lender and a deployment's)."""
    assert setup.loans is not None
    me = setup.loans.lender(built.name)
    if me.cores:
        os.sched_setaffinity(0, me.cores)
    torch.set_num_threads(1)
    return WeightLedger(built.name, setup.loans.caps.get(built.name), [item.flat for item in built.lent],
                        what="lent to other stages")


def run_lender(rank: int, setup: RunSetup, init_method: str, phases: Phases, built: LenderBuild) -> None:
    """Body of a lender process of its own: hold the weights, serve them, then report to rank 0."""
    from pipeplan.executor.lending import make_groups

    assert setup.loans is not None
    me = setup.loans.lender(built.name)
    phases.enter("checking the lent weights against the memory cap")
    ledger = lender_ledger(setup, built)
    phases.enter("joining the process group")
    dist.init_process_group(setup.backend, init_method=init_method, rank=rank, world_size=setup.world_size,
                            timeout=timedelta(seconds=setup.options.timeout))
    try:
        groups = make_groups(setup)
        assert groups.fetch is not None
        stats = _new_stats(built.lent)
        phases.enter("lending weights")
        stash_from = borrowers_of(setup.loans.stashes.items(), rank)
        store = StashStore(built.name, ledger.cap, ledger.home) if stash_from else None
        serve(groups.fetch, built.lent, stats, stash_from, store)
        phases.enter("reporting to stage 0")
        result = {"lender": built.name, "rank": rank, "pid": os.getpid(),
                  "cores": list(me.cores or []), "memory": ledger.as_dict(), "served": stats,
                  "rss_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "phases": phases.seconds}
        dist.gather_object(result, None, dst=0, group=groups.fetch)
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
