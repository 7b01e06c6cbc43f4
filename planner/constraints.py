"""Placement constraints a user puts on a plan: pins, keep-together groups, forbidden devices.

:class:`pipeplan.planner.problem.PlanOptions` holds them as written (layer names or ``fnmatch`` globs,
device ids or device types); :func:`resolve` turns them, against one graph and one cluster, into a
:class:`Placement`: for every layer the devices it may use, and the groups of layers that must
share a device.  Every planner reads that one object: the simulator reports a plan that breaks it
(:func:`Placement.violation`), the baselines' plans that break it are rejected, and the CP-SAT
model fixes the variables it rules out (:mod:`pipeplan.planner.ilp_constraints`).

Two rules follow from what a plan is, and are applied here so that a conflict is found before any
solve and named:

- a stage is convex, so layers that must share a device take every layer on a path between them
  with them (the group's *convex hull*);
- layers pinned to one device must share it, so they form a group too, and its hull comes along.

>>> from pipeplan.planner.builder import GraphBuilder
>>> from pipeplan.costmodel.cluster import load_cluster
>>> b = GraphBuilder("chain")
>>> for i in range(4):
...     b.layer(f"l{i}", inputs={f"l{i - 1}": 1} if i else {})
>>> placement = resolve(PlacementRules(pins=(Pin("l0", "gpu0"), Pin("l3", "gpu0"))), b.build(),
...                     load_cluster("4xa100-nvlink"))
>>> placement.groups, [sorted(a) for a in placement.allowed]
([[0, 1, 2, 3]], [[0], [0], [0], [0]])
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

import networkx as nx

from pipeplan.errors import UserError

if TYPE_CHECKING:
    from pipeplan.costmodel.cluster import Cluster
    from pipeplan.costmodel.graph import ModelGraph

__all__ = ["Pin", "Placement", "PlacementError", "PlacementRules", "pins_of", "resolve"]


class PlacementError(UserError, ValueError):
    """A constraint names what does not exist, or constraints conflict; the message names both."""


class Pin(NamedTuple):
    """Layers (a name or an ``fnmatch`` glob such as ``blocks.1*``) that must run on one device (an
    id) or on some device of one type (every device of that type qualifies)."""

    layers: str
    device: str

    def __str__(self) -> str:
        return f"{self.layers}={self.device}"


@dataclass(frozen=True)
class PlacementRules:
    """The constraints as the user wrote them (the placement part of ``PlanOptions``)."""

    pins: tuple[Pin, ...] = ()
    keep_together: tuple[tuple[str, ...], ...] = ()  # each group: layer names or globs, all on one device
    forbid_devices: tuple[str, ...] = ()  # device ids or types no layer may use

    @property
    def empty(self) -> bool:
        return not (self.pins or self.keep_together or self.forbid_devices)


def pins_of(value: Any) -> tuple[Pin, ...]:
    """Pins from what a caller or a JSON document gives: ``Pin``s, ``(layers, device)`` pairs,
    ``{"layers": ..., "device": ...}`` objects, or ``"LAYERS=DEVICE"`` text."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise PlacementError(f"pins must be a list of (layers, device) pairs, got {value!r}")
    out: list[Pin] = []
    for item in value:
        if isinstance(item, str):
            layers, sep, device = item.rpartition("=")
            if not sep:
                raise PlacementError(f"pin {item!r}: write LAYERS=DEVICE, e.g. 'blocks.0*=gpu1' or 'head=T4'")
            item = (layers, device)
        if isinstance(item, Mapping):
            item = (item.get("layers"), item.get("device"))
        if not (isinstance(item, Sequence) and len(item) == 2 and all(isinstance(s, str) and s.strip() for s in item)):
            raise PlacementError(f"a pin is (layers, device), two non-empty strings; got {item!r}")
        out.append(Pin(item[0].strip(), item[1].strip()))
    return tuple(out)


