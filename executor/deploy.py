"""A deployment: a plan kept running, answering a stream of requests, changing layout live.

::

    from pipeplan.executor import ServeOptions, deploy_plan
    with deploy_plan("plan.json", serving=ServeOptions(max_wait_ms=2)) as d:
        future = d.submit(sample)             # one sample: the example's inputs without the batch dimension
        logits = future.result()              # equal to the unsplit model's output for that sample
        d.switch(other_plan)                  # or d.replan(cluster): move the layers that change, live
        print(d.stats().latency["p99"], d.stats().switches)

One process per device (:mod:`pipeplan.executor.deploy_procs`), serving a stage of the current layout
(:mod:`pipeplan.executor.deploy_stage`); a harvest plan's lenders outside the pipeline are processes
too, and its borrowed weights are streamed as a run streams them (:mod:`pipeplan.executor.deploy_loans`:
only the layout a deployment starts with may borrow).  Threads of this process drive them:

- the *feeder*, the *collector* and the *supervisor* (:mod:`pipeplan.executor.deploy_serving`) dispatch
  microbatches, answer requests and watch the processes; a lost device is re-planned around —
  or, with ``ServeOptions(recover=False)``, fails every request not yet answered;
- the *switcher* runs switches one at a time (:mod:`pipeplan.executor.deploy_switch`).

Every request is answered exactly once: it is in one place at a time (queue, feeder, in flight,
answered), and only the thread that holds it settles its future.  A switch holds the queue and
takes the feeder's lock, so nothing is dispatched while the layout changes; a lost device voids the
steps in flight, whose requests go back to the front of the queue, and any late answer to a voided
step is dropped.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pipeplan.costmodel.source import flat_inputs
from pipeplan.executor.deploy_batcher import Request, RequestQueue, input_specs, sample_inputs
from pipeplan.executor.deploy_loans import check_servable
from pipeplan.executor.deploy_options import ServeOptions
from pipeplan.executor.deploy_serving import ServingThreads
from pipeplan.executor.deploy_stats import DeploymentStats, Meter
from pipeplan.executor.errors import DeploymentClosed, PlanMismatchError, QueueFullError
from pipeplan.executor.launch import torchrun_env
from pipeplan.executor.lender import LenderBuild
from pipeplan.executor.lending import apply_loans, resolve_loans
from pipeplan.executor.options import RunOptions, RunSetup, resolve
from pipeplan.executor.source import Rebuilt, batch_inputs, batch_kwargs, rebuild
from pipeplan.executor.validate import check_plan
from pipeplan.planner.plan import Plan

__all__ = ["Deployment", "ServeOptions", "deploy_plan"]

log = logging.getLogger(__name__)

_CALIBRATE_AFTER = 20  # microbatches a deployment must have served for its times to calibrate


class Deployment(ServingThreads):
    """A running pipeline; make it with :func:`deploy_plan`.  Thread-safe."""

    def __init__(self, plan: Plan, setup: RunSetup, rebuilt: Rebuilt, builds: list[Any], options: RunOptions,
                 serving: ServeOptions, lenders: list[LenderBuild] | None = None) -> None:
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
        self._lock = threading.Lock()  # guards _in_flight, _settled and the process table
        self._changed = threading.Condition(self._lock)  # in flight shrank, a report came, a process ended
        self._dispatch = threading.Lock()  # held by the feeder while it dispatches, by a switch while it runs
        self._in_flight: dict[int, list[Request]] = {}
        self._settled = False  # the deployment has ended: nothing may enter _in_flight
        self._stopping = False  # the feeder told the processes to stop
        self._ids = itertools.count()
        self._ended = threading.Event()
        self._failure: BaseException | None = None
        self.totals: list[dict[str, Any]] | None = None  # each stage's totals, after a clean close
        self._ended_totals: dict[str, dict[str, Any]] = {}
        # What feeds the calibration store when a drained deployment closes (deploy_plan sets it
        # when the run options calibrate); the notes say what it recorded.
        self.calibration: tuple[Any, Any] | None = None  # (the captured graph, the run setup)
        self.calibration_notes: list[str] = []
        self._init_switching(setup, rebuilt, builds, options)
        self._threads = [threading.Thread(target=self._supervise, name="pipeplan-deploy-supervisor", daemon=True),
                         threading.Thread(target=self._collect, name="pipeplan-deploy-collector", daemon=True)]
        for thread in self._threads:
            thread.start()
        try:
            self._start(builds, lenders or [])
        except BaseException:
            self._end(None)
            raise
        self._threads.append(threading.Thread(target=self._feed, name="pipeplan-deploy-feeder", daemon=True))
        self._threads[-1].start()
        self._start_switcher()

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
        (:func:`pipeplan.executor.source.batch_inputs`: samples of the example, drawn at random): a load to serve."""
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
        """Counters, per-request queueing and latency, per-stage compute, transfer and idle times of
        the current layout, and every switch (see :mod:`pipeplan.executor.deploy_stats`)."""
        with self._lock:
            in_flight = len(self._in_flight)
        return self._meter.snapshot(len(self._queue), in_flight)

    @property
    def failure(self) -> BaseException | None:
        """Why the deployment stopped serving (a :class:`~pipeplan.executor.errors.StageFailure`), or None."""
        return self._failure

    def close(self, drain: bool = True, timeout: float = 60.0) -> None:
        """Stop taking requests; with ``drain``, answer every queued one first, else fail them with
        :class:`~pipeplan.executor.errors.DeploymentClosed`.  Then stop the processes (waiting up to
        ``timeout`` seconds, after which they are killed).  Raises the stage failure, if one ended the
        deployment."""
        closed = DeploymentClosed("the deployment was closed")
        self._stop_switcher()
        self._queue.close(closed)
        if not drain:
            self._fail(self._queue.clear(), closed)
        self._ended.wait(timeout)
        if not self._ended.is_set():
            log.warning("deployment processes did not stop within %gs; stopping them", timeout)
            self._end(None)
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
        if self.calibration is None or min((s.microbatches for s in stats.stages), default=0) < _CALIBRATE_AFTER:
            return
        from pipeplan.executor.run import feed_back

        graph = self.calibration[0]
        self.calibration_notes = feed_back(self.plan, graph, self._setup, [s.compute for s in stats.stages])
        for note in self.calibration_notes:
            log.info("%s", note)

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(drain=exc[0] is None)

    # -- the threads ---------------------------------------------------------------------------



