"""A deployment's measurements, kept as it serves: per stage and per request.

Per stage, over its last ``window`` microbatches, split as the run report splits a run's
(:func:`pipeplan.executor.report._microbatches`): ``compute``; ``recv``, the input's transfer once the
previous stage had it ready; ``send``, posting the output and waiting for it to be taken;
``transfer`` = recv + send; ``idle``, waiting for work — for stage 0, for requests; for the others,
for the stage before them.  Per request, over the last ``window`` answered: ``queueing``, from
``submit`` to its microbatch leaving for stage 0 (the latency bound and any backlog), and
``latency``, from ``submit`` to the answer.  Counters cover the deployment's whole life.

Each switch of layout leaves a :class:`SwitchRecord`: when and why, the layers that moved, the
bytes that crossed the process group and those reloaded, how long serving paused, and the new
plan's predicted bottleneck beside the one measured since (the slowest stage's compute plus
transfer, once the new layout has served a few microbatches).  The per-stage figures restart
with each layout.  Each re-plan, whether it switched or stayed, leaves a :class:`ReplanRecord`: when,
why, the planner's decision, how it changed each device's slowdown and, for a drift re-plan, each
straying stage's measured ÷ predicted compute on the plan it measured.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from pipeplan.executor.report import _microbatches

__all__ = ["DeploymentStats", "LayerMove", "Meter", "ReplanRecord", "StageStats", "SwitchRecord"]

_STEP, _COMP_START, _COMP_END = 0, 4, 5  # columns of a timing row (MicrobatchTiming.as_row)


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass
class StageStats:
    """One stage's means per microbatch, in seconds, over its recent microbatches."""

    index: int
    device: str
    microbatches: int  # served so far
    compute: float
    recv: float
    send: float
    transfer: float
    idle: float
    utilization: float  # compute over the wall time of the window


class LayerMove(NamedTuple):
    """One layer changing device in a switch."""

    layer: str
    source: str  # the device that held it, or "storage" when its process had died (reloaded)
    target: str
    bytes: int  # its parameters and buffers (the graph's param_bytes)


_MEASURE_AFTER = 5  # microbatches the new layout serves before its bottleneck counts as measured


@dataclass
class SwitchRecord:
    """One live switch; times in seconds (``at`` since the deployment started)."""

    layout: int  # the new layout's number
    at: float
    why: str
    devices_before: list[str]
    devices_after: list[str]
    moves: list[LayerMove]
    bytes_sent: int  # state that crossed the process group, from the process that held it
    bytes_reloaded: int  # state of dead devices, from the deployment's copy of the source model
    bytes_kept: int  # state that stayed in its process
    model_bytes: int  # all state: what reloading the whole model would move
    pause: float  # serving stopped: from holding the queue to serving the new layout
    drain: float  # of which waiting for the microbatches in flight
    wait: float  # before the pause: waiting for the feeder to finish its dispatch
    replayed: int  # requests whose microbatch was voided and sent again
    predicted_bottleneck: float  # the new plan's
    started: list[str]  # devices whose process started for this layout
    stopped: list[str]  # devices whose process ended
    measured_bottleneck: float | None = None  # since the switch; None until measured

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["moves"] = [m._asdict() for m in self.moves]
        return doc


@dataclass
class ReplanRecord:
    """One re-plan (``at``: seconds since the deployment started)."""

    at: float
    why: str
    decision: str  # the planner's, "stay" or "switch" (the switch, once made, is a SwitchRecord)
    slowdowns: dict[str, float]  # each device's slowdown in the cluster re-planned for (1: none)
    factors: dict[str, float]  # the devices whose slowdown changed: new ÷ old
    measured: dict[str, float] = field(default_factory=dict)  # a drift re-plan's: measured ÷ predicted compute


@dataclass
class DeploymentStats:
    """What :meth:`pipeplan.executor.deploy.Deployment.stats` returns; times in seconds."""

    submitted: int
    answered: int
    failed: int
    refused: int  # submits turned away by a full queue
    microbatches: int
    padded: int  # padding samples sent to fill partial microbatches
    queued: int  # requests waiting now
    in_flight: int  # microbatches in the pipeline now
    throughput: float  # requests answered per second over the window
    queueing: dict[str, float]  # mean, p50, p99
    latency: dict[str, float]
    stages: list[StageStats] = field(default_factory=list)
    replayed: int = 0  # requests sent again after a lost device voided their microbatch
    switches: list[SwitchRecord] = field(default_factory=list)
    replans: list[ReplanRecord] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["switches"] = [s.to_dict() for s in self.switches]
        return doc


