"""A partitioning problem: a layer graph, a cluster, and every cost the planners need, in one place.

The ILP, the baselines and the simulator all read their numbers from a :class:`Problem`, so a plan
is scored the same way whoever made it.  The graph's batch size is the *microbatch*: a stage's time
is the time of one microbatch through it.

Costs (seconds, per microbatch):

- ``time[v][d]``: layer ``v`` on device ``d`` under that device's current load (the cost model),
  times the device's measured ``slowdown`` where one is set;
- ``stage_overhead[d]``: what a stage on ``d`` pays once per microbatch whatever its layers
  (:meth:`pipeplan.costmodel.base.CostModel.stage_overhead`: a shared GPU's time-slice waits), added to the
  stage's compute by the simulator;
- ``transfer(u, a, b)``: layer ``u``'s output sent from device ``a`` to ``b`` — the link's latency
  plus ``out_bytes(u) / bandwidth``, where ``out_bytes(u)`` is the largest tensor ``u`` hands to any
  consumer.  With ``transfer="per-device"`` (the default) a layer's output crosses to each consuming
  device once, however many layers there read it; with ``transfer="per-edge"`` it is sent once per
  consumer on another device (a runtime that sends a tensor per consuming op), so a plan never
  costs less under ``per-edge``, and every bound of the default rule holds for it;
- a stage's time is ``max(compute, receive, send)`` with ``comm="overlap"`` or their sum with
  ``comm="serial"`` (PipeDream; Tarnawski et al., NeurIPS 2020).

Memory of a device, as inference uses it (:mod:`pipeplan.costmodel.memory`): the weights of its layers and,
when ``graph.meta["kv_context"]`` is set, their KV cache for ``in_flight`` microbatches; plus the
peak live set of one microbatch (tensors alive from producer to last consumer, in the graph's
order) and the boundary tensors of the other microbatches in flight.  Every planner reads it as
``Σ param_bytes + in_flight · Σ act_bytes + max workspace`` over a device's layers; the terms come
from :func:`pipeplan.costmodel.memory.planner_terms`, which bounds the liveness figure from above for every
stage that is an interval of the graph's order.  It must stay under
``capacity · (1 − memory_margin)``.

Placement constraints (``pins``, ``keep_together``, ``forbid_devices``; :mod:`pipeplan.planner.constraints`)
are resolved against the graph and the cluster when the problem is made, into ``placement``; an
unknown layer or device, or constraints that conflict, raise :class:`PlanError` naming them.
``max_devices`` caps the number of stages (every used device holds one stage).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.base import CostModel
from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.memory import LivenessError, planner_terms
from pipeplan.errors import UserError
from pipeplan.planner.constraints import Pin, Placement, PlacementError, PlacementRules, pins_of, resolve

__all__ = ["CommMode", "Objective", "PlanError", "PlanOptions", "Problem", "TransferRule"]

CommMode = Literal["overlap", "serial"]
Objective = Literal["throughput", "latency"]
TransferRule = Literal["per-device", "per-edge"]


class PlanError(UserError, ValueError):
    """The problem has no valid plan (a model that cannot fit), or the options are wrong."""


@dataclass(frozen=True)
class PlanOptions:
    objective: Objective = "throughput"
    comm: CommMode = "overlap"
    microbatches: int = 4
    in_flight: int | None = None  # microbatches whose activations a stage keeps; None → microbatches
    memory_margin: float = 0.1  # share of each device's memory kept free for the runtime
    min_throughput: float | None = None  # samples/s floor (a plan's throughput) for the latency objective
    max_devices: int | None = None  # use at most this many devices, so at most this many stages
    transfer: TransferRule = "per-device"  # a sender pays once per receiving device, or once per consumer
    pins: tuple[Pin, ...] = ()  # layers (name or glob) that must run on a device (id or type)
    keep_together: tuple[tuple[str, ...], ...] = ()  # groups of layers (names or globs), each on one device
    forbid_devices: tuple[str, ...] = ()  # devices (ids or types) no layer may use

    def __post_init__(self) -> None:
        # JSON and the API give lists; frozen options keep tuples (hashable, and equal when re-read)
        try:
            object.__setattr__(self, "pins", pins_of(self.pins))
        except PlacementError as exc:
            raise PlanError(str(exc)) from None
        object.__setattr__(self, "keep_together", tuple(_name_list("keep_together group", g) for g in
                                                        _sequence("keep_together", self.keep_together)))
        object.__setattr__(self, "forbid_devices", _name_list("forbid_devices", self.forbid_devices))
        if self.transfer not in ("per-device", "per-edge"):
            raise PlanError(f"transfer must be 'per-device' or 'per-edge', got {self.transfer!r}")
        if self.objective not in ("throughput", "latency"):
            raise PlanError(f"objective must be 'throughput' or 'latency', got {self.objective!r}")
        if self.comm not in ("overlap", "serial"):
            raise PlanError(f"comm must be 'overlap' or 'serial', got {self.comm!r}")
        if self.microbatches < 1:
            raise PlanError(f"microbatches must be at least 1, got {self.microbatches}")
        if self.in_flight is not None and self.in_flight < 1:
            raise PlanError(f"in_flight must be at least 1, got {self.in_flight}")
        if not 0.0 <= self.memory_margin < 1.0:
            raise PlanError(f"memory_margin must be in [0, 1), got {self.memory_margin}")
        if self.min_throughput is not None and self.min_throughput <= 0:
            raise PlanError(f"min_throughput must be positive, got {self.min_throughput}")
        if self.max_devices is not None and self.max_devices < 1:
            raise PlanError(f"max_devices must be at least 1, got {self.max_devices}")

    @property
    def kept_microbatches(self) -> int:
        return self.in_flight if self.in_flight is not None else self.microbatches

    @property
    def rules(self) -> PlacementRules:
        """The placement constraints, as written."""
        return PlacementRules(self.pins, self.keep_together, self.forbid_devices)


def _sequence(what: str, value: object) -> tuple[object, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise PlanError(f"{what} must be a list, got {value!r}")
    return tuple(value)


def _name_list(what: str, value: object) -> tuple[str, ...]:
    """A list of non-empty names or globs, as a tuple."""
    items = _sequence(what, value)
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise PlanError(f"{what} holds {item!r}: give non-empty layer or device names")
    return tuple(str(item).strip() for item in items)


@dataclass
class Problem:
    """Everything a planner needs, precomputed: layers, devices, times, transfers, memory."""

    graph: ModelGraph
    cluster: Cluster
    costmodel: CostModel = field(default_factory=RooflineModel)
    options: PlanOptions = field(default_factory=PlanOptions)

    def __post_init__(self) -> None:
        self.graph.validate()
        self.costmodel = self.costmodel.for_model(self.graph.model)
        self.layers: list[str] = [layer.name for layer in self.graph.layers]
        self.index = {name: i for i, name in enumerate(self.layers)}
        self.devices: list[str] = [d.id for d in self.cluster.devices]
        n, k = len(self.layers), len(self.devices)
        if self.options.max_devices is not None and self.options.max_devices > k:
            raise PlanError(f"max_devices is {self.options.max_devices} but cluster "
                            f"{self.cluster.name!r} has only {k} devices")
        layers = self.graph.layers
        # time[v][d] in seconds, under each device's current load (one batch per device)
        # A device measured slower than predicted (Device.slowdown) scales every time on it: applied
        # here, not in each cost model, since a profile or a learned model ignores the spec's peaks.
        slow = [dev.slowdown or 1.0 for dev in self.cluster.devices]
        per_device = [[t * f for t in self.costmodel.layer_times(layers, dev)]
                      for dev, f in zip(self.cluster.devices, slow, strict=True)]
        self.time: list[list[float]] = [list(row) for row in zip(*per_device, strict=True)]
        # seconds a stage on each device pays once per microbatch, whatever its layers (a GPU's
        # time-slice waits under contention; 0 for most models): the simulator adds it per stage
        self.stage_overhead: list[float] = [self.costmodel.stage_overhead(dev) * f
                                            for dev, f in zip(self.cluster.devices, slow, strict=True)]
        mem = [self.costmodel.layer_memory(layer) for layer in layers]
        # Inference keeps a live set, not every layer's outputs for every microbatch in flight (which
        # refused a 13B decoder as needing 206 GiB for 24 GiB of weights).  The planners' form stays
        # "Σ params + in_flight · Σ activations + max workspace": planner_terms puts weights and KV
        # cache in params, nothing in activations, and the live set plus in-flight boundaries in the
        # per-layer workspace, whose max over a device bounds them (see pipeplan.costmodel.memory).
        try:
            terms = planner_terms(self.graph, mem, self.options.kept_microbatches,
                                  self.graph.meta.get("kv_context"))
        except LivenessError as exc:
            raise PlanError(str(exc)) from None
        self.param_bytes, self.act_bytes, self.workspace = terms.params, terms.activations, terms.workspace
        self.succ: list[list[int]] = [[self.index[s] for s in self.graph.successors(name)]
                                      for name in self.layers]
        self.edges: list[tuple[int, int]] = [(u, v) for u in range(n) for v in self.succ[u]]
        self.out_bytes = [max((self.graph.edge_bytes(self.layers[u], self.layers[v]) for v in self.succ[u]),
                              default=0) for u in range(n)]
        self.capacity = [int(d.memory * (1.0 - self.options.memory_margin)) for d in self.cluster.devices]
        self._links = [[self.cluster.link(a, b) for b in self.devices] for a in self.devices]
        self._check_numbers()
        try:
            self.placement: Placement = resolve(self.options.rules, self.graph, self.cluster)
        except PlacementError as exc:
            raise PlanError(str(exc)) from None

    def _check_numbers(self) -> None:
        """Refuse costs no planner can order or count: a time that is NaN, infinite or negative (a
        device whose peak_flops or bandwidth is near zero), or sizes past what the ILP's int64 memory
        constraints can hold."""
        for v, row in enumerate(self.time):
            for d, seconds in enumerate(row):
                if not (math.isfinite(seconds) and seconds >= 0.0):
                    raise PlanError(
                        f"the cost model gives layer {self.layers[v]!r} a time of {seconds} s on device "
                        f"{self.devices[d]!r}; check that device's peak_flops and mem_bandwidth")
        kept = self.options.kept_microbatches
        need = kept * (sum(self.act_bytes) + sum(self.param_bytes) + max(self.workspace, default=0))
        for what, value in (("the model's memory", need), ("the cluster's memory", sum(self.capacity))):
            if value >= _MAX_BYTES:
                raise PlanError(f"{what} ({value} bytes) is past {_MAX_BYTES} bytes, more than any planner "
                                "here can count; check the graph's sizes and the devices' memory")

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def transfer(self, u: int, a: int, b: int) -> float:
        """Seconds to send layer ``u``'s output from device ``a`` to device ``b`` (0 when a == b)."""
        if a == b or self.out_bytes[u] == 0:
            return 0.0
        return self._links[a][b].time(self.out_bytes[u])

    def receivers(self, u: int, dev_of: Sequence[int]) -> list[int]:
        """The devices layer ``u``'s output is sent to under an assignment, once per transfer the
        rule charges: each other device holding a consumer once (``per-device``), or once per
        consumer there (``per-edge``)."""
        a = dev_of[u]
        if self.options.transfer == "per-edge":
            return [dev_of[v] for v in self.succ[u] if dev_of[v] != a]
        return sorted({dev_of[v] for v in self.succ[u]} - {a})

    def memory(self, layers: list[int], workspace: Sequence[int] | None = None) -> int:
        """Bytes a device needs to hold ``layers``; ``workspace``: per layer, the workspace term to
        use instead of :attr:`workspace` (a layer-major batch's, :mod:`pipeplan.planner.harvest_score`)."""
        if not layers:
            return 0
        kept = self.options.kept_microbatches
        work = self.workspace if workspace is None else workspace
        return (sum(self.param_bytes[v] for v in layers) + kept * sum(self.act_bytes[v] for v in layers)
                + max(work[v] for v in layers))

    def lower_bound(self) -> float:
        """A bottleneck no plan can beat: the heaviest layer on its fastest allowed device, and the
        total work spread perfectly over every usable device, each layer at its fastest."""
        allowed = self.placement.allowed
        best = [min(row[d] for d in allowed[v]) for v, row in enumerate(self.time)]
        devices = min(self.options.max_devices or self.n_devices, len(self.placement.usable))
        return max(max(best, default=0.0), sum(best) / devices)

    def objective_lower_bound(self) -> float:
        """Seconds no plan can beat on the options' objective, known without solving.

        Latency is Σ stage + (M − 1)·bottleneck, and each stage takes at least its compute.
        """
        if self.options.objective == "latency":
            fastest = sum(min(row[d] for d in allowed) for row, allowed in zip(self.time, self.placement.allowed,
                                                                             strict=True))
            return fastest + (self.options.microbatches - 1) * self.lower_bound()
        return self.lower_bound()

    @property
    def max_bottleneck(self) -> float:
        """The slowest bottleneck the latency objective's ``min_throughput`` allows (inf: no floor)."""
        floor = self.options.min_throughput
        if self.options.objective != "latency" or floor is None:
            return float("inf")
        return self.graph.batch_size / floor

    def check_fits(self) -> None:
        """Raise :class:`PlanError` naming the shortfall when the model cannot fit at all: in the
        devices the constraints leave, in ``max_devices`` of them, a layer or a group of layers that
        must share a device in the largest device it may use, or more devices pinned than allowed."""
        placement, cap = self.placement, self.options.max_devices
        usable = placement.usable
        offered = sorted((self.capacity[d] for d in usable), reverse=True)
        total = self.memory(list(range(self.n_layers)))
        devices = (f"the {len(usable)} devices of {self.cluster.name!r} that forbid_devices leaves"
                   if len(usable) < self.n_devices else f"the {self.n_devices} devices of {self.cluster.name!r}")
        margin = f"after the {self.options.memory_margin:.0%} margin"
        if total > sum(offered):
            raise PlanError(f"{self.graph.model} needs {_gib(total)} but {devices} offer {_gib(sum(offered))} "
                            f"{margin}: {_gib(total - sum(offered))} short")
        if cap is not None and cap < len(usable) and total > sum(offered[:cap]):
            raise PlanError(f"max_devices={cap} caps the plan at {cap} stages, whose devices offer at most "
                            f"{_gib(sum(offered[:cap]))} {margin}, but {self.graph.model} needs {_gib(total)}; "
                            f"it needs at least {_least_devices(offered, total)} devices")
        pinned = sorted({d for allowed in placement.allowed if len(allowed) == 1 for d in allowed})
        if cap is not None and len(pinned) > cap:
            names = ", ".join(self.devices[d] for d in pinned)
            raise PlanError(f"the pins put layers on {len(pinned)} devices ({names}) but max_devices={cap}")
        for v in range(self.n_layers):
            self._check_share([v], f"layer {self.layers[v]!r} alone", placement.allowed[v])
        for members, origin in zip(placement.groups, placement.origin, strict=True):
            self._check_share(members, origin, placement.allowed[members[0]])

    def _check_share(self, layers: list[int], what: str, allowed: frozenset[int]) -> None:
        """Raise when ``layers``, which must share one of ``allowed``, fit in none of them."""
        need = self.memory(layers)
        d = max(sorted(allowed), key=lambda i: self.capacity[i])
        if need > self.capacity[d]:
            largest = (f"the largest device {self.devices[d]!r}" if len(allowed) == self.n_devices
                       else f"the largest device it may use, {self.devices[d]!r},")
            raise PlanError(f"{what} needs {_gib(need)}; {largest} offers "
                            f"{_gib(self.capacity[d])}: {_gib(need - self.capacity[d])} short")


def _least_devices(offered: list[int], total: int) -> int:
    """How many of the largest ``offered`` capacities it takes to hold ``total`` bytes."""
    held = 0
    for count, capacity in enumerate(offered, 1):
        held += capacity
        if held >= total:
            return count
    return len(offered)


# int64 with room for the ILP's sums of a few such terms.
_MAX_BYTES = 2**60


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"
