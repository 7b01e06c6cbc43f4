"""Leave-one-configuration-out cross-validation of the GPU cost model on the calibration set.

The development metric of ``analytic-gpu``: for each of the 10 calibration configurations, the
constants are refitted (:func:`pipeplan.costmodel.gpu_fit.fit`) on the other 9 and the held-out one
is scored, whole-model wall clock under every load and its leaf spans (passes ≥ 5 ms). The
evaluation configurations are never read. Each fold predicts one configuration that no constant
saw, so the figures say how the model's *form* generalises, which the in-sample calibration figures
cannot. About 20 s per fold on one core.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pipeplan.costmodel.gpu import GpuCostModel
from pipeplan.costmodel.gpu_accuracy import LEAF_MIN_PASS, TOLERANCE, module_spans, wall_time
from pipeplan.costmodel.gpu_fit import fit, h100
from pipeplan.costmodel.gpu_measurements import CALIBRATION, LOADS, graphs, load_contention, measurements

__all__ = ["CrossValidation", "cross_validate"]


@dataclass(frozen=True)
class CrossValidation:
    """Held-out errors of every fold: (config, load) → predicted / measured − 1, leaf APEs."""

    errors: dict[tuple[str, str], float]
    slowdown: dict[tuple[str, str], float]  # predicted slowdown / measured slowdown − 1
    leaf_ape: dict[str, list[float]]  # config → |error| of each of its leaf spans (passes ≥ 5 ms)

    def median(self, load: str) -> float:
        return statistics.median(abs(e) for (_, lv), e in self.errors.items() if lv == load)

    def within(self, load: str | None = None) -> float:
        errs = [abs(e) for (_, lv), e in self.errors.items() if load is None or lv == load]
        return sum(e <= TOLERANCE for e in errs) / len(errs)

    def slowdown_error(self, load: str) -> float:
        return statistics.median(abs(e) for (_, lv), e in self.slowdown.items() if lv == load)

    def overall(self) -> float:
        return statistics.median(abs(e) for e in self.errors.values())

    def leaf_mape(self) -> float:
        ape = [a for values in self.leaf_ape.values() for a in values]
        return statistics.fmean(ape) if ape else float("nan")


def cross_validate(keys: Sequence[str] = tuple(sorted(CALIBRATION))) -> CrossValidation:
    """Refit without each of ``keys`` in turn and score it (calibration configurations only)."""
    device, graph_of = h100(), graphs()
    measured = {m.key: m for m in measurements()}
    errors: dict[tuple[str, str], float] = {}
    slowdown: dict[tuple[str, str], float] = {}
    leaf: dict[str, list[float]] = {}
    for held in keys:
        params, instrument = fit([k for k in keys if k != held])
        model, graph, m = GpuCostModel(params), graph_of[held], measured[held]
        walls = {lv: wall_time(model, graph, device, load_contention(lv)) for lv in ("idle", *LOADS)}
        for lv, w in walls.items():
            errors[held, lv] = w / m.wall(lv) - 1
            if lv != "idle":
                slowdown[held, lv] = (w / walls["idle"]) / (m.wall(lv) / m.idle) - 1
        if m.idle >= LEAF_MIN_PASS:
            spans = module_spans(model, graph, device, instrument["hook"], instrument["event"])
            leaf[held] = [abs(spans[n] / s - 1) for n, s in m.modules.items() if n in spans]
    return CrossValidation(errors, slowdown, leaf)