@dataclass(frozen=True)
class Placement:
    """Constraints resolved against one graph and one cluster (layer and device indices)."""

    allowed: list[frozenset[int]]  # per layer: the devices it may use
    why: list[list[str]]  # per layer: the constraints that narrowed ``allowed`` (for messages)
    groups: list[list[int]]  # layers that must share a device (each sorted, at least two layers)
    origin: list[str]  # per group: what made it (the keep-together group or the pins)
    layers: list[str]
    devices: list[str]

    @cached_property
    def restricted(self) -> bool:
        """Whether any layer is kept off any device, or any group exists (else the problem is free)."""
        k = len(self.devices)
        return bool(self.groups) or any(len(a) < k for a in self.allowed)

    @cached_property
    def usable(self) -> list[int]:
        """Devices some layer may use, in cluster order."""
        return sorted(set().union(*self.allowed)) if self.allowed else list(range(len(self.devices)))

    def violation(self, dev_of: Sequence[int]) -> str | None:
        """The first constraint the assignment (layer → device index) breaks, or None."""
        for v, d in enumerate(dev_of):
            if d not in self.allowed[v]:
                return (f"layer {self.layers[v]!r} is on {self.devices[d]!r}, which it may not use: "
                        + "; ".join(self.why[v]))
        for members, origin in zip(self.groups, self.origin, strict=True):
            used = sorted({dev_of[v] for v in members})
            if len(used) > 1:
                return (f"{origin} must share one device but is split over "
                        f"{', '.join(self.devices[d] for d in used)}")
        return None


