"""What re-planning costs: the state that moves between two plans, over which links, for how long.

The cost model (``docs/planner.md``, "Re-planning with migration cost"):

- **State** is a layer's weights and buffers (``Layer.param_bytes`` of the graph).  Activations and
  KV caches belong to requests, and a switch drains the pipeline at a microbatch boundary first, so
  none of them moves.
- A layer **moves** when the new plan puts it on another device than the current plan does.  A
  device is the same device in both clusters when its id is.  From a device still in the new
  cluster it crosses that cluster's link to its new device; from a device that has left, nothing
  survives (a plan holds each layer once), so it is **reloaded** from the :class:`Reload` source the
  user names (host memory or disk, at a bandwidth and latency).
- **Channels.** Every ordered pair (source, target) is one channel: links are full duplex, so a→b
  and b→a run side by side, and the moves on one channel are sent as one stream, its latency paid
  once (``latency + Σ bytes / bandwidth``).  Reloads use one channel per target device (each device
  reads its own host's copy), or a single channel for all of them when the source is ``shared``
  (one file server).  Channels run in parallel: the migration takes as long as the slowest one.
- **Horizon.** The new plan serves N microbatches before the next change; the switch pauses
  serving for the migration's M seconds, so serving them takes ``M + N·B``, or per microbatch
  ``B + M / N`` — the amortised objective.  A horizon in seconds T counts as ``N = T / B₀``
  microbatches, B₀ the bottleneck the current plan recorded: the rate the deployment was serving
  at, which no candidate plan changes (so the objective stays linear).

:class:`MigrationCost` prices any assignment; :class:`Migration` is what a re-planned plan records.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

from pipeplan.costmodel.hardware import Link
from pipeplan.costmodel.units import UnitError, parse_rate, parse_seconds
from pipeplan.planner.problem import PlanError, Problem

__all__ = ["DEFAULT_RELOAD", "EVERY_DEVICE", "STORAGE", "Alternative", "Channel", "Decision", "Horizon",
           "Migration", "MigrationCost", "Move", "Reload", "Route"]

STORAGE = "storage"  # the source of a reload, in moves and channels
EVERY_DEVICE = "*"  # the target of the one channel a shared reload source has
Decision = Literal["stay", "move"]


@dataclass(frozen=True)
class Reload:
    """Where the state of a layer whose device left the cluster comes from, and how fast.

    >>> Reload.of("2GB/s", "1ms").bandwidth
    2000000000.0
    """

    bandwidth: float  # bytes/s one channel gets
    latency: float = 0.0  # seconds before the first byte, once per channel
    shared: bool = False  # one channel for every device (a file server), else one per device

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bandwidth) and self.bandwidth > 0):
            raise PlanError(f"the reload bandwidth must be a positive number of bytes/s, got {self.bandwidth!r}")
        if not (math.isfinite(self.latency) and self.latency >= 0):
            raise PlanError(f"the reload latency must be a non-negative number of seconds, got {self.latency!r}")

    @functools.cached_property
    def link(self) -> Link:
        """The path reloaded bytes take, priced by the same rule as every link of the cluster."""
        return Link(bandwidth=self.bandwidth, latency=self.latency)

    @classmethod
    def of(cls, bandwidth: float | str, latency: float | str = 0.0, shared: bool = False) -> Reload:
        """From numbers or human-written quantities (``"2GB/s"``, ``"1ms"``)."""
        try:
            return cls(parse_rate(bandwidth), parse_seconds(latency), shared)
        except UnitError as exc:
            raise PlanError(f"reload source: {exc}") from None

    def time(self, nbytes: int) -> float:
        return self.link.time(nbytes)


# Host memory to a device over PCIe 4.0 x16 in practice; a user with slower storage names it.
DEFAULT_RELOAD = Reload(bandwidth=12e9, latency=1e-3)

_HORIZON_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_MICROBATCH_UNITS = ("mb", "microbatches")


@dataclass(frozen=True)
class Horizon:
    """How long the new plan serves before the next change: microbatches, or seconds of serving.

    >>> Horizon.parse("10m").seconds, Horizon.parse("5000mb").microbatches
    (600.0, 5000.0)
    """

    microbatches: float | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        given = [(what, value) for what, value in (("microbatches", self.microbatches), ("seconds", self.seconds))
                 if value is not None]
        if len(given) != 1:
            raise PlanError("a horizon is a number of microbatches or of seconds: give exactly one")
        what, value = given[0]
        if not (math.isfinite(value) and value > 0):
            raise PlanError(f"the horizon must be a positive number of {what}, got {value!r}")

    @classmethod
    def parse(cls, text: str) -> Horizon:
        """``"10m"``, ``"2h"``, ``"90s"``, ``"250ms"`` (seconds of serving) or ``"5000mb"`` (microbatches)."""
        found = re.fullmatch(r"\s*(-?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*", str(text))
        if found is None:
            raise PlanError(f"cannot read horizon {text!r}: give a duration (10m, 2h, 90s) or microbatches (5000mb)")
        number, unit = float(found.group(1)), found.group(2)
        if unit in _MICROBATCH_UNITS:
            return cls(microbatches=number)
        if unit in _HORIZON_UNITS:
            return cls(seconds=number * _HORIZON_UNITS[unit])
        try:
            return cls(seconds=parse_seconds(f"{number}{unit}"))
        except UnitError:
            raise PlanError(f"cannot read horizon {text!r}: the unit must be one of s, m, min, h, ms, "
                            "or mb (microbatches)") from None

    def in_microbatches(self, current_bottleneck: float) -> float:
        """N: the microbatches it spans, seconds counted at the current plan's rate."""
        if self.microbatches is not None:
            return self.microbatches
        assert self.seconds is not None
        if not current_bottleneck > 0:
            raise PlanError("a horizon in seconds needs the current plan's bottleneck, which is 0; "
                            "give the horizon in microbatches")
        return self.seconds / current_bottleneck