def deploy_plan(plan: Plan | str | Path, module: nn.Module | None = None, inputs: Any = None,
                options: RunOptions | None = None, serving: ServeOptions | None = None, *,
                kwargs: Mapping[str, Any] | None = None) -> Deployment:
    """Start serving ``plan`` and return the running :class:`Deployment` once every stage is ready.

    The model comes as for :func:`pipeplan.executor.run.run_plan` (the plan's source, or ``module`` on the
    example ``inputs``); ``options`` are a run's (cluster, device, threads, ``timeout`` of every
    wait, schedule); ``serving`` how requests are taken and when the layout changes.  Raises what
    ``run_plan`` raises before anything starts, and :class:`~pipeplan.executor.errors.StageFailure` if a
    stage fails to start.  A plan that borrows memory (a ``harvest`` section with loans) is served with
    its loans, lenders as processes of the deployment (:mod:`pipeplan.executor.deploy_loans`), if it
    fetches each microbatch and stashes nothing (else a :class:`~pipeplan.executor.errors.PlanMismatchError`).
    """
    options = options or RunOptions()
    if options.loads:
        raise PlanMismatchError("a deployment starts no co-runners (--load): it serves under the loads it finds")
    if options.memory_caps:
        raise PlanMismatchError("a deployment takes no memory caps (memory_caps, --memory-cap): a harvest plan's "
                                "memory map caps the layout it starts with; run the plan with `pipeplan run` to "
                                "check other caps")
    if torchrun_env() is not None:
        raise PlanMismatchError("a deployment starts its stage processes itself; run it outside torchrun")
    # A deployment runs until closed, and checks no batch of its own: the tests compare its answers.
    calibrate = options.calibrate  # the deployment records its stages' times when it closes, not each batch
    options = dataclasses.replace(options, run_timeout=math.inf, check_batches=0, calibrate=False)
    if not isinstance(plan, Plan):
        plan = Plan.load(plan)
    check_servable(plan)
    setup = resolve_loans(plan, resolve(plan, options, local=True))
    rebuilt = rebuild(plan, module, inputs, kwargs)
    check_plan(plan, rebuilt.captured.graph)
    from pipeplan.executor.stage_build import build_stages

    builds = build_stages(plan, rebuilt, check=False)
    lenders = apply_loans(builds, setup)  # a harvest plan's: the lent weights leave their stages (deploy_loans)
    log.info("deploying %s on %d stage processes%s (%s)", plan.model, len(setup.stages),
             f" and {len(lenders)} lender processes" if lenders else "", setup.backend)
    deployment = Deployment(plan, setup, rebuilt, builds, options, serving or ServeOptions(), lenders)
    deployment.reference = rebuilt.model
    if calibrate:
        deployment.calibration = (rebuilt.captured.graph, setup)
    return deployment

