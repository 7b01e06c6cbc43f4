"""The threads that serve a deployment's requests: the feeder, the collector and the supervisor.

- the *feeder* cuts microbatches from the bounded queue (:mod:`pipeplan.executor.deploy_batcher`) and
  sends each step's order to every stage (its inputs to stage 0), keeping at most ``in_flight``
  microbatches in the pipeline, so that a backlog waits — and is measured — in the queue;
- the *collector* reads every process's reports and answers each request of a microbatch once,
  dropping the padding's rows;
- the *supervisor* watches the processes: a stage whose own computation raised ends the deployment
  with a :class:`~pipeplan.executor.errors.StageFailure` naming it; a process that dies otherwise is a
  lost device, which the deployment re-plans around (:mod:`pipeplan.executor.deploy_switch`).

Only the thread that holds a request settles its future (see :mod:`pipeplan.executor.deploy`).
"""

from __future__ import annotations

import logging
import time
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from pipeplan.executor.deploy_batcher import Request, stack, unstack
from pipeplan.executor.deploy_stage import Parked, Ready, Run, Stepped, Stop
from pipeplan.executor.deploy_switch import Switching
from pipeplan.executor.errors import DeploymentClosed, StageFailure

if TYPE_CHECKING:
    from pipeplan.executor.deploy_batcher import InputSpec

__all__ = ["ServingThreads"]

log = logging.getLogger(__name__)

POLL = 0.1  # seconds between the threads' looks at whether the deployment has ended