def _names(items: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


class _Resolver:
    def __init__(self, graph: ModelGraph, cluster: Cluster) -> None:
        self.graph, self.cluster = graph, cluster
        self.layers = [layer.name for layer in graph.layers]
        self.index = {name: i for i, name in enumerate(self.layers)}
        self.devices = [d.id for d in cluster.devices]

    def match_layers(self, pattern: str, what: str) -> list[int]:
        """Layers named ``pattern``, or matching it as a glob; an error names the near misses."""
        if pattern in self.index:
            return [self.index[pattern]]
        found = [i for i, name in enumerate(self.layers) if fnmatch.fnmatchcase(name, pattern)]
        if not found:
            close = difflib.get_close_matches(pattern, self.layers, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else (
                f"; its layers are named like {_names([repr(n) for n in self.layers], 3)}")
            raise PlacementError(f"{what}: no layer of {self.graph.model!r} is named or matches {pattern!r}{hint}")
        return found

    def match_devices(self, name: str, what: str) -> list[int]:
        """The device with id ``name``, else every device of type ``name``."""
        if name in self.devices:
            return [self.devices.index(name)]
        found = [i for i, d in enumerate(self.cluster.devices) if d.type == name]
        if not found:
            types = sorted({d.type for d in self.cluster.devices})
            raise PlacementError(f"{what}: cluster {self.cluster.name!r} has no device or device type {name!r} "
                                 f"(devices: {', '.join(self.devices)}; types: {', '.join(types)})")
        return found


def resolve(rules: PlacementRules, graph: ModelGraph, cluster: Cluster) -> Placement:
    """Resolve ``rules`` against ``graph`` and ``cluster``; :class:`PlacementError` names an unknown
    layer or device and any conflict between the constraints (memory is checked by the problem)."""
    r = _Resolver(graph, cluster)
    n, k = len(r.layers), len(r.devices)
    allowed = [frozenset(range(k))] * n
    why: list[list[str]] = [[] for _ in range(n)]
    forbidden: set[int] = set()
    for name in rules.forbid_devices:
        forbidden.update(r.match_devices(name, f"forbid_devices {name!r}"))
    if forbidden:
        if len(forbidden) == k:
            raise PlacementError(f"forbid_devices ({', '.join(rules.forbid_devices)}) rules out every device of "
                                 f"{cluster.name!r}")
        free = frozenset(range(k)) - forbidden
        note = f"forbid_devices rules out {', '.join(r.devices[d] for d in sorted(forbidden))}"
        allowed = [free] * n
        why = [[note] for _ in range(n)]
    for pin in rules.pins:
        what = f"pin {pin}"
        targets = frozenset(r.match_devices(pin.device, what))
        for v in r.match_layers(pin.layers, what):
            narrowed = allowed[v] & targets
            if not narrowed:
                raise PlacementError(f"{what} leaves layer {r.layers[v]!r} no device: "
                                     f"{'; '.join(why[v]) or 'every device of that name is ruled out'}")
            allowed[v] = narrowed
            why[v].append(f"{what} allows only {', '.join(r.devices[d] for d in sorted(targets))}")
    groups, origin = _groups(r, rules, allowed)
    for members, label in zip(groups, origin, strict=True):
        shared = frozenset.intersection(*(allowed[v] for v in members))
        if not shared:
            narrow = sorted((v for v in members if len(allowed[v]) < k), key=lambda v: len(allowed[v]))
            reasons = "; ".join(f"{r.layers[v]!r}: {why[v][-1]}" for v in narrow[:3])
            raise PlacementError(f"{label} must share one device, but no device is allowed for all of them "
                                 f"({reasons})")
        for v in members:
            if allowed[v] != shared:
                why[v].append(f"it must share a device with {label}")
            allowed[v] = shared
    return Placement(allowed, why, groups, origin, r.layers, r.devices)


def _groups(r: _Resolver, rules: PlacementRules, allowed: list[frozenset[int]]) -> tuple[list[list[int]], list[str]]:
    """Groups of layers that must share a device: the keep-together groups and the layers pinned
    to one device, merged where they meet and closed under convexity; with what made each."""
    n = len(r.layers)
    parent = list(range(n))
    label: dict[int, list[str]] = {}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    def join(members: Sequence[int], what: str) -> None:
        root = find(members[0])
        for v in members[1:]:
            other = find(v)
            if other != root:
                parent[other] = root
                label.setdefault(root, []).extend(label.pop(other, []))
        label.setdefault(root, []).append(what)

    for i, patterns in enumerate(rules.keep_together):
        what = f"keep_together[{i}]"
        members = sorted({v for p in patterns for v in r.match_layers(p, what)})
        if len(members) < 2:
            raise PlacementError(f"{what} ({', '.join(patterns)}) names only layer {r.layers[members[0]]!r}: a group "
                                 "keeps two or more layers together (separate names with commas)")
        join(members, what)
    pinned: dict[int, list[int]] = {}
    for v, devices in enumerate(allowed):
        if len(devices) == 1:
            pinned.setdefault(next(iter(devices)), []).append(v)
    for d, members in sorted(pinned.items()):
        if len(members) > 1:
            join(members, f"the layers pinned to {r.devices[d]}")
    # A stage is convex: a group takes every layer on a path between two of its members.
    dag, reverse = r.graph.nx, r.graph.nx.reverse(copy=False)
    changed = True
    while changed:
        changed = False
        sets: dict[int, list[int]] = {}
        for v in range(n):
            sets.setdefault(find(v), []).append(v)
        for members in (m for m in sets.values() if len(m) > 1):
            names = [r.layers[v] for v in members]
            below = _reach(dag, names)
            between = sorted(r.index[x] for x in below & _reach(reverse, names) if find(r.index[x]) != find(members[0]))
            if between:
                join([members[0], *between], "the layers between them (a stage is convex)")
                changed = True
    final: dict[int, list[int]] = {}
    for v in range(n):
        final.setdefault(find(v), []).append(v)
    groups = [m for m in final.values() if len(m) > 1]
    origin = [f"{' + '.join(dict.fromkeys(label[find(m[0])]))} "
              f"({_names([repr(r.layers[v]) for v in m])})" for m in groups]
    return groups, origin


def _reach(dag: nx.DiGraph, sources: Iterable[str]) -> set[str]:
    """Every node reachable from ``sources`` (themselves included): one search, O(nodes + edges)."""
    seen = set(sources)
    stack = list(seen)
    while stack:
        for nxt in dag.successors(stack.pop()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen
