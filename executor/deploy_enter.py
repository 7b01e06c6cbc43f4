"""Entering a layout: the last step of a switch, and the deployment's start.

Processes start for the layout's new devices, every process gets its orders
(:mod:`pipeplan.executor.deploy_layout`: its stage, the state it keeps, sends, receives or
reloads), and the deployment waits until each reports ready; the process table is then the new
layout's.  A switch's record (:class:`~pipeplan.executor.deploy_stats.SwitchRecord`: what moved,
what the pause cost) is written here, where the figures are known.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeplan.costmodel.cluster import Cluster
from pipeplan.executor.deploy_layout import LayoutOrders, StateIndex, layout_orders, stage_builds
from pipeplan.executor.deploy_options import refuse_loans
from pipeplan.executor.deploy_procs import DeviceProcess, start_device
from pipeplan.executor.deploy_stage import Parked, Ready
from pipeplan.executor.deploy_stats import LayerMove, SwitchRecord
from pipeplan.executor.errors import RunError
from pipeplan.executor.launch import free_port
from pipeplan.executor.options import RunOptions, RunSetup, resolve
from pipeplan.planner.plan import Plan

if TYPE_CHECKING:
    import tempfile

    from pipeplan.costmodel.capture import CapturedProgram
    from pipeplan.executor.deploy_options import ServeOptions
    from pipeplan.executor.deploy_stats import Meter
    from pipeplan.executor.lender import LenderBuild
    from pipeplan.executor.stage_build import StageBuild

__all__ = ["LayoutEntry"]

log = logging.getLogger(__name__)


class LayoutEntry:
    """The layout half of :class:`pipeplan.executor.deploy_switch.Switching`: the device processes,
    the layout they serve, and entering a new one."""

    # What the deployment and its switching provide (pipeplan.executor.deploy, .deploy_switch).
    plan: Plan
    serving: ServeOptions
    cluster: Cluster
    _lock: threading.Lock
    _changed: threading.Condition
    _meter: Meter
    _ended: threading.Event
    _failure: BaseException | None
    _setup: RunSetup
    _options: RunOptions
    _captured: CapturedProgram
    _index: StateIndex
    _example_build: StageBuild
    _epoch: float
    _devices: list[str]  # the current layout's stage devices, in stage order
    _tmp: tempfile.TemporaryDirectory[str]

    def _init_layout(self) -> None:
        self._procs: dict[str, DeviceProcess] = {}  # the live processes, by device
        self._all_procs: list[DeviceProcess] = []  # every process started, for the supervisor
        self._outboxes: dict[Connection, DeviceProcess] = {}
        self._holdings: dict[str, set[str]] = {}  # device → the state keys its process holds
        self._reports: dict[tuple[int, str], Ready | Parked] = {}
        self._layout = -1

    def _start(self, builds: list[Any], lenders: list[LenderBuild]) -> None:
        orders = layout_orders(0, self._setup, builds, self._index, {}, init_method=_init_method(),
                               epoch=self._epoch, first=True, lenders=lenders)
        self._enter(orders, self._setup, self.plan, self.serving.start_timeout)

    def _enter_plan(self, plan: Plan, why: str, started: float, held: float, drained: float,
                    replayed: int) -> SwitchRecord:
        if not self._procs and not self.cluster.devices:
            raise RunError("no devices left to serve on")
        # Only the first layout borrows (deploy_loans): a recovery that lost no process cannot enter it again.
        refuse_loans(plan, "the deployment's layout, entered again after a failed transfer,")
        path = Path(self._tmp.name) / f"cluster-{self._layout + 1}.json"
        self.cluster.save(path)
        setup = resolve(plan, dataclasses.replace(self._options, cluster=str(path)), local=True)
        if setup.backend != "gloo" or any(s.gpu is not None for s in setup.stages):
            raise RunError("a live switch moves state over gloo between CPU stages; this layout uses GPUs")
        builds = stage_builds(self._captured, plan, self._example_build)
        with self._lock:
            holdings = {d: set(keys) for d, keys in self._holdings.items() if d in self._procs}
        before = self.plan
        orders = layout_orders(self._layout + 1, setup, builds, self._index, holdings, init_method=_init_method(),
                               epoch=self._epoch)
        readies = self._enter(orders, setup, plan, self.serving.start_timeout)
        resumed = time.perf_counter()
        old = before.assignment()
        moves = [LayerMove(layer, old[layer] if old[layer] in holdings else "storage", device,
                           self._captured.graph[layer].param_bytes)
                 for layer, device in plan.assignment().items() if old.get(layer) != device]
        record = SwitchRecord(
            layout=orders.orders[setup.stages[0].device].number, at=started - self._epoch, why=why,
            devices_before=[s.device for s in before.stages], devices_after=[s.device for s in plan.stages],
            moves=moves, bytes_sent=sum(r.received for r in readies), bytes_reloaded=sum(r.reloaded for r in readies),
            bytes_kept=sum(r.kept for r in readies),
            model_bytes=sum(self._index.nbytes(k) for k in self._index.tensors),
            pause=resumed - held, drain=drained - held, wait=held - started, replayed=replayed,
            predicted_bottleneck=plan.bottleneck,
            started=[d for d in orders.orders if d not in holdings], stopped=[*orders.stop,
                                                                             *(d for d, o in orders.orders.items()
                                                                               if o.stage is None)])
        self._meter.switched(record, [s.device for s in setup.stages])
        log.info("switched to layout %d (%s): %d layers moved, %d bytes sent, paused %.3fs", record.layout, why,
                 len(moves), record.bytes_sent, record.pause)
        return record

    def _enter(self, orders: LayoutOrders, setup: RunSetup, plan: Plan, timeout: float) -> list[Ready]:
        """Send the orders (starting processes for new devices) and wait for every one to answer."""
        number = next(iter(orders.orders.values())).number
        with self._lock:
            for device in orders.orders:
                if device not in self._procs:
                    proc = start_device(device, setup, self._registrations())
                    self._procs[device] = proc
                    self._all_procs.append(proc)
                    self._outboxes[proc.outbox] = proc
            procs = dict(self._procs)
        for device in orders.stop:
            procs[device].send(_stop())
        for device, order in orders.orders.items():
            procs[device].send(order)
        deadline = time.perf_counter() + timeout
        with self._changed:
            while True:
                waiting = [d for d in orders.orders if not isinstance(self._reports.get((number, d)), Ready)]
                gone = [d for d in waiting if not procs[d].alive()]
                if not waiting or gone or self._ended.is_set():
                    break
                if time.perf_counter() > deadline:
                    raise RunError(f"layout {number}: {', '.join(waiting)} not ready after {timeout:g}s "
                                   "(ServeOptions.start_timeout)")
                self._changed.wait(0.05)
        if gone or self._ended.is_set():
            if self._failure is not None:
                raise self._failure
            kind, result = procs[gone[0]].collect()
            from pipeplan.executor.errors import StageFailure

            stage = orders.orders[gone[0]].stage
            raise StageFailure(stage if stage is not None else -1, gone[0], result["message"] if kind == "error"
                               else "the process ended before its layout was ready", result.get("details", "")
                               if isinstance(result, dict) else "")
        readies = [r for d in orders.orders if isinstance(r := self._reports[(number, d)], Ready)]
        with self._lock:
            self._layout = number
            self._setup, self.plan = setup, plan
            self._devices = [s.device for s in setup.stages]
            for device, order in orders.orders.items():
                if order.lend is not None:  # a lender of its own: what it lends is no state it holds
                    self._holdings[device] = set()
                elif order.stage is None:
                    self._procs.pop(device, None)
                    self._holdings.pop(device, None)
                else:
                    self._holdings[device] = set(order.attrs.values())
            for device in orders.stop:
                self._procs.pop(device, None)
                self._holdings.pop(device, None)
            self._reports = {k: v for k, v in self._reports.items() if k[0] > number}
        return readies

    def _registrations(self) -> list[str]:
        from pipeplan.executor.source import registrations

        return registrations(self._captured.program)


def _init_method() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def _stop() -> Any:
    from pipeplan.executor.deploy_stage import Stop

    return Stop("no part in the new layout")
