"""Borrowed weights in a deployment: lenders as deployment processes, weights streamed as a run's are.

A deployment started from a harvest plan (:func:`pipeplan.executor.deploy.deploy_plan`) resolves and
applies its loans as :func:`pipeplan.executor.run.run_plan` does
(:func:`pipeplan.executor.lending.resolve_loans`, :func:`~pipeplan.executor.lending.apply_loans`): each
borrowing stage's module comes without its lent weights and with its
:class:`~pipeplan.executor.loan_cut.FetchSpec` list, a stage that lends holds the
:class:`~pipeplan.executor.loan_cut.Lent` weights in its ``StageBuild.lent``, and every other lender (a
device outside the pipeline, or ``host:NAME``) gets a deployment process of its own, with the
first layout's order carrying its :class:`~pipeplan.executor.lender.LenderBuild`.

In the processes (:mod:`pipeplan.executor.deploy_stage`) the run's classes do the work: a borrowing
stage's :class:`~pipeplan.executor.harvest_stream.Streamer` prefetches its borrowed layers, microbatch
after microbatch, across the steps it is sent; a lender answers from a
:class:`~pipeplan.executor.lender.LenderServer` thread beside its stage, or beside its own process's
inbox; every holder keeps a :class:`~pipeplan.executor.memory_cap.WeightLedger` against the plan's
memory map.  The fetches go over a gloo group of every rank, apart from the pipeline's; it waits
for requests without a deadline (:data:`IDLE`), since a deployment may sit idle for longer than any
transfer's timeout.  Leaving a layout, a borrower stops its streamer (which tells its lenders it is
done) and a lender waits for every borrower's word before leaving the group.

Only the layout a deployment starts with borrows: a live switch moves no lent weights, so a switch
*to* a harvest plan is refused, and a switch away from one (or a recovery) takes the lent weights
back from the deployment's copy of the model (they count as reloaded), while lenders with processes
of their own stop.  Fetching once per batch (``fetch="batch"``, a layer-major stage) and stashed
activations are refused: a deployment runs one microbatch a step.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from pipeplan.executor.errors import PlanMismatchError, RunError
from pipeplan.executor.harvest_stream import Streamer, attach
from pipeplan.executor.lender import LenderBuild, LenderServer
from pipeplan.executor.loan_cut import live_loans
from pipeplan.executor.memory_cap import WeightLedger
from pipeplan.executor.worker import stage_ledger

if TYPE_CHECKING:
    from pipeplan.executor.deploy_stage import Layout
    from pipeplan.executor.stage_build import StageBuild
    from pipeplan.planner.plan import Plan

__all__ = ["IDLE", "StageLoans", "check_servable", "layout_groups", "serve_lender"]

log = logging.getLogger(__name__)

IDLE = timedelta(days=365)  # the fetch group's timeout: a lender waits for requests as long as the deployment idles


def check_servable(plan: Plan) -> None:
    """Refuse a harvest plan a deployment cannot start with: one that fetches once per batch or stashes."""
    harvest = plan.harvest
    if harvest is None or not (harvest.loans or harvest.stashes):
        return
    if harvest.stashes or harvest.options.batched:
        what = "stashes activations with lenders" if harvest.stashes else "fetches borrowed weights once per batch"
        raise PlanMismatchError(
            f"the plan {what} (harvest fetch={harvest.options.fetch!r}), which needs its borrowing stages to run "
            "whole batches layer by layer; a deployment runs one microbatch a step. Run it with `pipeplan run`, "
            "or plan with --harvest --fetch microbatch (without --stash) to deploy")


def layout_groups(order: Layout) -> tuple[dist.ProcessGroup | None, dist.ProcessGroup | None]:
    """The layout's (pipeline group, fetch group), created by every rank in the same order: the
    pipeline's holds the stages only when other ranks joined (``PipelineStage`` refuses a larger one);
    the fetch group (None: the layout borrows nothing) holds every rank."""
    timeout = timedelta(seconds=order.setup.options.timeout)
    pipe = dist.new_group(list(range(order.stages)), timeout=timeout) if order.world > order.stages else None
    loans = order.setup.loans
    fetch = dist.new_group(list(range(order.world)), backend="gloo", timeout=IDLE) \
        if loans is not None and loans.borrowed else None
    return pipe, fetch


class _Streamer(Streamer):
    """The run's streamer, noting when a fetch failed: the stage's forward then raised for a lender's
    sake (a lender died), which the deployment re-plans around instead of blaming the model."""

    failed = False

    def take(self, index: int) -> tuple[torch.Tensor, ...]:
        try:
            return super().take(index)
        except BaseException:
            self.failed = True
            raise


class StageLoans:
    """A stage process's part in its layout's loans: its streamer (it borrows), its server (it lends)."""

    def __init__(self, streamer: _Streamer | None, server: LenderServer | None, ledger: WeightLedger) -> None:
        self.streamer, self.server, self.ledger = streamer, server, ledger
        self._stopped: dict[str, Any] | None = None

    @property
    def fetch_failed(self) -> bool:
        """Whether a borrowed layer's weights failed to arrive (its lender is gone, or too slow)."""
        return self.streamer is not None and self.streamer.failed

    @classmethod
    def start(cls, order: Layout, build: StageBuild, wrapped: torch.nn.Module, compute: torch.device,
              fetch: dist.ProcessGroup | None) -> StageLoans | None:
        """Check the stage's weights against its cap, then start its streamer and server (None: no loans)."""
        loans = order.setup.loans
        if loans is None or fetch is None:
            return None
        ledger = stage_ledger(order.setup, order.rank, build)
        server = LenderServer(fetch, build.lent) if build.lent else None
        streamer = None
        if build.fetches:
            streamer = _Streamer(build.fetches, fetch, ledger, compute, order.setup.options.timeout,
                                 buffers=live_loans(build.module))
            attach(wrapped, streamer)
        return cls(streamer, server, ledger)

    def stop(self, timeout: float) -> dict[str, Any]:
        """Leaving the layout (before the process group goes): tell the lenders this stage is done,
        wait for its borrowers; return the totals.  Once: a second call returns the first's."""
        if self._stopped is None:
            self._stopped = {"memory": self.ledger.as_dict()}
            if self.streamer is not None:
                self.streamer.stop()
                self._stopped["fetched"] = self.streamer.stats()
            if self.server is not None:
                self._stopped["served"] = self.server.join(timeout)
        return self._stopped


def serve_lender(order: Layout, lender: LenderBuild, fetch: dist.ProcessGroup | None, ledger: WeightLedger,
                 wait: Any) -> tuple[Any, dict[str, Any]]:
    """A lender process of its own in its layout: serve fetches from a thread until ``wait()`` (the
    process's inbox) returns the next order that is not a step; return it and the lender's totals."""
    if fetch is None:
        raise RunError(f"lender {lender.name} joined layout {order.number}, which borrows nothing")
    server = LenderServer(fetch, lender.lent)
    message = wait()
    started = time.perf_counter()
    try:
        served = server.join(order.setup.options.timeout)
    except RunError as exc:  # a borrower died: the deployment re-plans around it
        log.warning("lender %s: %s", lender.name, exc)
        served = dict(server.stats)
    served["waited_for_borrowers"] = time.perf_counter() - started
    return message, {"memory": ledger.as_dict(), "served": served}