class ServingThreads(Switching):
    """The serving half of :class:`pipeplan.executor.deploy.Deployment`: its threads' loops, and how
    the deployment ends."""

    # What the deployment provides (pipeplan.executor.deploy), beyond what Switching names.
    batch_size: int
    totals: list[dict[str, Any]] | None
    _specs: list[InputSpec]
    _settled: bool
    _ended_totals: dict[str, dict[str, Any]]

    def _feed(self) -> None:
        max_wait = self.serving.max_wait_ms / 1e3
        while not self._ended.is_set():
            with self._changed:
                while len(self._in_flight) >= self._capacity() and not self._ended.is_set():
                    self._changed.wait(POLL)
            with self._dispatch:
                taken = self._queue.take(self.batch_size, max_wait)
                if taken:
                    self._dispatch_step(taken)
                    continue
                if taken is not None and self._drained_for_stop():
                    return
            if taken is None:  # held by a switch: wait for it to finish
                self._queue.wait_released(POLL)

    def _drained_for_stop(self) -> bool:
        """The queue is closed and empty: once nothing is in flight, stop the processes (True)."""
        with self._changed:
            if self._in_flight:
                self._changed.wait(POLL)  # a lost device may still send these back to the queue
                return False
            self._stopping = True
            procs = list(self._procs.values())
        for proc in procs:
            proc.send(Stop())
        return True

    def _dispatch_step(self, taken: list[Request]) -> None:
        # A future cancelled while it waited is dropped; the others can no longer be cancelled.  A
        # request sent back to the queue by a lost device is running already.
        requests = [r for r in taken if r.future.running() or r.future.set_running_or_notify_cancel()]
        if not requests:
            return
        now = time.perf_counter()
        step = next(self._steps)
        with self._lock:
            if self._settled:
                settled = True
            else:
                settled = False
                self._in_flight[step] = requests
                for r in requests:
                    r.dispatched = r.dispatched or now
                procs = [self._procs[d] for d in self._devices]
        if settled:
            self._fail(requests, self._failure or DeploymentClosed("the deployment has stopped"))
            return
        self._meter.count("microbatches")
        self._meter.count("padded", self.batch_size - len(requests))
        inputs = stack(requests, self._specs, self.batch_size)
        for k, proc in enumerate(procs):
            proc.send(Run(step, inputs if k == 0 else None))  # a dead process: the supervisor handles it

    def _collect(self) -> None:
        while True:
            ended = self._ended.is_set()  # read before the pipes: what they hold then is all there is
            with self._lock:
                live = dict(self._outboxes)
            for ready in wait(list(live), timeout=0 if ended else POLL):
                conn = next(c for c in live if c is ready)  # wait() is typed for sockets and fds too
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    with self._lock:
                        self._outboxes.pop(conn, None)
                    continue
                self._handle(message)
            if ended and not any(_pending(conn) for conn in live):
                break
        with self._lock:
            self._settled = True
            left = [r for requests in self._in_flight.values() for r in requests]
            self._in_flight.clear()
        self._fail(left, self._failure or DeploymentClosed("the deployment stopped before answering"))

    def _handle(self, message: Any) -> None:
        if isinstance(message, (Ready, Parked)):
            with self._changed:
                self._reports[(message.layout, message.device)] = message
                self._changed.notify_all()
            if isinstance(message, Parked) and message.reason is not None:
                self._lost(message.device, f"{message.device} left: {message.reason}", dead=False)
            return
        if not isinstance(message, Stepped) or message.layout != self._layout:
            return  # a step of a layout already left: its requests went back to the queue
        self._meter.step(message.stage, message.row, message.arrived)
        if message.outputs is None:
            return
        step = int(message.row[0])
        with self._changed:
            requests = self._in_flight.pop(step, None)
            self._changed.notify_all()
        if requests is None:  # voided by a lost device: sent again under a new step
            log.debug("dropping the answer to step %d, voided by a switch", step)
            return
        now = time.perf_counter()
        for request, rows in zip(requests, unstack(message.outputs, len(requests)), strict=True):
            request.future.set_result(rows[0] if len(rows) == 1 else rows)
            self._meter.answered(request.submitted, request.dispatched, now)

    def _supervise(self) -> None:
        while not self._ended.is_set():
            with self._lock:
                live = {p.sentinel: p for p in self._all_procs if p.ended is None}
            if not live:
                if self._stopping:
                    self._end(None)
                    return
                time.sleep(POLL)
                continue
            for sentinel in wait(list(live), timeout=POLL):
                proc = next(p for key, p in live.items() if key == sentinel)  # wait() is typed for sockets too
                kind, result = proc.collect()
                with self._changed:
                    self._changed.notify_all()
                if kind == "ok":
                    self._ended_totals[proc.device] = result
                    continue
                stage = self._devices.index(proc.device) if proc.device in self._devices else -1
                failure = StageFailure(stage, proc.device, result["message"], result.get("details", ""))
                if result.get("origin") == "forward" or not self.serving.recover or self._stopping:
                    self._end(failure)
                    return
                with self._lock:  # a recovery that found it dead already re-planned around it
                    handled = self._procs.get(proc.device) is not proc
                if not handled:
                    self._lost(proc.device, f"{proc.device} died: {result['message']}", dead=True)
            if self._stopping and all(p.ended is not None for p in live.values()):
                self._end(None)
                return

    def _end(self, failure: BaseException | None) -> None:
        """Stop serving: fail what waits (with ``failure``, if one ended it) and stop every process."""
        if failure is not None and self._failure is None:
            self._failure = failure
            self._queue.close(failure)
        with self._changed:  # a switch voiding steps from now on fails them instead of queueing them
            self._ended.set()
        if self._failure is not None:
            self._fail(self._queue.clear(), self._failure)
        with self._lock:
            procs = list(self._all_procs)
        for proc in procs:
            proc.stop()
        order = {d: k for k, d in enumerate(self._devices)}
        totals = sorted(self._ended_totals.values(), key=lambda t: order.get(t["device"], len(order)))
        self.totals = [{**t, "stage": order.get(t["device"])} for t in totals] if failure is None else None
        self._ended.set()
        with self._changed:
            self._changed.notify_all()

    def _fail(self, requests: list[Request], exc: BaseException) -> None:
        failed = 0
        for request in requests:
            # running() first: set_running_or_notify_cancel raises on a future already running.
            if request.future.running() or request.future.set_running_or_notify_cancel():
                request.future.set_exception(exc)
                failed += 1
        self._meter.count("failed", failed)


def _pending(conn: Connection) -> bool:
    try:
        return conn.poll(0)
    except (OSError, EOFError):
        return False