class Meter:
    """Collects timing rows and answered requests from the deployment's threads (thread-safe)."""

    def __init__(self, devices: list[str], window: int = 1000) -> None:
        self.devices = devices
        self._lock = threading.Lock()
        self._rows: list[deque[list[float]]] = [deque(maxlen=window) for _ in devices]
        self._arrived: deque[tuple[int, float]] = deque(maxlen=window)  # stage 0: (step, inputs arrived)
        self._served = [0] * len(devices)
        self._requests: deque[tuple[float, float, float]] = deque(maxlen=window)  # submitted, dispatched, answered
        self.counts = {"submitted": 0, "answered": 0, "failed": 0, "refused": 0, "microbatches": 0, "padded": 0,
                       "replayed": 0}
        self.window = window
        self.switches: list[SwitchRecord] = []
        self.replans: list[ReplanRecord] = []

    def replanned(self, record: ReplanRecord) -> None:
        with self._lock:
            self.replans.append(record)

    def switched(self, record: SwitchRecord, devices: list[str]) -> None:
        """A new layout serves from now on: record the switch and restart the per-stage windows."""
        with self._lock:
            if self.switches and self.switches[-1].measured_bottleneck is None:
                self.switches[-1].measured_bottleneck = self._bottleneck()
            self.switches.append(record)
            self.devices = devices
            self._rows = [deque(maxlen=self.window) for _ in devices]
            self._arrived.clear()
            self._served = [0] * len(devices)

    def _bottleneck(self) -> float | None:
        """The slowest stage's mean compute + transfer over the window (caller holds the lock)."""
        if not self._rows or min(len(r) for r in self._rows) < _MEASURE_AFTER:
            return None
        stats = self._stages(self._rows, dict(self._arrived))
        return max(s.compute + s.transfer for s in stats)

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] += n

    def step(self, rank: int, row: list[float], arrived: float | None) -> None:
        """Stage ``rank`` finished a step (``row``: its timings; ``arrived``: stage 0's input arrival)."""
        with self._lock:
            if rank >= len(self._rows):  # a late row of a layout just left
                return
            self._rows[rank].append(row)
            self._served[rank] += 1
            if arrived is not None:
                self._arrived.append((int(row[_STEP]), arrived))

    def recent_compute(self, n: int) -> list[float] | None:
        """Each stage's mean compute over its last ``n`` microbatches of the current layout; None
        until every stage has run ``n``."""
        with self._lock:
            if not self._rows or min(len(r) for r in self._rows) < n:
                return None
            return [statistics.fmean(r[_COMP_END] - r[_COMP_START] for r in list(rows)[-n:])
                    for rows in self._rows]

    def answered(self, submitted: float, dispatched: float, answered: float) -> None:
        with self._lock:
            self._requests.append((submitted, dispatched, answered))
            self.counts["answered"] += 1

    def snapshot(self, queued: int, in_flight: int) -> DeploymentStats:
        with self._lock:
            rows = [list(r) for r in self._rows]
            arrived = dict(self._arrived)
            requests = list(self._requests)
            counts = dict(self.counts)
            served = list(self._served)
            switches = [dataclasses.replace(r) for r in self.switches]
            if switches and switches[-1].measured_bottleneck is None:
                switches[-1].measured_bottleneck = self._bottleneck()
            devices = list(self.devices)
            replans = list(self.replans)
        stages = self._stages(rows, arrived, served, devices)
        queueing = [d - s for s, d, _ in requests]
        latency = [a - s for s, _, a in requests]
        span = (max(a for *_, a in requests) - min(s for s, *_ in requests)) if len(requests) > 1 else 0.0

        def summary(values: list[float]) -> dict[str, float]:
            return {"mean": statistics.fmean(values) if values else 0.0, "p50": _quantile(values, 0.5),
                    "p99": _quantile(values, 0.99)}

        return DeploymentStats(**counts, queued=queued, in_flight=in_flight,
                               throughput=len(requests) / span if span > 0 else 0.0,
                               queueing=summary(queueing), latency=summary(latency), stages=stages,
                               switches=switches, replans=replans)

    def _stages(self, rows: list[Any], arrived: dict[int, float], served: list[int] | None = None,
                devices: list[str] | None = None) -> list[StageStats]:
        devices = devices if devices is not None else self.devices
        served = served if served is not None else [len(r) for r in rows]
        stages: list[StageStats] = []
        upstream: dict[tuple[int, int], float] = {(step, 0): t for step, t in arrived.items()}
        for k, device in enumerate(devices):
            mbs = _microbatches(rows[k], upstream)
            upstream = {(int(r[_STEP]), 0): r[_COMP_END] for r in rows[k]}
            mean = {key: statistics.fmean(mb[key] for mb in mbs) if mbs else 0.0
                    for key in ("compute", "recv", "send", "idle")}
            span = (rows[k][-1][_COMP_END] - rows[k][0][2]) if rows[k] else 0.0
            utilization = sum(mb["compute"] for mb in mbs) / span if span > 0 else 0.0
            stages.append(StageStats(k, device, served[k], mean["compute"], mean["recv"], mean["send"],
                                     mean["recv"] + mean["send"], mean["idle"], utilization))
        return stages
