"""Layers whose main operator the sweep never timed, priced at the device's roofline instead of by analogy.

The sweep's estimators know an operator by its one-hot column. A layer named by an operator outside that
vocabulary (ZoeDepth's metric-bins head, named ``aten.rsub``; CHMv2's depth head, ``aten.linspace``; every
``aten.matmul`` of a tuning family) has all those columns zero, so its price is whatever the trees make of "no
operator" at its sizes, and retraining moves it at random: CHMv2's one linspace layer, 2.9 ms in-model on the
Zen 4, was priced 22 ms by the shipped model and 35 ms after 1,400 convolution rows were added; ZoeDepth's
rsub, 5.2 ms, 37 ms.

Such a layer is priced as the analytic model prices any layer: its FLOPs at the device's peak or its bytes at
its bandwidth, whichever is slower, plus each of its operators (one at least) at the device's dispatch floor
(:mod:`~pipeplan.costmodel.kernel_range`). Under load it slows down as the learned model says a layer of its
sizes does. The in-model correction is fitted on rows priced the same way, so it learns, per operator it has
seen inside real passes, how far such layers sit from that floor; for an operator no tuning family holds
either, the floor stands, bounded below by physics rather than unbounded above.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeplan.costmodel.dataset import roofline_s

__all__ = ["UNSEEN_OPS", "roofline_floor", "unseen"]

# meta["unseen_ops"] of a model whose in-model correction was fitted with unseen operators priced here; a file
# without it prices them through the trees, as it was fitted.
UNSEEN_OPS = "roofline"


def unseen(rows: Sequence[dict[str, Any]], vocabulary: dict[str, list[str]]) -> np.ndarray:
    """Whether each row's main operator is outside the sweep's ``vocabulary``.

    >>> unseen([{"main_op": "aten.rsub"}, {"main_op": "aten.add"}], {"main_op": ["aten.add"]}).tolist()
    [True, False]
    """
    known = set(vocabulary["main_op"])
    return np.array([str(r["main_op"]) not in known for r in rows], dtype=bool)


def roofline_floor(rows: Sequence[dict[str, Any]], dispatch_s: float) -> np.ndarray:
    """Each row's idle time at the roofline of its device's figures, plus ``dispatch_s`` per operator, one at
    least (a layer of views alone, ``aten.slice`` of no operator and no bytes, took 5–14 µs in-model).

    >>> roofline_floor([{"flops": 2e9, "bytes_read": 1e6, "bytes_written": 0, "kernels": 3,
    ...                  "peak_flops": 1e11, "mem_bandwidth": 1e10}], 2e-6).round(6).tolist()
    [0.020006]
    """
    return np.array([roofline_s(r) + max(1.0, float(r["kernels"])) * dispatch_s for r in rows])
