"""What makes a deployment switch without being asked: a cluster state that changed, a measured drift.

:func:`cluster_without` and :func:`slowed` turn an event into the cluster state the planner
weighs (a device gone; a device measured that much slower or faster than its spec says), and
:func:`watch_drift` is the thread that compares each stage's measured compute with its prediction
(``ServeOptions.drift``) and re-plans once per layout when it strays.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

from pipeplan.costmodel.cluster import Cluster
from pipeplan.executor.errors import PlanMismatchError, RunError

if TYPE_CHECKING:
    from pipeplan.executor.deploy_switch import Switching

__all__ = ["cluster_without", "slowed", "watch_drift", "with_slowdowns"]

log = logging.getLogger(__name__)


def cluster_without(cluster: Cluster, devices: set[str]) -> Cluster:
    """``cluster`` less ``devices`` (and their links)."""
    doc = cluster.to_dict()
    doc["devices"] = [d for d in doc["devices"] if d["id"] not in devices]
    doc["links"] = [lk for lk in doc["links"] if lk["a"] not in devices and lk["b"] not in devices]
    return Cluster.from_dict(doc)


def slowed(cluster: Cluster, device: str, factor: float) -> Cluster:
    """``cluster`` with ``device`` ``factor`` times slower than now (its ``slowdown`` multiplied)."""
    return with_slowdowns(cluster, {device: (cluster.device(device).slowdown or 1.0) * factor})


def with_slowdowns(cluster: Cluster, slowdowns: dict[str, float]) -> Cluster:
    """``cluster`` with each device of ``slowdowns`` that many times slower than its cost model
    predicts: how a measured drift becomes a cluster state the planner can weigh.

    The factor is not folded into the devices' peaks: a profiled or learned cost model predicts
    from the device type and ignores them, so a re-plan would see no change.  The planner
    multiplies every time on a device by its slowdown, whatever the cost model."""
    doc = cluster.to_dict()
    for d in doc["devices"]:
        if d["id"] in slowdowns:
            d["slowdown"] = min(1000.0, max(1e-3, slowdowns[d["id"]]))
    return Cluster.from_dict(doc)


def _strays(ratio: float, drift: float) -> bool:
    return max(ratio, 1 / ratio) > 1 + drift


def watch_drift(d: Switching) -> None:
    """Re-plan when stages' measured compute over their last ``drift_after`` microbatches strays
    from the prediction by more than ``drift``.

    Every straying stage's device gets the measured slowdown at once (its slowdown when the
    layout was planned times measured ÷ predicted), so a co-runner on one device is not blamed on
    another.  The check goes on for as long as the deployment serves, so a load that arrives (or
    leaves) long after a switch is noticed.  After a re-plan that kept the layout, the ratios acted
    on are remembered, and the layout is re-planned again only when the measured times stray from
    *those* by more than ``drift``: a drift the planner judged not worth moving for does not
    re-plan every interval."""
    assert d.serving.drift is not None
    drift = d.serving.drift
    planned_on: tuple[int, dict[str, float]] | None = None  # (layout, each device's slowdown it was planned with)
    acted: list[float] | None = None  # each stage's ratio at the last re-plan that kept this layout
    last = -math.inf  # when the last drift re-plan was made
    while not d._ended.wait(d.serving.drift_interval):
        if time.monotonic() - last < d.serving.drift_cooldown:
            continue
        layout, plan = d._layout, d.plan
        if planned_on is None or planned_on[0] != layout:
            planned_on, acted = (layout, {dev.id: dev.slowdown or 1.0 for dev in d.cluster.devices}), None
        if d._queue.closed:
            continue
        recent = d._meter.recent_compute(d.serving.drift_after)
        if recent is None or len(recent) != len(plan.stages):
            continue
        ratios = [m / p.compute if p.compute > 0 < m else 1.0 for m, p in zip(recent, plan.stages, strict=True)]
        if acted is not None and not any(_strays(r / a, drift) for r, a in zip(ratios, acted, strict=True)):
            continue
        straying = [k for k, r in enumerate(ratios) if _strays(r, drift)]
        if not straying:
            continue
        base = planned_on[1]
        slowdowns = {plan.stages[k].device: base.get(plan.stages[k].device, 1.0) * ratios[k] for k in straying}
        why = "drift: " + "; ".join(f"{plan.stages[k].device} computes in {recent[k] * 1e3:.3f} ms, predicted "
                                    f"{plan.stages[k].compute * 1e3:.3f} ms ({ratios[k]:.2f}×)" for k in straying)

        def change(cluster: Cluster, layout: int = layout, slowdowns: dict[str, float] = slowdowns) -> Cluster | None:
            # measured on this layout: if another re-plan switched meanwhile, they describe nothing now
            return with_slowdowns(cluster, slowdowns) if d._layout == layout else None

        last = time.monotonic()
        try:
            record = d.replan_change(change, why,
                                     measured={plan.stages[k].device: ratios[k] for k in straying})
        except (RunError, PlanMismatchError) as exc:  # the deployment ended, or the new plan cannot be served
            log.warning("drift re-plan failed: %s", exc)
            record = None
        acted = ratios if record is None else None
