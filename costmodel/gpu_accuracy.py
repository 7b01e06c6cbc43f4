"""How well a cost model predicts the shared H100 measurements: the figures issue 15 sets targets on.

Per load and per split (calibration, evaluation): the median |error| of whole-model wall clock, the
share of configurations within ±15%, and the median error of the slowdown factor (loaded / idle,
predicted against measured). Per split: the MAPE of leaf layers in passes of 5 ms or more, idle.

Leaf spans were measured with CUDA events recorded by forward pre- and post-hooks, so the hooks'
own host time is inside them when a pass is launch-bound, and an event's own GPU time (about a
microsecond) when it is not. :func:`module_spans` therefore replays the pass through the GPU
model's queue with that instrument added (``hook`` seconds of host time before and after each leaf
module, ``event`` seconds of GPU time per span, fitted with the rest); other models are compared
layer by layer.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipeplan.costmodel.base import CostModel
from pipeplan.costmodel.gpu import GpuCostModel
from pipeplan.costmodel.gpu_measurements import LOADS, Measured, graphs, load_contention, measurements
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.hardware import Contention, Device

__all__ = ["LEAF_MIN_PASS", "TOLERANCE", "LoadRow", "Report", "evaluate", "module_spans", "wall_time"]

TOLERANCE = 0.15  # a prediction "within" is within ±15% of the measurement
LEAF_MIN_PASS = 5e-3  # leaf layers are judged in passes at least this long (shorter: hooks dominate)


@dataclass(frozen=True)
class LoadRow:
    """Figures of one split under one load."""

    split: str
    load: str
    pairs: int
    median_error: float  # median |predicted / measured − 1|
    within: float  # share of pairs within ±TOLERANCE
    slowdown_error: float  # median |predicted slowdown / measured slowdown − 1| (0 for idle)


@dataclass(frozen=True)
class Report:
    """A model's figures on the measurements."""

    model: str
    rows: tuple[LoadRow, ...]
    leaf_mape: dict[str, float]  # split → MAPE of leaf layers in passes ≥ LEAF_MIN_PASS
    leaf_count: dict[str, int]
    errors: dict[tuple[str, str], float]  # (config, load) → predicted / measured − 1

    def row(self, split: str, load: str) -> LoadRow:
        return next(r for r in self.rows if r.split == split and r.load == load)

    def overall(self, split: str) -> tuple[float, float]:
        """(median |error|, share within ±15%) over every load of ``split``."""
        errs = [abs(e) for (key, _), e in self.errors.items() if _split(key) == split]
        return statistics.median(errs), sum(e <= TOLERANCE for e in errs) / len(errs)


def _split(key: str) -> str:
    return next(m.split for m in measurements() if m.key == key)


def wall_time(model: CostModel, graph: ModelGraph, device: Device, load: Contention) -> float:
    """A model's prediction of one whole forward pass: its pass time where it has one."""
    if isinstance(model, GpuCostModel):
        return model.pass_time(graph.layers, device, load)
    return sum(model.layer_times(graph.layers, device, load))


def module_spans(model: CostModel, graph: ModelGraph, device: Device, hook: float = 0.0,
                 event: float = 0.0) -> dict[str, float]:
    """Each leaf module's predicted span between hook events, idle (see the module docstring)."""
    if not isinstance(model, GpuCostModel):
        return {la.name: model.layer_time(la, device, Contention()) for la in graph.layers}
    host, done, spans = 0.0, 0.0, {}
    for layer, (host_s, device_s) in zip(graph.layers, model.costs(graph.layers, device), strict=True):
        leaf = layer.module_type != "functional"
        if leaf:
            host += hook
            begin = max(done, host)  # the pre-hook's event runs once queued and the GPU is free
            done = begin + event
        host += host_s
        done = max(done, host) + device_s
        if leaf:
            host += hook
            done = max(done, host)  # the post-hook's event
            spans[layer.name] = done - begin
    return spans


def _rows(split: str, configs: Sequence[Measured], walls: dict[tuple[str, str], float]) -> list[LoadRow]:
    rows = []
    for load in ("idle", *LOADS):
        errs = [walls[c.key, load] / c.wall(load) - 1 for c in configs]
        slow = [0.0 if load == "idle" else
                (walls[c.key, load] / walls[c.key, "idle"]) / (c.wall(load) / c.idle) - 1 for c in configs]
        rows.append(LoadRow(split, load, len(configs), statistics.median(abs(e) for e in errs),
                            sum(abs(e) <= TOLERANCE for e in errs) / len(errs),
                            statistics.median(abs(s) for s in slow)))
    return rows


def evaluate(model: CostModel, device: Device, hook: float = 0.0, event: float = 0.0,
             splits: Iterable[str] = ("calibration", "evaluation")) -> Report:
    """Score ``model`` on ``device`` against every measured configuration of ``splits``."""
    graph_of = graphs()
    walls: dict[tuple[str, str], float] = {}
    rows: list[LoadRow] = []
    leaf: dict[str, float] = {}
    count: dict[str, int] = {}
    for split in splits:
        configs = [m for m in measurements() if m.split == split]
        ape = []
        for c in configs:
            graph = graph_of[c.key]
            for load in ("idle", *LOADS):
                walls[c.key, load] = wall_time(model, graph, device, load_contention(load))
            if c.idle >= LEAF_MIN_PASS:
                spans = module_spans(model, graph, device, hook, event)
                ape += [abs(spans[name] / span - 1) for name, span in c.modules.items() if name in spans]
        rows += _rows(split, configs, walls)
        leaf[split], count[split] = (statistics.fmean(ape) if ape else float("nan")), len(ape)
    errors = {(key, load): walls[key, load] / next(m for m in measurements() if m.key == key).wall(load) - 1
              for key, load in walls}
    return Report(model.name, tuple(rows), leaf, count, errors)
