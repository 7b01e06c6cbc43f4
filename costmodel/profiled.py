"""A cost model that reads a model profile: measured times first, learned estimates only where none.

``--costmodel profile:FILE`` selects it (:func:`pipeplan.costmodel.registry.load_cost_model`); ``FILE`` is a
table ``pipeplan profile MODEL`` wrote (:mod:`pipeplan.costmodel.model_profile`). For a layer of a device:

- **the table's device, a profiled layer, a profiled load**: the measured time;
- **a load not profiled**: the idle measured time × a slowdown factor for that load (below);
- **a layer not in the table** (another model, batch size or granularity: a layer matches by name
  *and* FLOPs) **or another device**: the fallback model (the learned CPU model unless given),
  said once in a log warning.

Slowdown for a load not profiled. Co-runners on a CPU core time-share it, so a layer's slowdown
grows with the number of co-runners, weighted by their duty: ``n = corunners × duty``; a measured
utilisation ``u`` is one compute co-runner working ``u`` of the time (how the profiler creates it),
so ``n = u``; a tenant is the compute kind on a CPU. Per co-runner kind (compute, memory, mixed),
the profiled loads give points ``(n, F)`` with ``F`` the slowdown of the layer's *operator kind*:
the sum of its layers' loaded times over the sum of their idle times. Pooling a kind's layers
evens out the single layers' noise (a 50 µs layer is descheduled in a few passes only), while
operator kinds keep what differs between them (a memory co-runner evicts the cache a matmul
reuses, not the stream of an add). An operator kind with under 1% of the idle time uses the whole
model's factor instead. ``F(n)`` is linear between ``(0, 1)`` and the points, and beyond the last
point follows the last segment; never below 1. A co-runner kind not profiled uses the average
over the profiled kinds at each ``n``; a table with no loaded level at all takes the fallback
model's factor (its loaded over its idle prediction of the layer).

>>> from pipeplan.costmodel.model_profile import LevelTimes, ModelProfile, ProfiledLayer
>>> table = ModelProfile("m", granularity="leaf", batch_size=1, dtype="fp32", device_type="cpu-core",
...                      device_name="cpu", layers=[ProfiledLayer("fc", "linear", 8)],
...                      levels=[LevelTimes(Contention(), [1.0], forward_s=1.0),
...                              LevelTimes(Contention.parse("1xcompute"), [2.0], forward_s=2.0)])
>>> ProfiledCostModel(table).slowdown("linear", Contention.parse("50%compute"))
1.5
"""

from __future__ import annotations

import bisect
import logging
from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from pipeplan.costmodel.base import CostModel
from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.costmodel.hardware import Contention, Device, same_cpu
from pipeplan.costmodel.model_profile import ModelProfile, ProfileTableError

__all__ = ["MATCHING_SHARE", "PREFIX", "PROFILES_ENV", "ProfiledCostModel", "corunner_count", "load_profiled",
           "matching_profile"]

log = logging.getLogger(__name__)

PREFIX = "profile:"
_MINOR_KIND = 0.01  # an operator kind under this share of the idle time uses the model-wide factor
_ALL = "*"  # the model-wide factor's key
PROFILES_ENV = "PIPEPLAN_PROFILES"  # where matching_profile looks (default: ./profiles, where `profile` writes)
MATCHING_SHARE = 0.9  # of a graph's layers a table must hold for matching_profile to pick it

Points = list[tuple[float, float]]  # (effective co-runners, slowdown factor), sorted


def corunner_count(load: Contention) -> tuple[str, float]:
    """A load as (co-runner kind, effective co-runner count) on a CPU core.

    >>> corunner_count(Contention.parse("2x50%memory")), corunner_count(Contention.parse("30%"))
    (('memory', 1.0), ('compute', 0.3))
    """
    if load.utilization is not None:
        return "compute", load.utilization
    kind = "compute" if load.kind == "tenant" else load.kind
    return kind, load.corunners * load.duty


