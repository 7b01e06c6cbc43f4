"""One device process of a deployment: serve a stage, change layout on command, stop when told.

A process belongs to one device (pinned to its cores) for the deployment's life, and serves one
stage of each *layout*: the stage list of the plan serving now.  It keeps the state tensors of its
stage (keyed by their names in the exported program), so that a switch to another layout moves
only what changes.  Everything reaches it through its pipe from the deployment, in order:

- :class:`Layout`: join this layout's process group; send the state tensors other processes will
  need (``sends``) and receive those it will (``recvs``) over that group — gloo point-to-point,
  from the process that holds a tensor to the one that will; take the state of a layer whose
  holder died from ``reloads`` (the deployment's copy of the source model); fill its stage
  module (sent as a skeleton, its buffers on the meta device) from what it kept, received and was
  reloaded; drop the rest; build the ``PipelineStage`` and answer :class:`Ready`.  A process the
  layout has no stage for (``stage`` is None) sends its part and ends.  The first layout comes
  with real weights: nothing is sent.
- :class:`Run` ``(step, inputs)``: run one microbatch (inputs for stage 0 only) — receive from the
  stage before over the process group, compute, send to the stage after — and report a
  :class:`Stepped` row (the last stage with the outputs).  One microbatch per step: the pipeline
  stays full across steps, as requests keep coming.
- :class:`Leave`: the deployment drained (a switch) or lost a process: leave the process group
  and answer :class:`Parked`.  A process whose send or receive fails (a peer died) leaves at once
  and answers :class:`Parked` with the reason, skipping the steps still in its pipe: leaving
  closes its connections, so the neighbours waiting on it fail too, instead of waiting for the
  process group's timeout.  A stage's own computation raising ends the process (the model is at
  fault, not the layout), as in a run.
- :class:`Stop`: after the steps before it, return the process's totals.

A layout that borrows memory (a harvest plan's, only the first: :mod:`pipeplan.executor.deploy_loans`)
also streams a borrowing stage's lent weights from their lenders, serves them from a lending
stage's thread, and has lender processes of their own (``Layout.lend``): they hold the weights,
answer fetches until the layout is left, and serve no stage.

Timing rows are :class:`~pipeplan.executor.schedule.MicrobatchTiming` rows with the step as the batch
and ``recv_start`` moved back to when the stage began waiting for the step's order: waiting for work
is idle time, which the deployment's statistics tell apart from transfers.  Clocks are
``perf_counter() - epoch``, the deployment's epoch: one host, one monotonic clock.
"""

from __future__ import annotations

import pickle
import time
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage

from pipeplan.executor.check import tensor_leaves
from pipeplan.executor.deploy_loans import StageLoans, layout_groups, serve_lender
from pipeplan.executor.errors import RunError
from pipeplan.executor.lender import LenderBuild, lender_ledger
from pipeplan.executor.options import RunSetup
from pipeplan.executor.schedule import TimedSchedule
from pipeplan.executor.stage_build import ForwardError, GuardedStage, StageBuild
from pipeplan.executor.worker import Phases, pin, stage_devices

__all__ = ["Layout", "Leave", "Parked", "Ready", "Run", "Stepped", "Stop", "Transfer", "serve_device"]


# -- what the deployment sends ----------------------------------------------------------------

class Transfer(NamedTuple):
    """One state tensor crossing the process group during a switch."""

    key: str  # its name in the exported program's state
    peer: int  # the rank it goes to (in sends) or comes from (in recvs)
    tag: int  # unique within the switch: matches the send to its receive
    shape: tuple[int, ...]
    dtype: torch.dtype


class Layout(NamedTuple):
    """A new layout, as one process takes part in it."""

    number: int  # the layout's sequence number (0: the first)
    init_method: str  # rendezvous of this layout's process group
    rank: int  # this process's rank: stage k is rank k, processes that leave come after the stages
    world: int  # processes in the group: the stages, then those that leave after sending
    stages: int
    stage: int | None  # the stage it serves (= rank), or None: send, then end
    setup: RunSetup  # the layout's run setup (stages, devices, cores, options)
    build: StageBuild | None  # the stage's module; its buffers on the meta device except at the start
    attrs: dict[str, str]  # the module's buffer name → state key
    sends: list[Transfer]
    recvs: list[Transfer]
    reloads: dict[str, torch.Tensor]  # state of layers whose holder died, from the deployment's copy
    epoch: float  # the deployment's clock zero (perf_counter)
    lend: LenderBuild | None = None  # a lender process of its own (stage None): the weights it lends


class Run(NamedTuple):
    step: int
    inputs: tuple[Any, ...] | None  # stage 0's flat inputs; None for the others


class Leave(NamedTuple):
    layout: int  # the layout being left


class Stop(NamedTuple):
    reason: str = "closed"


# -- what the process reports ------------------------------------------------------------------

class Ready(NamedTuple):
    """The process serves ``stage`` of ``layout`` (None: it sent its part and ends)."""

    device: str
    layout: int
    stage: int | None
    received: int  # state bytes received over the process group in this switch
    sent: int
    reloaded: int  # state bytes taken from the deployment's copy of the source model
    kept: int  # state bytes it already held


