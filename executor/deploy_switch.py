"""Live switches of a deployment: drain, move the layers that change over the process group, resume.

A switch runs on the deployment's *switcher* thread, one at a time:

1. **Pause** — hold the request queue and take the feeder's lock: nothing is dispatched from here on.
2. **Drain** — wait for the microbatches in flight to be answered (a planned switch), or **void**
   them (a lost device): their requests go back to the front of the queue, in order, and any late
   answer to a voided step is dropped, so each is answered once, by the new layout.
3. **Leave** — every process leaves the old layout's process group (:class:`~pipeplan.executor.deploy_stage.Leave`);
   one that does not within the process group's timeout is stopped, and its state counts as lost.
4. **Enter** — the new layout's orders (:mod:`pipeplan.executor.deploy_layout`): processes start for
   new devices, the state that changes device goes over a new process group from its holder,
   a dead device's state is reloaded from the deployment's copy, processes without a part end.
5. **Resume** — the feeder dispatches again; the switch is recorded in the statistics.

Triggers: :meth:`Switching.switch` (a plan), :meth:`Switching.replan` (a cluster state:
:func:`pipeplan.planner.replan.replan` decides whether to move, counting what moving costs),
:meth:`Switching.remove_device` and :meth:`Switching.add_device`; a device process that dies (the
supervisor calls ``_lost``); a stage whose measured compute drifts from its prediction
(``ServeOptions.drift``: the cluster state then says the device is that much slower or faster).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import queue
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from pipeplan.costmodel.cluster import Cluster
from pipeplan.executor.deploy_enter import LayoutEntry
from pipeplan.executor.deploy_layout import StateIndex
from pipeplan.executor.deploy_options import refuse_loans
from pipeplan.executor.deploy_stage import Leave
from pipeplan.executor.deploy_stats import ReplanRecord, SwitchRecord
from pipeplan.executor.deploy_triggers import cluster_without, watch_drift
from pipeplan.executor.errors import PlanMismatchError, RunError
from pipeplan.executor.options import RunOptions, RunSetup
from pipeplan.executor.validate import check_plan
from pipeplan.planner.plan import Plan

if TYPE_CHECKING:
    from pipeplan.executor.deploy_batcher import Request, RequestQueue

__all__ = ["Switching"]

log = logging.getLogger(__name__)

_LEAVE_GRACE = 5.0  # seconds beyond the process group's timeout a process may take to leave a layout


class Switching(LayoutEntry):
    """The switching half of :class:`pipeplan.executor.deploy.Deployment` (state, jobs, triggers);
    entering the new layout is :class:`~pipeplan.executor.deploy_enter.LayoutEntry`'s."""

    # What the deployment provides (pipeplan.executor.deploy), beyond what LayoutEntry names.
    _dispatch: threading.Lock
    _in_flight: dict[int, list[Request]]
    _queue: RequestQueue
    _stopping: bool
    _threads: list[threading.Thread]

    def _end(self, failure: BaseException | None) -> None:
        raise NotImplementedError

    def _fail(self, requests: list[Request], exc: BaseException) -> None:
        raise NotImplementedError

    def _init_switching(self, setup: RunSetup, rebuilt: Any, builds: list[Any],
                        options: RunOptions) -> None:
        self._setup, self._options = setup, options
        self._captured = rebuilt.captured
        self._index = StateIndex(rebuilt.captured)
        # The deployment's copy of the weights: only layers whose holder died are reloaded from it.
        self.source_state = self._index.tensors
        self._example_build = builds[0]
        self.cluster = Cluster.from_dict(setup.cluster)
        self._devices = [s.device for s in setup.stages]
        self._init_layout()
        self._steps = itertools.count()
        self._epoch = time.perf_counter()
        self._jobs: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self._recovering = False
        # Held by a re-plan from reading the cluster to its switch: two triggers at once (a drift and a
        # device taken away) must not re-plan each from the cluster as it was before the other.
        self._replanning = threading.RLock()
        self._tmp = tempfile.TemporaryDirectory(prefix="pipeplan-deploy-")

    def _capacity(self) -> int:
        return self.serving.in_flight or len(self._devices) + 1

    # -- the public triggers ------------------------------------------------------------------

    def switch(self, plan: Plan, why: str = "switch requested") -> SwitchRecord:
        """Change to ``plan``'s layout live and return the record of the switch.

        The plan must be for the deployed model, on devices of :attr:`cluster`, and borrow no memory
        (a harvest plan is refused: :func:`~pipeplan.executor.deploy_options.refuse_loans`).  Requests keep
        coming in; those queued or in flight are answered once, by one layout or the other."""
        check_plan(plan, self._captured.graph)
        refuse_loans(plan)
        missing = [s.device for s in plan.stages if s.device not in {d.id for d in self.cluster.devices}]
        if missing:
            raise PlanMismatchError(f"the plan puts stages on {', '.join(missing)}, which the deployment's cluster "
                                    f"{self.cluster.name!r} lacks: use replan(cluster) or add_device(cluster)")
        return self._run_job("switch", plan, why)

    def replan(self, cluster: Cluster, why: str = "cluster changed", horizon: str | None = None,
               costmodel: Any = None, time_limit: float = 5.0,
               measured: dict[str, float] | None = None) -> SwitchRecord | None:
        """Re-plan for ``cluster`` (the new state: loads, devices gone or added) with the cost of
        moving counted (:func:`pipeplan.planner.replan.replan`), and switch if the new plan moves;
        None when staying is best.  Every re-plan that made a plan is recorded (``stats().replans``:
        ``decision`` is the planner's; a switch that then fails leaves no switch record), with what a
        trigger ``measured`` (device → measured ÷ predicted compute) if it says."""
        with self._replanning:
            plan = self._replanned(cluster, horizon, costmodel, time_limit)
            stay = plan.migration is not None and plan.migration.decision == "stay"
            self._record_replan(self.cluster, cluster, why, "stay" if stay else "switch", measured)
            self.cluster = cluster
            if stay:
                log.info("re-planned for %s (%s): staying", cluster.name, why)
                return None
            return self._run_job("switch", plan, why)

    def replan_change(self, change: Callable[[Cluster], Cluster | None], why: str,
                      **kwargs: Any) -> SwitchRecord | None:
        """Re-plan for ``change(cluster)``, the cluster read once no other re-plan is under way
        (``change`` returns None when, by then, it no longer applies: nothing is re-planned)."""
        with self._replanning:
            cluster = change(self.cluster)
            return None if cluster is None else self.replan(cluster, why, **kwargs)

    def remove_device(self, device: str, why: str | None = None) -> SwitchRecord | None:
        """Take ``device`` away, announced: re-plan without it; its process sends its layers on, then ends."""
        return self.replan_change(lambda c: cluster_without(c, {device}), why or f"device {device} removed")

    def add_device(self, cluster: Cluster, why: str | None = None) -> SwitchRecord | None:
        """Offer the devices of ``cluster`` (the current ones and new ones): re-plan onto them."""
        with self._replanning:
            added = sorted({d.id for d in cluster.devices} - {d.id for d in self.cluster.devices})
            return self.replan(cluster, why or f"device{'s' if len(added) != 1 else ''} {', '.join(added)} added")

    # -- jobs -------------------------------------------------------------------------------------

    def _start_switcher(self) -> None:
        threads = [threading.Thread(target=self._switcher, name="pipeplan-deploy-switcher", daemon=True)]
        if self.serving.drift is not None:
            threads.append(threading.Thread(target=watch_drift, args=(self,), name="pipeplan-deploy-drift",
                                            daemon=True))
        for thread in threads:
            thread.start()
        self._threads += threads

    def _stop_switcher(self) -> None:
        self._jobs.put(None)

    def _run_job(self, *job: Any) -> Any:
        if self._ended.is_set() or self._queue.closed:
            raise RunError("the deployment is closed: it cannot switch")
        done: Future[Any] = Future()
        self._jobs.put((*job, done))
        return done.result()

    def _switcher(self) -> None:
        while (job := self._jobs.get()) is not None:
            kind, *args, done = job
            try:
                result = self._recover(*args) if kind == "recover" else self._switch(*args)
            except BaseException as exc:  # a switch that fails leaves no layout to serve: the deployment ends
                log.error("switch failed: %s", exc)
                if done is not None:
                    done.set_exception(exc)
                self._end(exc if isinstance(exc, RunError) else RunError(f"a switch failed: {exc}"))
                return
            if done is not None:
                done.set_result(result)

    def _lost(self, device: str, reason: str, dead: bool) -> None:
        """A process died (``dead``) or left its layout on a failed transfer: re-plan onto the live ones."""
        with self._lock:
            if self._recovering or self._ended.is_set() or self._stopping or self._layout < 0:
                return
            self._recovering = True
        log.warning("lost %s (%s): re-planning onto the devices left", device, reason)
        self._jobs.put(("recover", reason, None))

    def _record_replan(self, before: Cluster, after: Cluster, why: str, decision: str,
                       measured: dict[str, float] | None = None) -> None:
        """Record a re-plan from the cluster ``before`` to ``after`` (``stats().replans``)."""
        old = {dev.id: dev.slowdown or 1.0 for dev in before.devices}
        new = {dev.id: dev.slowdown or 1.0 for dev in after.devices}
        self._meter.replanned(ReplanRecord(
            at=time.perf_counter() - self._epoch, why=why, decision=decision, slowdowns=new,
            factors={k: v / old[k] for k, v in new.items() if k in old and v != old[k]},
            measured=dict(measured or {})))

    def _replanned_without(self, dead: set[str], why: str) -> Plan:
        """The cluster without the ``dead`` devices becomes the deployment's, and the plan for it
        (recorded as a re-plan that switches)."""
        before, self.cluster = self.cluster, cluster_without(self.cluster, dead)
        plan = self._replanned(self.cluster, None, None, 5.0)
        self._record_replan(before, self.cluster, why, "switch")
        return plan

    # -- the switch ------------------------------------------------------------------------------

    def _switch(self, plan: Plan, why: str) -> SwitchRecord:
        started = time.perf_counter()
        self._queue.hold()
        try:
            with self._dispatch:
                held = time.perf_counter()
                replayed = self._drain()
                drained = time.perf_counter()
                dead = self._leave()
                if dead:  # lost a device while switching: the plan asked for may need it
                    why += f"; re-planned without {', '.join(sorted(dead))}"
                    plan = self._replanned_without(dead, why)
                return self._enter_plan(plan, why, started, held, drained, replayed)
        finally:
            self._queue.release()

    def _recover(self, reason: str) -> SwitchRecord:
        started = time.perf_counter()
        self._queue.hold()
        try:
            with self._dispatch:
                held = time.perf_counter()
                replayed = self._void()
                dead = self._leave()
                with self._lock:
                    self._recovering = False  # another loss from here on is another recovery
                if not self._procs:
                    raise RunError(f"every device process is gone ({reason}): nothing left to serve on")
                why = f"recovery: {', '.join(sorted(dead))} lost" if dead else "recovery: no process lost"
                plan = self._replanned_without(dead, why) if dead else self.plan
                return self._enter_plan(plan, f"{why} (first notice: {reason[:160]})", started, held, held,
                                        replayed)
        finally:
            self._queue.release()

    def _drain(self) -> int:
        """Wait for the steps in flight to be answered; void them instead if a device is lost meanwhile."""
        deadline = time.perf_counter() + self._options.timeout
        with self._changed:
            while self._in_flight and not self._recovering and not self._ended.is_set():
                if time.perf_counter() > deadline:
                    break
                self._changed.wait(0.05)
        return self._void()

    def _void(self) -> int:
        """Send the requests of every step in flight back to the front of the queue; return how many."""
        with self._changed:
            steps = sorted(self._in_flight)
            requests = [r for s in steps for r in self._in_flight.pop(s)]
            self._changed.notify_all()
            ended = self._ended.is_set()
            if not ended:  # under the lock: _end sets _ended under it, then fails what the queue holds
                self._queue.requeue(requests)
        if ended:  # taken out of _in_flight, so the serving thread's last sweep will not see them: fail them here
            failure = self._failure or RunError("the deployment ended while switching")
            self._fail(requests, failure)
            raise failure
        self._meter.count("replayed", len(requests))
        return len(requests)

    def _leave(self) -> set[str]:
        """Make every live process leave the current layout; return the devices whose process is gone."""
        number = self._layout
        with self._lock:
            procs = dict(self._procs)
        for proc in procs.values():
            proc.send(Leave(number))
        deadline = time.perf_counter() + self._options.timeout + _LEAVE_GRACE
        with self._changed:
            while True:
                waiting = [d for d, p in procs.items() if p.alive() and (number, d) not in self._reports]
                if not waiting or time.perf_counter() > deadline:
                    break
                self._changed.wait(0.05)
        for device in waiting:  # stuck in a transfer past the timeout: its state counts as lost
            log.warning("the process of %s did not leave layout %d; stopping it", device, number)
            procs[device].stop()
        dead = {d for d, p in procs.items() if not p.alive()}
        with self._lock:
            for device in dead:
                self._procs.pop(device, None)
                self._holdings.pop(device, None)
        return dead

    def _replanned(self, cluster: Cluster, horizon: str | None, costmodel: Any,
                   time_limit: float) -> Plan:
        from pipeplan.costmodel.registry import load_cost_model
        from pipeplan.planner.ilp import SolverOptions
        from pipeplan.planner.migration import Horizon
        from pipeplan.planner.problem import Problem
        from pipeplan.planner.replan import replan

        if costmodel is None:
            try:
                costmodel = load_cost_model(self.plan.costmodel)
            except ValueError:
                costmodel = load_cost_model("analytic")
        options = self.plan.options
        if options.max_devices is not None and options.max_devices > len(cluster.devices):
            options = dataclasses.replace(options, max_devices=None)
        problem = Problem(self._captured.graph, cluster, costmodel, options)
        current = Plan.from_dict(self.plan.to_dict())
        plan = replan(problem, current, Horizon.parse(horizon or self.serving.horizon), reload=self.serving.reload,
                      options=SolverOptions(time_limit=time_limit, workers=1))
        refuse_loans(plan, "the re-planned layout")  # no switch to a borrowing layout (today's re-planner picks none)
        return plan
