"""A partitioning problem: a layer graph, a cluster, and every cost the planners need, in one place.

The ILP, the baselines and the simulator all read their numbers from a :class:`Problem`, so a plan
is scored the same way whoever made it.  The graph's batch size is the *microbatch*: a stage's time
is the time of one microbatch through it.

Costs (seconds, per microbatch):

- ``time[v][d]``: layer ``v`` on device ``d`` under that device's current load (the cost model);
- ``transfer(u, a, b)``: layer ``u``'s output sent from device ``a`` to ``b`` — the link's latency
  plus ``out_bytes(u) / bandwidth``, where ``out_bytes(u)`` is the largest tensor ``u`` hands to any
  consumer: a layer's output crosses to each consuming device once, however many layers there
  read it;
- a stage's time is ``max(compute, receive, send)`` with ``comm="overlap"`` or their sum with
  ``comm="serial"`` (PipeDream; Tarnawski et al., NeurIPS 2020).

Memory of a device, as inference uses it (:mod:`costmodel.memory`): the weights of its layers and,
when ``graph.meta["kv_context"]`` is set, their KV cache for ``in_flight`` microbatches; plus the
peak live set of one microbatch (tensors alive from producer to last consumer, in the graph's
order) and the boundary tensors of the other microbatches in flight.  Every planner reads it as
``Σ param_bytes + in_flight · Σ act_bytes + max workspace`` over a device's layers; the terms come
from :func:`costmodel.memory.planner_terms`, which bounds the liveness figure from above for every
stage that is an interval of the graph's order.  It must stay under
``capacity · (1 − memory_margin)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from costmodel.analytic import RooflineModel
from costmodel.base import CostModel
from costmodel.graph import ModelGraph
from costmodel.memory import LivenessError, planner_terms
from planner.cluster import Cluster

__all__ = ["CommMode", "Objective", "PlanError", "PlanOptions", "Problem"]

CommMode = Literal["overlap", "serial"]
Objective = Literal["throughput", "latency"]


class PlanError(ValueError):
    """The problem has no valid plan (a model that cannot fit), or the options are wrong."""


@dataclass(frozen=True)
class PlanOptions:
    objective: Objective = "throughput"
    comm: CommMode = "overlap"
    microbatches: int = 4
    in_flight: int | None = None  # microbatches whose activations a stage keeps; None → microbatches
    memory_margin: float = 0.1  # share of each device's memory kept free for the runtime
    min_throughput: float | None = None  # samples/s floor (a plan's throughput) for the latency objective
    max_devices: int | None = None  # use at most this many devices

    def __post_init__(self) -> None:
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


@dataclass
class Problem:
    """Everything a planner needs, precomputed: layers, devices, times, transfers, memory."""

    graph: ModelGraph
    cluster: Cluster
    costmodel: CostModel = field(default_factory=RooflineModel)
    options: PlanOptions = field(default_factory=PlanOptions)

    def __post_init__(self) -> None:
        self.graph.validate()
        self.layers: list[str] = [layer.name for layer in self.graph.layers]
        self.index = {name: i for i, name in enumerate(self.layers)}
        self.devices: list[str] = [d.id for d in self.cluster.devices]
        n, k = len(self.layers), len(self.devices)
        if self.options.max_devices is not None and self.options.max_devices > k:
            raise PlanError(f"max_devices is {self.options.max_devices} but cluster "
                            f"{self.cluster.name!r} has only {k} devices")
        layers = self.graph.layers
        # time[v][d] in seconds, under each device's current load (one batch per device)
        per_device = [self.costmodel.layer_times(layers, dev) for dev in self.cluster.devices]
        self.time: list[list[float]] = [list(row) for row in zip(*per_device, strict=True)]
        mem = [self.costmodel.layer_memory(layer) for layer in layers]
        # Inference keeps a live set, not every layer's outputs for every microbatch in flight (which
        # refused a 13B decoder as needing 206 GiB for 24 GiB of weights).  The planners' form stays
        # "Σ params + in_flight · Σ activations + max workspace": planner_terms puts weights and KV
        # cache in params, nothing in activations, and the live set plus in-flight boundaries in the
        # per-layer workspace, whose max over a device bounds them (see costmodel.memory).
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
        link = self._links[a][b]
        return link.latency + self.out_bytes[u] / link.bandwidth

    def memory(self, layers: list[int]) -> int:
        """Bytes a device needs to hold ``layers``."""
        if not layers:
            return 0
        kept = self.options.kept_microbatches
        return (sum(self.param_bytes[v] for v in layers) + kept * sum(self.act_bytes[v] for v in layers)
                + max(self.workspace[v] for v in layers))

    def lower_bound(self) -> float:
        """A bottleneck no plan can beat: the heaviest layer on its fastest device, and the total
        work spread perfectly over every device, each layer at its fastest."""
        best = [min(row) for row in self.time]
        spread = sum(best) / (self.options.max_devices or self.n_devices)
        return max(max(best, default=0.0), spread)

    def objective_lower_bound(self) -> float:
        """Seconds no plan can beat on the options' objective, known without solving.

        Latency is Σ stage + (M − 1)·bottleneck, and each stage takes at least its compute.
        """
        if self.options.objective == "latency":
            fastest = sum(min(row) for row in self.time)
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
        """Raise :class:`PlanError` naming the shortfall when the model cannot fit at all."""
        total = self.memory(list(range(self.n_layers)))
        capacity = sum(self.capacity)
        if total > capacity:
            raise PlanError(
                f"{self.graph.model} needs {_gib(total)} but the {self.n_devices} devices of "
                f"{self.cluster.name!r} offer {_gib(capacity)} after the {self.options.memory_margin:.0%} "
                f"margin: {_gib(total - capacity)} short")
        for v in range(self.n_layers):
            need = self.memory([v])
            if need > max(self.capacity):
                d = max(range(self.n_devices), key=lambda i: self.capacity[i])
                raise PlanError(
                    f"layer {self.layers[v]!r} alone needs {_gib(need)}; the largest device "
                    f"{self.devices[d]!r} offers {_gib(self.capacity[d])}: {_gib(need - self.capacity[d])} short")


# int64 with room for the ILP's sums of a few such terms.
_MAX_BYTES = 2**60


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"
