"""What a reserved plan does to a cluster: each stage becomes a co-runner on its device.

A stage that runs on a device is, to every later plan, one more process sharing that device.  Its
character follows the roofline: a stage whose arithmetic intensity (FLOPs per byte moved) reaches
the device's ridge point (peak FLOP/s ÷ bandwidth) is compute-bound, otherwise memory-bound
(:func:`pipeplan.costmodel.analytic.compute_bound`, the roofline's own test).

A device's load is then its base load (what the registry says runs there) plus one co-runner per
reserved stage:

- co-runners of one kind add up (``1×compute`` + a compute stage = ``2×compute``); kinds that differ
  give ``mixed``;
- a base load given as utilisation ``u`` is read as ``u / (1 − u)`` co-runners, the count that
  holds that share under time-sharing (n co-runners hold n / (n + 1)), and the sum is written back as
  a utilisation, which keeps ``Contention``'s either-or form.

>>> combine(Contention(), ["compute"]).describe()
'1×compute'
>>> combine(Contention(corunners=1, kind="memory"), ["compute"]).describe()
'2×mixed'
>>> combine(Contention(utilization=0.5), ["memory"]).describe()
'67% used'

A plan made with harvesting also holds memory: each lending device keeps the weights it lends
(``lent`` in the plan's memory map) for as long as the plan is reserved.  Later plans see that
device with that much less memory (:func:`with_lent`); the memory margin applies to what is left.
A host's memory (``host:NAME`` rows) is not held: the cluster spec has no host memory to take it
from, and a request states its host tier itself (``harvest.host_memory``).

>>> lent_bytes({"harvest": {"memory": [{"device": "d0", "lent": 0}, {"device": "d1", "lent": 3},
...                                    {"device": "host:h", "lent": 2}]}})
{'d1': 3, 'host:h': 2}

(:meth:`pipeplan.api.registry.Registry.reserve` records the rows of the cluster's devices only.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipeplan.costmodel.analytic import compute_bound
from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention, Device

__all__ = ["LENT", "MAX_CORUNNERS", "combine", "lent_bytes", "stage_kind", "with_lent", "with_reserved"]

MAX_CORUNNERS = 64  # Contention's own bound
LENT = "lent"  # the kind of a reservation that holds a lender's memory, not a stage's load


def stage_kind(layers: Iterable[Layer], device: Device) -> str:
    """``compute`` or ``memory``: which roof the stage's layers, taken together, sit under."""
    flops = traffic = 0
    for layer in layers:
        flops += layer.flops
        traffic += layer.bytes_read + layer.bytes_written
    return "compute" if compute_bound(flops, traffic, device) else "memory"


def combine(base: Contention, kinds: Sequence[str]) -> Contention:
    """``base`` plus one co-runner of each of ``kinds``."""
    if not kinds:
        return base
    if base.utilization is not None:
        equivalent = base.utilization / (1.0 - base.utilization) + len(kinds)
        # Kept strictly below 1 (Contention's bound) however many stages are reserved.
        return Contention(utilization=min(equivalent / (equivalent + 1.0), 0.999))
    present = set(kinds) | ({base.kind} if base.corunners else set())
    kind = present.pop() if len(present) == 1 else "mixed"
    return Contention.model_validate({"corunners": min(base.corunners + len(kinds), MAX_CORUNNERS), "kind": kind})


def with_reserved(cluster: Cluster, kinds: Mapping[str, Sequence[str]]) -> Cluster:
    """``cluster`` with one co-runner of each of ``kinds[device]`` on each device's load (devices the
    cluster lacks are ignored)."""
    ids = {d.id for d in cluster.devices}
    out = cluster
    for device, ks in kinds.items():
        if ks and device in ids:
            out = out.with_load(device, combine(cluster.device(device).load, ks))
    return out


def lent_bytes(plan: Mapping[str, Any]) -> dict[str, int]:
    """Bytes each lender (device or ``host:NAME``) of ``plan`` (a plan document) holds for its
    stages, the rows that lend nothing left out; empty for a plan made without harvesting."""
    harvest = plan.get("harvest") or {}
    return {row["device"]: int(row["lent"]) for row in harvest.get("memory", ()) if row["lent"] > 0}


def with_lent(cluster: Cluster, held: Mapping[str, int]) -> Cluster:
    """``cluster`` with each device's memory less the bytes ``held[device]`` (devices it lacks are
    ignored).  At least one byte is left, a device's memory being positive: nothing fits there."""
    held = {device: nbytes for device, nbytes in held.items() if nbytes > 0}
    if not any(d.id in held for d in cluster.devices):
        return cluster
    spec = cluster.to_dict()
    for device in spec["devices"]:
        if device["id"] in held:
            device["memory"] = max(device["memory"] - held[device["id"]], 1)
    return Cluster.from_dict(spec, source=f"cluster {cluster.name!r} less the memory its lenders hold")
