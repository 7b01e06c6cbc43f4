"""What a worker is asked for one placement decision: frozen, picklable values built by the server.

The cluster's *fixed* load is its base load (what the registry records as running) plus the
reservations of plain reserved plans; each deployment adds one co-runner per stage on top
(:func:`pipeplan.api.reservations.combine`), exactly as the registry computes a device's load.

>>> Trigger("load", devices=("gpu0",)).describe()
'load change on gpu0'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeplan.api.payloads import SolverLimits, ZooCapture
from pipeplan.costmodel.cluster import Cluster
from pipeplan.planner.problem import PlanOptions

__all__ = ["PlacePayload", "Tenant", "Trigger"]


@dataclass(frozen=True)
class Trigger:
    """Why a decision is made: a deployment placed or stopped, or base loads changed."""

    kind: str  # place | stop | load
    deployment: str | None = None  # the deployment placed or stopped
    devices: tuple[str, ...] = ()  # load: the devices whose base load changed

    def describe(self) -> str:
        if self.kind == "load":
            return f"load change on {', '.join(self.devices)}"
        return f"{'placement' if self.kind == 'place' else 'stop'} of deployment {self.deployment}"


@dataclass(frozen=True)
class Tenant:
    """One deployment as the worker needs it."""

    id: str
    role: str  # new (to place) | serving | leaving (stopped by the trigger: present before it only)
    costmodel: str  # what the worker loads
    costmodel_name: str  # what its plans record
    options: PlanOptions
    solver: SolverLimits
    horizon: str  # text of pipeplan.planner.migration.Horizon
    graph_text: str | None = None  # the graph's canonical JSON; None: capture ``zoo`` first
    zoo: ZooCapture | None = None
    plan: dict[str, Any] | None = None  # its current plan document (None for a new one)
    loads: dict[str, str] = field(default_factory=dict)  # device -> compute | memory, of its current plan


@dataclass(frozen=True)
class PlacePayload:
    """A decision: the cluster before and after the trigger (fixed loads only), and the deployments."""

    before: Cluster  # base loads and plain reservations before the trigger
    after: Cluster  # and after it (differs from ``before`` for a load change)
    fixed: dict[str, tuple[str, ...]]  # device -> kinds of plain reserved plans' stages, on both
    tenants: tuple[Tenant, ...]
    trigger: Trigger