class Move(NamedTuple):
    """One layer changing device."""

    layer: str
    source: str  # its device in the current plan, or STORAGE when that device left the cluster
    target: str
    bytes: int  # its weights and buffers (0: nothing to send, the layer only changes device)
    seconds: float  # bytes / the channel's bandwidth (the channel's latency is counted once, in Channel)


class Channel(NamedTuple):
    """The moves that share one directed link (or one reload path), sent as one stream."""

    source: str
    target: str  # a device, or EVERY_DEVICE for a shared reload source
    bytes: int
    seconds: float  # latency + bytes / bandwidth


class Alternative(NamedTuple):
    """Another plan's figures under the same objective."""

    bottleneck: float
    migration_seconds: float
    objective: float  # bottleneck + migration_seconds / horizon_microbatches


@dataclass
class Migration:
    """What a re-planned plan records: the decision, its moves and the figures that justify it."""

    decision: Decision  # "stay": keeping the current plan is optimal; "move": the plan's moves pay
    horizon_microbatches: float
    horizon_seconds: float | None  # as the user gave it; None when given in microbatches
    seconds: float  # the migration's time: its slowest channel
    bytes: int  # state moved, all channels
    model_bytes: int  # every layer's state: what reloading the whole model moves
    objective: float  # bottleneck + seconds / horizon_microbatches
    reload: Reload
    moves: list[Move] = field(default_factory=list)
    channels: list[Channel] = field(default_factory=list)
    stay: Alternative | None = None  # the current plan on the new cluster; None when it cannot stay
    stay_invalid: str | None = None  # why it cannot (a device left, memory, a constraint)
    fresh: Alternative | None = None  # the plan of least bottleneck, migration ignored by its planner
    # the horizon from which moving to ``compared`` beats staying; None when it never does (or cannot stay)
    break_even_microbatches: float | None = None
    compared: str | None = None  # "this plan", or "fresh" when the decision is to stay

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["moves"] = [m._asdict() for m in self.moves]
        doc["channels"] = [c._asdict() for c in self.channels]
        for key in ("stay", "fresh"):
            value = getattr(self, key)
            doc[key] = value._asdict() if value is not None else None
        return doc

    @classmethod
    def from_dict(cls, doc: Any) -> Migration:
        if not isinstance(doc, dict):
            raise PlanError(f"malformed plan: 'migration' must be an object, got {type(doc).__name__}")
        doc = dict(doc)
        try:
            doc["reload"] = Reload(**doc["reload"])
            doc["moves"] = [Move(**m) for m in doc.get("moves", [])]
            doc["channels"] = [Channel(**c) for c in doc.get("channels", [])]
            for key in ("stay", "fresh"):
                doc[key] = Alternative(**doc[key]) if doc.get(key) is not None else None
            return cls(**doc)
        except (KeyError, TypeError) as exc:
            raise PlanError(f"malformed plan: 'migration': {exc}") from None


class Route(NamedTuple):
    """A channel's ends: device indices of the problem, ``None`` for the reload source (as source)
    or for every device (as the target of a shared reload)."""

    source: int | None
    target: int | None


