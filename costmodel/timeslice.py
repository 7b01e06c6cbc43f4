"""Time-sliced sharing of a GPU: what a co-tenant costs a forward pass, for every form of load.

By default a GPU runs one process's context at a time and switches between contexts that have
work, each for a time slice (or until it runs out of work). For a pass launched by one process and
waited for at its end (what a pipeline stage does), two effects follow:

- **stretch**: while the pass keeps the GPU busy, the other contexts take their turns, so its
  device time grows by a factor ``1 + s``;
- **wait**: the pass's last kernels queue behind whatever slice another context holds when they
  arrive, and a pass whose kernels come slower than the GPU runs them (launch-bound) lets the
  others in between. Either way it waits ``w`` seconds of whole slices per pass, however short the
  pass is: why a 0.2 ms forward is 3–7× slower under any co-runner while a 10 ms one is 1.1–1.6×.

For ``n`` co-runners of a kind, each working a share ``d`` (duty) of the time::

    s = d · share[kind] · n^alpha        w = d · slice[kind] · n^alpha

``share`` and ``slice`` of the synthetic kinds (compute, memory, mixed) are fitted on the shared
H100 measurements (``costmodel/data/gpu/``). A ``tenant`` (an inference process that launches
back to back and so always has work queued) takes a full turn: ``s = n`` and ``w = n · slice``
with the driver's time slice, an assumption no measurement has checked yet. A measured
``utilization`` u is what :class:`~pipeplan.costmodel.corunners.CoRunners` makes of it: one compute
co-runner working ``u`` of the time.

>>> p = SharingParams()
>>> sharing(Contention.parse("2xtenant"), p)
Sharing(stretch=2.0, wait=0.004)
>>> sharing(Contention(), p)
Sharing(stretch=0.0, wait=0.0)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from pipeplan.costmodel.hardware import Contention

__all__ = ["TENANT_SLICE", "Sharing", "SharingParams", "pass_wall", "sharing"]

# Seconds a back-to-back tenant holds the GPU per turn. An assumption of the order of the driver's
# default compute time slice: no tenant has been measured yet (issue 15, item 5).
TENANT_SLICE = 2e-3


class Sharing(NamedTuple):
    """What a load costs a pass on a time-sliced GPU."""

    stretch: float  # s: the pass's device time is multiplied by 1 + s
    wait: float  # w: seconds of others' slices the pass waits for, once per pass


@dataclass(frozen=True)
class SharingParams:
    """Per-kind constants of :func:`sharing` (defaults: a rough guess; fitted ones live in data)."""

    share_compute: float = 0.25
    share_memory: float = 0.3
    share_mixed: float = 0.4
    slice_compute: float = 2e-4  # s
    slice_memory: float = 3e-4
    slice_mixed: float = 4e-4
    alpha: float = 0.8  # how co-runners add up: n^alpha (1: independently; below 1: they share turns)
    tenant_slice: float = TENANT_SLICE

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value >= 0:
                raise ValueError(f"sharing parameter {name} must be non-negative, got {value!r}")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SharingParams:
        unknown = set(raw) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown sharing parameters {sorted(unknown)}")
        return cls(**{k: float(v) for k, v in raw.items()})


def sharing(load: Contention, params: SharingParams) -> Sharing:
    """The stretch and wait that ``load`` puts on a pass (see the module docstring)."""
    if load.idle:
        return Sharing(0.0, 0.0)
    if load.utilization is not None:
        load = Contention(corunners=1, kind="compute", duty=load.utilization)
    n, d = load.corunners, load.duty
    if load.kind == "tenant":
        return Sharing(float(n) * d, n * d * params.tenant_slice)
    share = {"compute": params.share_compute, "memory": params.share_memory, "mixed": params.share_mixed}[load.kind]
    slc = {"compute": params.slice_compute, "memory": params.slice_memory, "mixed": params.slice_mixed}[load.kind]
    scale = d * n**params.alpha
    return Sharing(share * scale, slc * scale)


def pass_wall(host: float, device: float, load: Contention, params: SharingParams) -> float:
    """Wall time of a pass that needs ``host`` seconds to launch and ``device`` seconds of GPU time.

    Launching and running overlap, so the pass takes the longer of the two; the others' turns
    stretch the device part, and the pass waits for their slices once.

    >>> pass_wall(1e-3, 4e-3, Contention.parse("1xtenant"), SharingParams())
    0.01
    """
    s = sharing(load, params)
    return max(host, device * (1.0 + s.stretch)) + s.wait
