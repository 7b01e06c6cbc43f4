"""The cluster registry: ``PUT/GET/DELETE /v1/clusters/{name}``, device loads, reservations."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeplan.api.schemas.common import TextChecked
from pipeplan.costmodel.cluster import ClusterSpec
from pipeplan.costmodel.hardware import Contention

__all__ = ["ClusterList", "ClusterPublic", "ClusterPut", "ClusterSummary", "DevicePatch", "DeviceState",
           "Lent", "Reservation"]


class ClusterPut(ClusterSpec, TextChecked):
    """A cluster spec (pipeplan.costmodel.cluster); its name is the URL's, so ``name`` may be left out."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str | None = Field(None, description="must equal the name in the URL when given")  # type: ignore[assignment]


class DevicePatch(TextChecked):
    """A device's current load, as the registry should record it (reservations come on top)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    load: Contention


class Reservation(BaseModel):
    plan_id: str
    kind: Literal["compute", "memory"]


class Lent(BaseModel):
    plan_id: str
    bytes: int = Field(..., description="bytes of this device's memory the plan's borrowing stages keep here")


class DeviceState(BaseModel):
    id: str
    type: str
    host: str
    base_load: Contention = Field(..., description="what the registry records as running there")
    load: Contention = Field(..., description="the load plans see: base load plus reservations")
    reservations: list[Reservation]
    memory: int = Field(..., description="bytes plans see: the spec's memory less what reserved plans hold "
                                         "here as lenders (the memory margin applies to it)")
    lent: list[Lent] = Field(..., description="reserved plans that keep weights in this device's memory")


class ClusterPublic(BaseModel):
    name: str
    url: str
    builtin: bool = Field(..., description="a read-only built-in spec, not (yet) in the registry")
    revision: int | None = Field(..., description="grows with every change, reservations included")
    created_at: datetime | None
    updated_at: datetime | None
    owner: str | None = Field(None, description="the owner of the token that registered it (it and admins may "
                                                "change it); null for built-in clusters and ones registered "
                                                "before owners")
    devices: list[DeviceState]
    spec: dict[str, Any] = Field(..., description="the spec with base loads and every link spelled out")


class ClusterSummary(BaseModel):
    name: str
    url: str
    builtin: bool
    devices: int
    revision: int | None


class ClusterList(BaseModel):
    items: list[ClusterSummary]