class Stepped(NamedTuple):
    device: str
    layout: int
    stage: int
    row: list[float]
    arrived: float | None  # stage 0: when the step's inputs came
    outputs: list[torch.Tensor] | None  # last stage: the step's outputs, on the CPU


class Parked(NamedTuple):
    """The process left ``layout``'s process group; ``reason`` says why when it was not told to."""

    device: str
    layout: int
    reason: str | None


class _Serving(NamedTuple):
    schedule: TimedSchedule
    last: bool
    compute: torch.device
    loans: StageLoans | None  # its streamer and lender thread, in a layout that borrows


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class _Process:
    """The state one device process keeps across layouts."""

    def __init__(self, device: str, inbox: Connection, outbox: Connection, phases: Phases) -> None:
        self.device, self.inbox, self.outbox, self.phases = device, inbox, outbox, phases
        self.held: dict[str, torch.Tensor] = {}
        self.totals: dict[str, Any] = {"device": device, "steps": 0, "received": 0, "sent": 0, "reloaded": 0,
                                       "layouts": 0, "started": time.perf_counter()}

    def next_layout(self) -> Layout | None:
        """The next :class:`Layout`, skipping orders of a layout already left; None on Stop or EOF."""
        while True:
            try:
                message = _receive(self.inbox)
            except EOFError:  # the deployment is gone: stop rather than serve nobody
                return None
            if isinstance(message, Stop):
                return None
            if isinstance(message, Layout):
                return message

    def enter(self, order: Layout) -> _Serving | None:
        """Join ``order``'s group, move state, build the stage; None when this process leaves."""
        self.phases.enter(f"joining layout {order.number}")
        options = order.setup.options
        dist.init_process_group(order.setup.backend, init_method=order.init_method, rank=order.rank,
                                world_size=order.world, timeout=timedelta(seconds=options.timeout))
        self.phases.enter(f"moving state for layout {order.number}")
        received = {t.key: torch.empty(t.shape, dtype=t.dtype) for t in order.recvs}
        works = [dist.isend(self.held[t.key].contiguous(), dst=t.peer, tag=t.tag) for t in order.sends]
        works += [dist.irecv(received[t.key], src=t.peer, tag=t.tag) for t in order.recvs]
        for work in works:
            if work is not None:
                work.wait()
        sent = sum(_nbytes(self.held[t.key]) for t in order.sends)
        # Every rank must create the stages' group, those leaving too; PipelineStage wants a group
        # of exactly its stages.  A layout that borrows also has a fetch group of every rank.
        group, fetch = layout_groups(order)
        if order.stage is None or order.build is None:
            self.outbox.send(Ready(self.device, order.number, None, 0, sent, 0, 0))
            self.totals["sent"] += sent
            return None
        built, held = order.build, {}
        module = built.module
        kept = reloaded = 0
        for attr, key in order.attrs.items():
            tensor = module._buffers[attr]
            assert tensor is not None
            if not tensor.is_meta:  # the first layout: the weights came with the module
                value = tensor
            elif key in self.held:
                value = self.held[key]
                kept += _nbytes(value)
            elif key in received:
                value = received[key]
            elif key in order.reloads:
                value = order.reloads[key]
                reloaded += _nbytes(value)
            else:
                raise RuntimeError(f"layout {order.number}: nobody sent state {key!r} of stage {order.stage}")
            module._buffers[attr] = value
            held[key] = value
        self.held = held  # what moved away is freed
        got = sum(_nbytes(t) for t in received.values())
        for name, count in (("received", got), ("sent", sent), ("reloaded", reloaded)):
            self.totals[name] += count
        self.totals["layouts"] += 1

        setup, rank = order.setup, order.stage
        stage = setup.stages[rank]
        pin(stage)
        compute, wire = stage_devices(setup, stage)
        sync = (lambda: torch.cuda.synchronize(compute)) if compute.type == "cuda" else None
        last = rank == order.stages - 1
        wrapped = GuardedStage(module.to(compute), compute, setup.staged, last)
        loans = StageLoans.start(order, built, wrapped, compute, fetch)
        pipe_stage = PipelineStage(wrapped, rank, order.stages, wire,
                                   input_args=tuple(b.empty() for b in built.input_meta),
                                   output_args=tuple(b.empty() for b in built.output_meta), group=group)
        epoch = order.epoch
        schedule = TimedSchedule(pipe_stage, 1, schedule=options.schedule, in_flight=options.in_flight,
                                 clock=lambda: time.perf_counter() - epoch, sync=sync)
        self.outbox.send(Ready(self.device, order.number, rank, got, sent, reloaded, kept))
        return _Serving(schedule, last, compute, loans)

    def lend(self, order: Layout, lender: LenderBuild) -> bool:
        """A lender process of its own in ``order``'s layout: hold and serve the weights until Leave
        (True) or Stop (False)."""
        self.phases.enter(f"lending in layout {order.number}")
        ledger = lender_ledger(order.setup, lender)
        dist.init_process_group(order.setup.backend, init_method=order.init_method, rank=order.rank,
                                world_size=order.world, timeout=timedelta(seconds=order.setup.options.timeout))
        _, fetch = layout_groups(order)
        self.outbox.send(Ready(self.device, order.number, None, 0, 0, 0, 0))
        message, lent = serve_lender(order, lender, fetch, ledger, self._control)
        self.totals["lent"] = lent
        _leave_group()
        if isinstance(message, Leave):
            self.outbox.send(Parked(self.device, order.number, None))
            return True
        return False

    def _control(self) -> Leave | Stop:
        """The next Leave or Stop in the inbox (EOF: Stop); steps are skipped."""
        while True:
            try:
                message = _receive(self.inbox)
            except EOFError:
                return Stop("the deployment is gone")
            if isinstance(message, Leave | Stop):
                return message

    def _unloan(self, serving: _Serving, timeout: float) -> None:
        """Leaving a layout that borrows: the streamer and the lender thread stop (see deploy_loans)."""
        if serving.loans is None:
            return
        try:
            self.totals["loans"] = serving.loans.stop(timeout)
        except RunError as exc:  # a peer is gone: the deployment re-plans around it, nothing to add here
            self.totals["loans"] = {"error": str(exc)}

    def serve(self, order: Layout, serving: _Serving) -> bool:
        """Serve steps until Leave (True) or Stop (False); a failed transfer parks the process."""
        rank = order.stage
        assert rank is not None
        schedule, last = serving.schedule, serving.last
        clock = schedule.clock
        broken: str | None = None
        self.phases.enter("waiting for requests")
        waiting_since = clock()
        while True:
            try:
                message = _receive(self.inbox)
            except EOFError:
                message = Stop("the deployment is gone")
            if isinstance(message, Stop):
                self._unloan(serving, order.setup.options.timeout)
                return False
            if isinstance(message, Leave):
                self._unloan(serving, order.setup.options.timeout)
                if broken is None:
                    _leave_group()
                    self.outbox.send(Parked(self.device, order.number, None))
                return True
            if not isinstance(message, Run) or broken is not None:
                continue  # a parked process skips the steps still in its pipe
            arrived = clock()
            self.phases.current = f"running step {message.step}"
            try:
                inputs = tuple(a.to(serving.compute) if isinstance(a, torch.Tensor) else a
                               for a in message.inputs or ())
                schedule.batch = message.step  # rows carry the deployment's step, across layouts
                out = schedule.step(*inputs)
            except Exception as exc:
                fetching = serving.loans is not None and serving.loans.fetch_failed  # a lender is gone
                if _forward_failed(exc) and not fetching:
                    raise  # the model itself failed: the deployment fails, as a run does
                # A peer died or left: leave at once, so that those waiting on us fail too.
                action = "fetching borrowed weights in" if fetching else schedule.doing[0] or "running"
                broken = f"{type(exc).__name__} while {action} step {message.step}: {str(exc).splitlines()[0]}"
                self._unloan(serving, order.setup.options.timeout)  # its lenders hear it is done first
                _leave_group()
                self.outbox.send(Parked(self.device, order.number, broken))
                continue
            timing = schedule.timings.pop()
            timing.recv_start = waiting_since
            outputs = None
            if last:
                outputs = [t.detach().cpu() for t in tensor_leaves(out)]
            self.outbox.send(Stepped(self.device, order.number, rank, timing.as_row(),
                                     arrived if rank == 0 else None, outputs))
            self.totals["steps"] += 1
            self.phases.current = "waiting for requests"
            waiting_since = clock()


