"""A deployment: a fixed plan kept running, answering a stream of requests.

::

    from pipeplan.executor import ServeOptions, deploy_plan
    with deploy_plan("plan.json", serving=ServeOptions(max_wait_ms=2)) as d:
        future = d.submit(sample)             # one sample: the example's inputs without the batch dimension
        logits = future.result()              # equal to the unsplit model's output for that sample
        print(d.stats().latency["p99"], [s.compute for s in d.stats().stages])

The stages are a run's (the same checks, cut, launcher and ``PipelineStage``), started once; their
processes serve until :meth:`Deployment.close` (see :mod:`pipeplan.executor.deploy_stage`).  Three threads of
this process drive them:

- the *feeder* cuts microbatches from the bounded queue (:mod:`pipeplan.executor.deploy_batcher`) and sends
  them to stage 0, keeping at most ``in_flight`` microbatches in the pipeline, so that a backlog
  waits — and is measured — in the queue rather than in pipes;
- the *collector* reads every stage's timings and the last stage's outputs, and answers each
  request of a microbatch once, dropping the padding's rows;
- the *supervisor* is :func:`pipeplan.executor.launch.spawn`: when a stage process dies or raises, it names
  the stage, and every request not yet answered fails with that :class:`~pipeplan.executor.errors.StageFailure`.

Every request is answered exactly once: it is in one place at a time (queue, feeder, in flight,
answered), and only the thread that holds it settles its future.  The plan never changes here;
re-planning and moving stages are later work (issue 17).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import multiprocessing as mp
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pipeplan.costmodel.source import flat_inputs
from pipeplan.executor.deploy_batcher import Request, RequestQueue, input_specs, sample_inputs, stack, unstack
from pipeplan.executor.deploy_stats import DeploymentStats, Meter
from pipeplan.executor.errors import DeploymentClosed, PlanMismatchError, QueueFullError, RunError
from pipeplan.executor.launch import spawn, torchrun_env
from pipeplan.executor.options import RunOptions, RunSetup, resolve
from pipeplan.executor.source import batch_inputs, batch_kwargs, rebuild
from pipeplan.executor.validate import check_plan
from pipeplan.planner.plan import Plan

__all__ = ["Deployment", "ServeOptions", "deploy_plan"]

log = logging.getLogger(__name__)

_POLL = 0.1  # seconds between the threads' looks at whether the deployment has ended
_CALIBRATE_AFTER = 20  # microbatches a deployment must have served for its times to calibrate


@dataclass(frozen=True)
class ServeOptions:
    """How a deployment takes requests.

    ``queue_size`` bounds the requests waiting in front of stage 0; ``max_wait_ms`` is the latency
    bound of microbatching (a partial microbatch leaves once its oldest request has waited this
    long); ``in_flight`` caps the microbatches inside the pipeline (default: stages + 1, enough to
    keep every stage busy); ``stats_window`` is how many recent microbatches and requests
    :meth:`Deployment.stats` summarises; ``start_timeout`` bounds the stages' start.
    """

    queue_size: int = 256
    max_wait_ms: float = 5.0
    in_flight: int | None = None
    stats_window: int = 1000
    start_timeout: float = 300.0

    def __post_init__(self) -> None:
        for name in ("queue_size", "stats_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.in_flight is not None and self.in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, got {self.in_flight}")
        if self.max_wait_ms < 0 or self.start_timeout <= 0:
            raise ValueError(f"max_wait_ms must be ≥ 0 and start_timeout > 0, got {self.max_wait_ms} and "
                             f"{self.start_timeout}")


class Deployment:
    """A running pipeline for one fixed plan; make it with :func:`deploy_plan`.  Thread-safe."""

    def __init__(self, plan: Plan, setup: RunSetup, builds: list[Any], modules: list[str], rebuildable: bool,
                 serving: ServeOptions) -> None:
        from pipeplan.executor.deploy_stage import serve_stage

        self.plan = plan
        self.serving = serving
        self.batch_size = plan.batch_size
        first = builds[0]
        self._specs = input_specs(flat_inputs(first.args, first.kwargs, first.kwarg_order))
        self._kwarg_order = first.kwarg_order
        self._example: tuple[tuple[Any, ...], dict[str, Any]] = (first.args, first.kwargs)
        self.reference: nn.Module | None = None  # the unsplit model, for checking answers (set by deploy_plan)
        self._queue = RequestQueue(serving.queue_size)
        self._meter = Meter([s.device for s in setup.stages], serving.stats_window)
        self._slots = threading.Semaphore(serving.in_flight or setup.world_size + 1)
        self._lock = threading.Lock()  # guards _in_flight and _settled
        self._in_flight: dict[int, list[Request]] = {}
        self._settled = False  # the collector has failed what was left: nothing may enter _in_flight
        self._ids = itertools.count()
        self._ready: set[int] = set()
        self._started = threading.Event()
        self._ended = threading.Event()
        self._failure: BaseException | None = None
        self.totals: list[dict[str, Any]] | None = None  # each stage's totals, after a clean close
        # What feeds the calibration store when a drained deployment closes (deploy_plan sets it
        # when the run options calibrate); the notes say what it recorded.
        self.calibration: tuple[Any, Any] | None = None  # (the captured graph, the run setup)
        self.calibration_notes: list[str] = []

        inbox, self._inbox = mp.Pipe(duplex=False)
        pairs = [mp.Pipe(duplex=False) for _ in setup.stages]
        self._outboxes: dict[Connection, int] = {recv: k for k, (recv, _) in enumerate(pairs)}
        extra = [(inbox if k == 0 else None, send) for k, (_, send) in enumerate(pairs)]
        args = (setup, builds, modules, rebuildable)
        self._threads = [threading.Thread(target=self._supervise, args=(*args, serve_stage, extra),
                                          name="pipeplan-deploy-supervisor", daemon=True),
                         threading.Thread(target=self._collect, name="pipeplan-deploy-collector", daemon=True),
                         threading.Thread(target=self._feed, name="pipeplan-deploy-feeder", daemon=True)]
        for thread in self._threads:
            thread.start()
        if not self._started.wait(serving.start_timeout) and self._failure is None:
            self.close(drain=False)
            raise RunError(f"the deployment's {setup.world_size} stages were not ready after "
                           f"{serving.start_timeout:g}s (ServeOptions.start_timeout)")
        if self._failure is not None:
            self._ended.wait()
            raise self._failure

    # -- the public surface ------------------------------------------------------------------

    def submit(self, *args: Any, kwargs: Mapping[str, Any] | None = None, timeout: float = 0.0) -> Future[Any]:
        """Queue one sample; its future gets the model's output for it (a tensor, or a tuple of
        tensors for several outputs), without the batch dimension.

        ``args`` (and ``kwargs``, the keyword inputs) are the example's inputs without their batch
        dimension (a leading dimension of 1 is accepted too).  A full queue refuses at once with
        :class:`~pipeplan.executor.errors.QueueFullError`, or after waiting ``timeout`` seconds for room;
        a closed or failed deployment raises :class:`~pipeplan.executor.errors.DeploymentClosed`.
        """
        named = dict(kwargs or {})
        if set(named) != set(self._kwarg_order):
            raise ValueError(f"a request takes the keyword inputs {sorted(self._kwarg_order)} (as the plan's "
                             f"example), got {sorted(named)}")
        flat = flat_inputs(tuple(args), named, self._kwarg_order)
        inputs = sample_inputs(self._specs, flat)
        future: Future[Any] = Future()
        request = Request(next(self._ids), inputs, future, time.perf_counter())
        try:
            self._queue.put(request, timeout)
        except QueueFullError:
            self._meter.count("refused")
            raise
        self._meter.count("submitted")
        return future

    def samples(self, n: int, seed: int = 0) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        """``n`` requests' ``(args, kwargs)``, drawn as a run draws its batches
        (:func:`pipeplan.executor.source.batch_inputs`: token ids within the example's range): a load to serve."""
        def row(value: Any, i: int) -> Any:
            return value[i] if isinstance(value, torch.Tensor) and value.dim() else value

        args, kwargs = self._example
        out: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        for index in range(math.ceil(n / self.batch_size)):
            batch, named = batch_inputs(args, 1, seed, index), batch_kwargs(kwargs, 1, seed, index)
            out += [(tuple(row(a, i) for a in batch), {k: row(v, i) for k, v in named.items()})
                    for i in range(self.batch_size)]
        return out[:n]

    def stats(self) -> DeploymentStats:
        """Counters, per-request queueing and latency, and per-stage compute, transfer and idle times
        (see :mod:`pipeplan.executor.deploy_stats`)."""
        with self._lock:
            in_flight = len(self._in_flight)
        return self._meter.snapshot(len(self._queue), in_flight)

    @property
    def failure(self) -> BaseException | None:
        """Why the deployment stopped serving (a :class:`~pipeplan.executor.errors.StageFailure`), or None."""
        return self._failure

    def close(self, drain: bool = True, timeout: float = 60.0) -> None:
        """Stop taking requests; with ``drain``, answer every queued one first, else fail them with
        :class:`~pipeplan.executor.errors.DeploymentClosed`.  Then stop the stages (waiting up to ``timeout``
        seconds, after which they are killed).  Raises the stage failure, if one ended the deployment."""
        closed = DeploymentClosed("the deployment was closed")
        self._queue.close(closed)
        if not drain:
            self._fail(self._queue.clear(), closed)
        self._ended.wait(timeout)
        if not self._ended.is_set():
            log.warning("deployment stages did not stop within %gs; stopping them", timeout)
            self._inbox.close()  # stage 0 reads EOF and stops; spawn stops the others
            self._ended.wait(10)
        for thread in self._threads:
            thread.join(timeout=5)
        if self._failure is not None:
            raise self._failure
        if drain:
            self._feed_calibration()

    def _feed_calibration(self) -> None:
        """Each stage's mean compute over the stats window, recorded against its prediction, as a
        run's are (:func:`pipeplan.executor.run.feed_back`): the plans made after it use them."""
        stats = self._meter.snapshot(0, 0)
        if self.calibration is None or stats.microbatches < _CALIBRATE_AFTER:
            return
        from pipeplan.executor.run import feed_back

        graph, setup = self.calibration
        self.calibration_notes = feed_back(self.plan, graph, setup, [s.compute for s in stats.stages])
        for note in self.calibration_notes:
            log.info("%s", note)

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(drain=exc[0] is None)

    # -- the threads ---------------------------------------------------------------------------

    def _supervise(self, *args: Any) -> None:
        setup, builds, modules, rebuildable, body, extra = args
        try:
            self.totals = spawn(setup, builds, modules, rebuildable, body=body, extra=extra)
        except BaseException as exc:  # a StageFailure names the stage; anything else ends serving too
            self._failure = exc
            self._queue.close(exc)
            self._fail(self._queue.clear(), exc)
        finally:
            for ends in extra:  # spawn closed those it handed over; a failed start may have left others
                for conn in ends:
                    if conn is not None:
                        conn.close()
            self._ended.set()
            self._started.set()  # a start that failed must not wait for start_timeout

    def _feed(self) -> None:
        self._started.wait()
        max_wait = self.serving.max_wait_ms / 1e3
        for step in itertools.count():
            while not self._slots.acquire(timeout=_POLL):
                if self._ended.is_set():
                    return
            taken = self._queue.take(self.batch_size, max_wait)
            # A future cancelled while it waited is dropped; the others can no longer be cancelled.
            requests = [r for r in taken if r.future.set_running_or_notify_cancel()]
            if not taken:
                break
            if not requests:
                self._slots.release()
                continue
            now = time.perf_counter()
            for r in requests:
                r.dispatched = now
            with self._lock:
                settled = self._settled
                if not settled:
                    self._in_flight[step] = requests
            if settled:
                self._fail(requests, self._failure or DeploymentClosed("the deployment has stopped"))
                return
            self._meter.count("microbatches")
            self._meter.count("padded", self.batch_size - len(requests))
            try:
                self._inbox.send((step, stack(requests, self._specs, self.batch_size)))
            except OSError:  # stage 0 is gone: the supervisor says why and the collector fails these
                return
        with contextlib.suppress(OSError):  # stage 0 gone: nothing to stop
            self._inbox.send(None)  # stop: every stage ends once the steps before it are done

    def _collect(self) -> None:
        live = dict(self._outboxes)
        while live:
            ended = self._ended.is_set()  # read before the pipes: what they hold then is all there is
            for ready in wait(list(live), timeout=0 if ended else _POLL):
                conn = next(c for c in live if c is ready)  # wait() is typed for sockets and fds too
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    del live[conn]
                    continue
                self._handle(message)
            if ended and not any(conn.poll(0) for conn in live):
                break
        self._ended.wait()  # the pipes can close before the supervisor has said why: wait for its word
        with self._lock:
            self._settled = True
            left = [r for requests in self._in_flight.values() for r in requests]
            self._in_flight.clear()
        self._fail(left, self._failure or DeploymentClosed("the deployment stopped before answering"))
        for conn in self._outboxes:
            conn.close()

    def _handle(self, message: tuple[Any, ...]) -> None:
        if message[0] == "ready":
            self._ready.add(int(message[1]))
            if len(self._ready) == len(self._outboxes):
                self._started.set()
            return
        _, rank, row, arrived, outputs = message
        self._meter.step(rank, row, arrived)
        if outputs is None:
            return
        step = int(row[0])
        with self._lock:
            requests = self._in_flight.pop(step, None)
        if requests is None:  # cannot happen: every step is sent once and answered once
            log.error("the last stage answered step %d, which is not in flight; ignored", step)
            return
        now = time.perf_counter()
        for request, rows in zip(requests, unstack(outputs, len(requests)), strict=True):
            request.future.set_result(rows[0] if len(rows) == 1 else rows)
            self._meter.answered(request.submitted, request.dispatched, now)
        self._slots.release()

    def _fail(self, requests: list[Request], exc: BaseException) -> None:
        failed = 0
        for request in requests:
            # running() first: set_running_or_notify_cancel raises on a future already running.
            if request.future.running() or request.future.set_running_or_notify_cancel():
                request.future.set_exception(exc)
                failed += 1
        self._meter.count("failed", failed)


def deploy_plan(plan: Plan | str | Path, module: nn.Module | None = None, inputs: Any = None,
           options: RunOptions | None = None, serving: ServeOptions | None = None, *,
           kwargs: Mapping[str, Any] | None = None) -> Deployment:
    """Start serving ``plan`` and return the running :class:`Deployment` once every stage is ready.

    The model comes as for :func:`pipeplan.executor.run.run_plan` (the plan's source, or ``module`` on the
    example ``inputs``); ``options`` are a run's (cluster, device, threads, ``timeout`` of every
    wait, schedule); ``serving`` how requests are taken.  Raises what ``run_plan`` raises before
    anything starts, and :class:`~pipeplan.executor.errors.StageFailure` if a stage fails to start.
    """
    options = options or RunOptions()
    if options.loads:
        raise PlanMismatchError("a deployment starts no co-runners (--load): it serves under the loads it finds")
    if torchrun_env() is not None:
        raise PlanMismatchError("a deployment starts its stage processes itself; run it outside torchrun")
    # A deployment runs until closed, and checks no batch of its own: the tests compare its answers.
    calibrate = options.calibrate  # the deployment records its stages' times when it closes, not each batch
    options = dataclasses.replace(options, run_timeout=math.inf, check_batches=0, calibrate=False)
    if not isinstance(plan, Plan):
        plan = Plan.load(plan)
    setup = resolve(plan, options, local=True)
    rebuilt = rebuild(plan, module, inputs, kwargs)
    check_plan(plan, rebuilt.captured.graph)
    from pipeplan.executor.worker import build_stages

    builds = build_stages(plan, rebuilt, check=False)
    log.info("deploying %s on %d stage processes (%s)", plan.model, setup.world_size, setup.backend)
    deployment = Deployment(plan, setup, builds, rebuilt.modules, module is None, serving or ServeOptions())
    deployment.reference = rebuilt.model
    if calibrate:
        deployment.calibration = (rebuilt.captured.graph, setup)
    return deployment
