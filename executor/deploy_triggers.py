"""What makes a deployment switch without being asked: a cluster state that changed, a measured drift.

:func:`cluster_without` and :func:`slowed` turn an event into the cluster state the planner
weighs (a device gone; a device measured that much slower or faster than its spec says), and
:func:`watch_drift` is the thread that compares each stage's measured compute with its prediction
(``ServeOptions.drift``) and re-plans once per layout when it strays.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pipeplan.costmodel.cluster import Cluster
from pipeplan.executor.errors import RunError

if TYPE_CHECKING:
    from pipeplan.executor.deploy_switch import Switching

__all__ = ["cluster_without", "slowed", "watch_drift"]

log = logging.getLogger(__name__)


def cluster_without(cluster: Cluster, devices: set[str]) -> Cluster:
    """``cluster`` less ``devices`` (and their links)."""
    doc = cluster.to_dict()
    doc["devices"] = [d for d in doc["devices"] if d["id"] not in devices]
    doc["links"] = [lk for lk in doc["links"] if lk["a"] not in devices and lk["b"] not in devices]
    return Cluster.from_dict(doc)


def slowed(cluster: Cluster, device: str, factor: float) -> Cluster:
    """``cluster`` with ``device`` ``factor`` times slower (peak FLOP/s and memory bandwidth divided):
    how a measured drift becomes a cluster state the planner can weigh."""
    doc = cluster.to_dict()
    for d in doc["devices"]:
        if d["id"] == device:
            d["peak_flops"] = float(d["peak_flops"]) / factor
            d["mem_bandwidth"] = float(d["mem_bandwidth"]) / factor
    return Cluster.from_dict(doc)


def watch_drift(d: Switching) -> None:
    """Re-plan once per layout when a stage's measured compute strays from its prediction."""
    assert d.serving.drift is not None
    checked = -1
    while not d._ended.wait(d.serving.drift_interval):
        layout, plan = d._layout, d.plan
        if layout == checked or d._queue.closed:
            continue
        stats = d._meter.snapshot(0, 0)
        if len(stats.stages) != len(plan.stages) or \
                min(s.microbatches for s in stats.stages) < d.serving.drift_after:
            continue
        checked = layout
        ratios = [(s.compute / p.compute if p.compute > 0 < s.compute else 1.0, s, p) for s, p in zip(stats.stages,
                                                                                          plan.stages, strict=True)]
        ratio, measured, planned = max(ratios, key=lambda r: max(r[0], 1 / r[0]))
        if max(ratio, 1 / ratio) <= 1 + d.serving.drift:
            continue
        why = (f"drift: {measured.device} computes in {measured.compute * 1e3:.3f} ms, predicted "
               f"{planned.compute * 1e3:.3f} ms ({ratio:.2f}×)")
        try:
            d.replan(slowed(d.cluster, measured.device, ratio), why)
        except RunError as exc:
            log.warning("drift re-plan failed: %s", exc)