def _forward_failed(exc: BaseException) -> bool:
    """Whether the stage's own computation raised (pipelining wraps the error it gets)."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        if isinstance(cur, ForwardError):
            return True
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return False


def _receive(inbox: Connection) -> Any:
    """The next order (pickled plainly by :meth:`pipeplan.executor.deploy_procs.DeviceProcess.send`)."""
    return pickle.loads(inbox.recv_bytes())


def _leave_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def serve_device(slot: int, setup: RunSetup, init_method: str, phases: Phases, built: Any,
                 inbox: Connection, outbox: Connection, device: str) -> dict[str, Any]:
    """The body :mod:`pipeplan.executor.deploy_procs` runs in a device process; returns its totals.

    ``slot``, ``setup``, ``init_method`` and ``built`` are the launcher's (unused: every layout,
    the first included, comes through ``inbox``); ``outbox`` takes :class:`Ready`, :class:`Stepped`
    and :class:`Parked` reports.
    """
    del slot, setup, init_method, built
    process = _Process(device, inbox, outbox, phases)
    try:
        with torch.no_grad():
            while (order := process.next_layout()) is not None:
                if order.lend is not None:
                    if not process.lend(order, order.lend):
                        break
                    continue
                entered = process.enter(order)
                if entered is None:
                    break
                if not process.serve(order, entered):
                    break
    finally:
        _leave_group()
    totals = process.totals
    totals["seconds"] = time.perf_counter() - totals.pop("started")
    totals["phases"] = phases.seconds
    return totals
