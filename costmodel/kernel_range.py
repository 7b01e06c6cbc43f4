"""Layers of more operators than any layer the sweep timed: the rest priced at the device's dispatch floor.

The sweep times layers of one to a few operators (8 at most on the Zen 5). Export unrolls a recurrence into
one layer of hundreds or thousands: RWKV's WKV scan is one "linear" layer of 1,659 small operators, Qwen3-Next's
and OLMo Hybrid's gated delta rule a layer of 383. The learned model reads the operator count as a feature
and predicts the time as a ratio of the idle roofline, which charges each operator a fixed dispatch cost
(:data:`~pipeplan.costmodel.analytic.DEFAULT_OVERHEAD`). Far outside the counts it was fitted on, the trees
and processes extrapolate as they like (one elementwise layer of 15 MB: 9.5 ms priced at 23 operators, 4.1
ms at 100, 2.1 ms at 383), and the ratio multiplies a base that is mostly dispatch: RWKV's layer was priced
11.7 ms, about 3.5× its time.

So a layer with more operators than the sweep's most is priced as a layer of that many operators with its
sizes, plus each further operator at the **dispatch floor**: the time of the fastest one-operator layer the
sweep timed idle on the device (1.6 µs on the Zen 5 and the model-167 Xeon, 2.3 µs on the Zen 4 and the
model-207 Xeon, 3.7 µs on the Zen 3), a figure of the device's own profile. Under load the further
operators slow down as the learned model says the rest of the layer does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["kernel_range", "within_range"]


def kernel_range(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """What a model fitted on sweep ``rows`` knows of operator counts: the most operators in one layer
    (``sweep_kernels``) and the fastest idle one-operator layer (``dispatch_s``); empty without such rows.

    >>> kernel_range([{"kernels": 1, "corunners": 0, "time_s": 2e-6}, {"kernels": 1, "corunners": 1, "time_s": 1e-6},
    ...               {"kernels": 6, "corunners": 0, "time_s": 9e-6}])
    {'sweep_kernels': 6, 'dispatch_s': 2e-06}
    """
    single = [float(r["time_s"]) for r in rows if float(r["kernels"]) == 1 and float(r["corunners"]) == 0]
    if not single:
        return {}
    return {"sweep_kernels": int(max(float(r["kernels"]) for r in rows)), "dispatch_s": min(single)}


def within_range(rows: Sequence[dict[str, Any]], most: float) -> tuple[list[dict[str, Any]], np.ndarray]:
    """``rows`` with at most ``most`` operators each, and how many operators each row had beyond it.

    >>> clipped, beyond = within_range([{"kernels": 3}, {"kernels": 20}], 8)
    >>> [r["kernels"] for r in clipped], beyond.tolist()
    ([3, 8], [0.0, 12.0])
    """
    beyond = np.array([max(0.0, float(r["kernels"]) - most) for r in rows])
    return [r if b == 0 else {**r, "kernels": most} for r, b in zip(rows, beyond, strict=True)], beyond