def _interpolate(points: Points, n: float) -> float:
    """``F(n)`` through ``(0, 1)`` and ``points``, linear, the last segment extended; at least 1."""
    xs = [0.0] + [x for x, _ in points]
    ys = [1.0] + [y for _, y in points]
    i = min(max(bisect.bisect_left(xs, n), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    value = y1 if x1 == x0 else y0 + (y1 - y0) * (n - x0) / (x1 - x0)
    return max(1.0, value)


class ProfiledCostModel(CostModel):
    """Layer times from a model profile (see the module docstring)."""

    name = "profile"

    def __init__(self, table: ModelProfile, fallback: CostModel | None = None) -> None:
        self.table = table
        self._fallback = fallback
        self._index = table.index()
        self._idle = table.idle.layer_s if table.idle is not None else []
        self._points = self._fit_points()
        self._warned: set[str] = set()

    @property
    def fallback(self) -> CostModel:
        """The model for layers and devices the table does not have: the learned CPU model unless given."""
        if self._fallback is None:
            from pipeplan.costmodel.registry import load_cost_model

            self._fallback = load_cost_model("learned")
        return self._fallback

    # -- slowdown factors -----------------------------------------------------------------------------
    def _fit_points(self) -> dict[tuple[str, str], Points]:
        """(operator kind or ``*``, co-runner kind) → the profiled ``(n, F)`` points."""
        idle = self._idle
        total = sum(idle)
        by_kind: dict[str, list[int]] = defaultdict(list)
        for i, layer in enumerate(self.table.layers):
            by_kind[layer.kind].append(i)
        raw: dict[tuple[str, str], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
        for level in self.table.levels:
            if level.load.idle:
                continue
            corunner, n = corunner_count(level.load)
            if total > 0:
                raw[(_ALL, corunner)][n].append(level.sum_s / total)
            for kind, members in by_kind.items():
                base = sum(idle[i] for i in members)
                if base > _MINOR_KIND * total:
                    raw[(kind, corunner)][n].append(sum(level.layer_s[i] for i in members) / base)
        return {key: sorted((n, sum(f) / len(f)) for n, f in values.items()) for key, values in raw.items()}

    def slowdown(self, kind: str, load: Contention) -> float | None:
        """The factor by which ``load`` slows the table's layers of operator ``kind``; None when the
        table has no loaded level to learn it from."""
        if load.idle:
            return 1.0
        corunner, n = corunner_count(load)
        for key in ((kind, corunner), (_ALL, corunner)):
            if key in self._points:
                return _interpolate(self._points[key], n)
        keys = [k for k in self._points if k[0] == kind] or [k for k in self._points if k[0] == _ALL]
        pooled: dict[float, list[float]] = defaultdict(list)
        for key in keys:
            for x, y in self._points[key]:
                pooled[x].append(y)
        if not pooled:
            return None
        self._warn_once(f"kind:{corunner}", "model profile %s has no %s co-runner level: its slowdown is the "
                        "average of the profiled kinds'", self.table.model, corunner)
        return _interpolate(sorted((x, sum(ys) / len(ys)) for x, ys in pooled.items()), n)

    # -- CostModel ------------------------------------------------------------------------------------
    def covers(self, device: Device) -> bool:
        """Whether ``device`` is the profiled one: its type (or name), and for a CPU device this
        machine's CPU being the profiled CPU."""
        if device.type not in (self.table.device_type, self.table.device_name):
            return False
        return device.cores is None or same_cpu(self.table.device_name)

    def layer_time(self, layer: Layer, device: Device, load: Contention | None = None) -> float:
        return self.layer_times([layer], device, load)[0]

    def stage_overhead(self, device: Device, load: Contention | None = None) -> float:
        # a profiled device's layer times were taken inside whole passes: nothing more to add
        return 0.0 if self.covers(device) else self.fallback.stage_overhead(device, load)

    def layer_times(self, layers: Sequence[Layer], device: Device, load: Contention | None = None) -> list[float]:
        load = load if load is not None else device.load
        if not self.covers(device):
            self._warn_once(f"device:{device.type}", "model profile of %s was taken on %r (%s); device %s (%r) is "
                            "not that: its times come from the %r cost model", self.table.model,
                            self.table.device_type, self.table.device_name, device.id, device.type,
                            self.fallback.name)
            return self.fallback.layer_times(layers, device, load)
        level = self.table.level(load)
        times: list[float | None] = []
        for layer in layers:
            i = self._index.get((layer.name, layer.flops))
            if i is None:
                times.append(None)
            elif level is not None:
                times.append(level.layer_s[i])
            else:
                factor = self.slowdown(self.table.layers[i].kind, load)
                if factor is None:
                    factor = self._fallback_factor(layer, device, load)
                times.append(self._idle[i] * factor)
        missing = [la for la, t in zip(layers, times, strict=True) if t is None]
        if missing:
            self._warn_once(f"layers:{missing[0].name}", "model profile of %s has no layer %s (%d of %d layers, "
                            "matched by name and FLOPs: another model, batch size or granularity?); their times "
                            "come from the %r cost model", self.table.model,
                            ", ".join(repr(la.name) for la in missing[:3]), len(missing), len(layers),
                            self.fallback.name)
            filled = iter(self.fallback.layer_times(missing, device, load))
            return [t if t is not None else next(filled) for t in times]
        return [t for t in times if t is not None]

    def _fallback_factor(self, layer: Layer, device: Device, load: Contention) -> float:
        self._warn_once("factor", "model profile of %s has no loaded level: slowdowns under %s come from the %r "
                        "cost model", self.table.model, load.describe(), self.fallback.name)
        loaded = self.fallback.layer_time(layer, device, load)
        idle = self.fallback.layer_time(layer, device, Contention())
        return max(1.0, loaded / idle) if idle > 0 else 1.0

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)


@lru_cache(maxsize=8)
def _read(path: str, version: tuple[int, int, int, int]) -> ModelProfile:
    del version  # part of the cache key only: a profile taken again is read again
    return ModelProfile.load(path)


def load_profiled(spec: str) -> ProfiledCostModel:
    """``profile:FILE`` → a :class:`ProfiledCostModel` of that table, stamped with the file's path
    and digest so that a plan records exactly which profile made it.

    Raises :class:`~pipeplan.costmodel.model_profile.ProfileTableError` (a ``ValueError``) naming the problem.
    """
    from pipeplan.costmodel.provenance import file_digest
    from pipeplan.costmodel.registry import file_version

    text = spec[len(PREFIX):].strip() if spec.startswith(PREFIX) else spec
    if not text:
        raise ProfileTableError(f"cost model {spec!r}: give the table's path, as in profile:profiles/gpt2-cpu.json")
    path = Path(text)
    if not path.is_file():
        raise ProfileTableError(f"cost model {spec!r}: no such model profile {text!r}; write it with "
                                "`pipeplan profile MODEL --out FILE`")
    model = ProfiledCostModel(_read(str(path.resolve()), file_version(path)))
    model.spec = PREFIX + str(path.resolve())
    model.digest = file_digest(path)
    return model


def matching_profile(graph: ModelGraph, directory: str | Path | None = None) -> Path | None:
    """The model profile ``pipeplan profile`` wrote for this graph on this machine's CPU, if any.

    It is looked for where ``profile`` writes by default (:func:`~pipeplan.costmodel.model_profile.default_path`
    under ``directory``, ``$PIPEPLAN_PROFILES`` or ``./profiles``), and taken only if it holds at least
    :data:`MATCHING_SHARE` of the graph's layers by name and FLOPs: a table of the same model at another
    batch size, granularity or dtype matches no layer and is ignored. An unreadable table is ignored
    with a warning: planning must not fail because a cache of measurements is stale.
    """
    import os

    from pipeplan.costmodel.hardware import cpu_model
    from pipeplan.costmodel.model_profile import default_path

    folder = directory if directory is not None else os.environ.get(PROFILES_ENV, "profiles")
    path = default_path(graph.model, cpu_model(), folder)
    if not path.is_file() or not graph.layers:
        return None
    try:
        from pipeplan.costmodel.registry import file_version

        table = _read(str(path.resolve()), file_version(path))
    except (ProfileTableError, OSError) as exc:
        log.warning("ignoring model profile %s: %s", path, exc)
        return None
    index = table.index()
    matched = sum((la.name, la.flops) in index for la in graph.layers)
    return path if matched >= MATCHING_SHARE * len(graph.layers) else None
