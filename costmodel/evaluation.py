"""How well a learned cost model predicts shapes it never saw: MAPE and share within ±10%.

Figures are computed overall, per layer type and per contention level, for the main predictor and
the linear baseline side by side; the held-out points are kept for the report's plots.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from costmodel.learned import Fitted

__all__ = ["error_figures", "evaluate_split"]


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
    from costmodel.learned import encode, operators, predict_log_time

    x, ops = encode(test_rows, vocabulary), operators(test_rows)
    measured = np.array([float(r["time_s"]) for r in test_rows])
    out: dict[str, Any] = {"test_rows": len(test_rows), "test_configs": len({r["config"] for r in test_rows})}
    points: dict[str, list[Any]] = {"measured": measured.tolist(),
                                    "contention": [str(r["contention"]) for r in test_rows],
                                    "layer_kind": [str(r["layer_kind"]) for r in test_rows]}
    for name in ("main", "linear"):
        predicted = np.power(10.0, predict_log_time(fitted, name, x, ops))
        out[name] = {"overall": error_figures(measured, predicted),
                     "by_contention": _by("contention", test_rows, measured, predicted),
                     "by_kind": _by("layer_kind", test_rows, measured, predicted)}
        points[name] = predicted.tolist()
    out["points"] = points
    return out