class MigrationCost:
    """The migration cost model of one current assignment over a problem's (new) cluster.

    ``current``: layer name → device id, for exactly the problem's layers; devices the new cluster
    lacks have left it.  Raises :class:`PlanError` naming a layer the graph lacks or one the current
    plan does not place.
    """

    def __init__(self, problem: Problem, current: Mapping[str, str], reload: Reload = DEFAULT_RELOAD) -> None:
        extra = sorted(set(current) - set(problem.index))
        if extra:
            raise PlanError(f"the current plan places layer {extra[0]!r}"
                            + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else "")
                            + f", which model {problem.graph.model!r} does not have: re-plan the model the current "
                            "plan was made for")
        missing = [name for name in problem.layers if name not in current]
        if missing:
            raise PlanError(f"the current plan does not place layer {missing[0]!r}"
                            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                            + f" of model {problem.graph.model!r}: re-plan the model the current plan was made for")
        self.problem, self.reload = problem, reload
        self.current = {name: current[name] for name in problem.layers}
        where = {d: i for i, d in enumerate(problem.devices)}
        # layer → its device's index in the new cluster, None when that device has left
        self.origin: list[int | None] = [where.get(self.current[name]) for name in problem.layers]
        self.state: list[int] = [layer.param_bytes for layer in problem.graph.layers]
        self.departed = sorted({self.current[problem.layers[v]] for v, o in enumerate(self.origin) if o is None})

    @property
    def model_bytes(self) -> int:
        return sum(self.state)

    def route(self, v: int, target: int) -> Route | None:
        """The channel layer v takes to ``target``; None when it stays where it is."""
        source = self.origin[v]
        if source == target:
            return None
        if source is None:
            return Route(None, None if self.reload.shared else target)
        return Route(source, target)

    def link(self, route: Route) -> tuple[float, float]:
        """(bandwidth, latency) of a channel."""
        if route.source is None:
            return self.reload.bandwidth, self.reload.latency
        assert route.target is not None
        link = self.problem.cluster.link(self.problem.devices[route.source], self.problem.devices[route.target])
        return link.bandwidth, link.latency

    def routes(self) -> list[Route]:
        """Every channel some plan may use, in a fixed order."""
        k = self.problem.n_devices
        holders = sorted({o for o in self.origin if o is not None})
        out = [Route(a, b) for a in holders for b in range(k) if b != a]
        if any(o is None for o in self.origin):
            out += [Route(None, None)] if self.reload.shared else [Route(None, b) for b in range(k)]
        return out

    def _name(self, device: int | None, source: bool) -> str:
        if device is None:
            return STORAGE if source else EVERY_DEVICE
        return self.problem.devices[device]

    def moves(self, dev_of: Sequence[int]) -> list[Move]:
        """Every layer that changes device, in the problem's layer order."""
        out: list[Move] = []
        for v, target in enumerate(dev_of):
            route = self.route(v, target)
            if route is not None:
                bandwidth, _ = self.link(route)
                source = self.current[self.problem.layers[v]] if route.source is not None else STORAGE
                out.append(Move(self.problem.layers[v], source, self.problem.devices[target], self.state[v],
                                self.state[v] / bandwidth))
        return out

    def channels(self, dev_of: Sequence[int]) -> list[Channel]:
        """The channels that carry state, each with its stream's bytes and seconds."""
        load: dict[Route, int] = {}
        for v, target in enumerate(dev_of):
            route = self.route(v, target)
            if route is not None and self.state[v]:
                load[route] = load.get(route, 0) + self.state[v]
        out = []
        for route in self.routes():
            if route in load:
                bandwidth, latency = self.link(route)
                out.append(Channel(self._name(route.source, True), self._name(route.target, False), load[route],
                                   latency + load[route] / bandwidth))
        return out

    def seconds(self, dev_of: Sequence[int]) -> float:
        """The migration's time: its slowest channel's (0 when nothing moves)."""
        return max((c.seconds for c in self.channels(dev_of)), default=0.0)

    def lower_bound(self) -> float:
        """Seconds no plan's migration beats: the state of departed devices must be reloaded.  Each
        such layer goes whole over one channel; per-device channels share the total at best evenly
        over the usable devices, a shared one carries all of it."""
        forced = [self.state[v] for v, o in enumerate(self.origin) if o is None and self.state[v]]
        if not forced:
            return 0.0
        channels = 1 if self.reload.shared else max(1, len(self.problem.placement.usable))
        return self.reload.time(max(max(forced), math.ceil(sum(forced) / channels)))
