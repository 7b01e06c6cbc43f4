"""How well a learned cost model predicts shapes it never saw: MAPE and share within ±10%, and
whether the held-out set is large enough for those figures to mean anything.

Figures are computed overall, per layer type and per contention level, for the main predictor and
the linear baseline side by side; the held-out points are kept for the report's plots.

**How many held-out configurations it takes.**  Rows of one configuration (a shape measured at
several contention levels) share its error, so the unit of evidence is the configuration, not the
row.  On the shipped Xeon profile (199 held-out configurations, main MAPE 8.1%), the MAPE of random
subsets of n of them ranged (5th–95th percentile, 2000 draws) over 2.3–22.7% for n = 2, 4.1–14.8%
for n = 10, 5.0–12.8% for n = 20 and 6.0–10.5% for n = 50.  From :data:`MIN_HELD_OUT_CONFIGS`
= 20 on, the figure is within a factor of about 1.6 of the truth, enough to tell a 10% model from
a 20% one; below it, the interval spans more than 2×, so :func:`judgement` says the figure cannot
judge the model.  Every evaluation also carries a bootstrap interval over its configurations
(:func:`mape_interval`), so a reader sees the uncertainty whatever the size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeplan.costmodel.estimators import Fitted, encode, operators, predict_log_time

__all__ = ["MIN_HELD_OUT_CONFIGS", "WORK_KINDS", "coverage", "error_figures", "evaluate_split", "judgement",
           "mape_interval"]

MIN_HELD_OUT_CONFIGS = 20  # see the module docstring for the measurement behind it
# Layer kinds that do a model's work: a dataset without one of them leaves the learned model
# extrapolating for every such layer of every model planned.
WORK_KINDS = ("linear", "conv", "matmul", "attention", "layernorm", "batchnorm", "activation", "softmax",
              "pool", "embedding", "elementwise", "reduction")


def error_figures(measured: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """MAPE (%), share of predictions within ±10% (%), median absolute error (%), count."""
    rel = np.abs(predicted - measured) / measured
    return {"mape": float(100 * rel.mean()), "within10": float(100 * (rel <= 0.10).mean()),
            "median_ape": float(100 * np.median(rel)), "n": len(rel)}


def _by(key: str, rows: Sequence[dict[str, Any]], measured: np.ndarray,
        predicted: np.ndarray) -> dict[str, dict[str, float]]:
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(str(row[key]), []).append(i)
    return {name: error_figures(measured[idx], predicted[idx]) for name, idx in sorted(groups.items())}


def evaluate_split(fitted: Fitted, vocabulary: dict[str, list[str]],
                   test_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Error figures of ``main`` and ``linear`` on ``test_rows`` (shapes not trained on)."""
    x, ops = encode(test_rows, vocabulary), operators(test_rows)
    measured = np.array([float(r["time_s"]) for r in test_rows])
    out: dict[str, Any] = {"test_rows": len(test_rows), "test_configs": len({r["config"] for r in test_rows})}
    points: dict[str, list[Any]] = {"measured": measured.tolist(),
                                    "contention": [str(r["contention"]) for r in test_rows],
                                    "layer_kind": [str(r["layer_kind"]) for r in test_rows]}
    configs = [str(r["config"]) for r in test_rows]
    for name in ("main", "linear"):
        predicted = np.power(10.0, predict_log_time(fitted, name, x, ops))
        out[name] = {"overall": {**error_figures(measured, predicted),
                                 "mape_interval": mape_interval(measured, predicted, configs)},
                     "by_contention": _by("contention", test_rows, measured, predicted),
                     "by_kind": _by("layer_kind", test_rows, measured, predicted)}
        points[name] = predicted.tolist()
    out["points"] = points
    return out


def mape_interval(measured: np.ndarray, predicted: np.ndarray, configs: Sequence[str],
                  draws: int = 1000, seed: int = 0) -> list[float]:
    """90% bootstrap interval of the MAPE (%), resampling whole configurations (a shape's rows
    share its error, so resampling rows would overstate the evidence).  With fewer than
    :data:`MIN_HELD_OUT_CONFIGS` configurations the bootstrap itself is too narrow (two
    configurations give three possible resamples): trust :func:`judgement` there."""
    rel = np.abs(predicted - measured) / measured
    names = sorted(set(configs))
    index = {c: i for i, c in enumerate(names)}
    which = np.array([index[c] for c in configs])
    sums, counts = np.bincount(which, rel, len(names)), np.bincount(which, minlength=len(names))
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(names), size=(draws, len(names)))
    mapes = 100 * sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    lo, hi = np.percentile(mapes, [5, 95])
    return [float(lo), float(hi)]


def coverage(rows: Sequence[dict[str, Any]], test_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Rows and configurations per layer kind, how many configurations of each were held out, the
    kinds with no held-out rows (their error is unknown) and the :data:`WORK_KINDS` with no rows at
    all (the model has never seen them)."""
    per_kind: dict[str, dict[str, int]] = {}
    held = {(str(r["layer_kind"]), str(r["config"])) for r in test_rows}
    for kind in sorted({str(r["layer_kind"]) for r in rows}):
        of_kind = [r for r in rows if str(r["layer_kind"]) == kind]
        configs = {str(r["config"]) for r in of_kind}
        per_kind[kind] = {"rows": len(of_kind), "configs": len(configs),
                          "held_out_configs": sum((kind, c) in held for c in configs)}
    return {"by_kind": per_kind,
            "without_held_out": [k for k, v in per_kind.items() if v["held_out_configs"] == 0],
            "missing": [k for k in WORK_KINDS if k not in per_kind]}


def judgement(evaluation: dict[str, Any] | None) -> str | None:
    """Why ``evaluation``'s figures cannot judge the model, or None when they can."""
    if evaluation is None:
        return None
    n = int(evaluation.get("test_configs", 0))
    if n < MIN_HELD_OUT_CONFIGS:
        return (f"only {n} layer configuration{'s' if n != 1 else ''} held out (at least "
                f"{MIN_HELD_OUT_CONFIGS} are needed): the held-out error could be off by more than 2x either "
                "way and cannot judge this model; profile more shapes (pipeplan profile --layers sweep,… "
                "or a larger --budget-minutes)")
    return None
