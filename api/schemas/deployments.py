"""Deployments and placement decisions: ``/v1/deployments``, ``/v1/clusters/{name}/loads|decisions``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeplan.api.schemas.common import ModelRef, Name, Strict, TextChecked
from pipeplan.api.schemas.plans import COSTMODEL_PATTERN, PlanDoc, PlanOptionsIn, SolverIn
from pipeplan.costmodel.hardware import Contention

__all__ = ["DecisionEntry", "DecisionList", "DecisionPublic", "DeploymentCreate", "DeploymentList",
           "DeploymentPublic", "DeploymentSummary", "LoadChange"]

DeploymentStatus = Literal["placing", "serving", "stopped", "failed"]
Action = Literal["placed", "replanned", "kept", "declined", "stopped"]


class DeploymentCreate(Strict, TextChecked):
    """A model to keep serving on a registered cluster, placed against the loads already there."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"model": {"name": "mlp", "batch": 2}, "cluster": "lab", "options": {"microbatches": 4},
         "horizon": "10m", "solver": {"time_limit": 5}, "wait": 30}]})

    model: ModelRef
    cluster: Name = Field(..., description="a registered cluster (PUT /v1/clusters/{name})")
    costmodel: str = Field("analytic", pattern=COSTMODEL_PATTERN,
                           description="'analytic', or the file name of a learned model the service offers")
    options: PlanOptionsIn = Field(default_factory=PlanOptionsIn)
    solver: SolverIn = Field(default_factory=SolverIn, description="limits of each solve made for it")
    horizon: str = Field("10m", min_length=1, max_length=64,
                         description="how long a plan serves before the next change: a duration (10m, 2h, 90s) "
                                     "or microbatches (5000mb); a re-plan's migration is amortised over it")
    wait: float | None = Field(None, ge=0.0, le=120.0,
                               description="seconds to wait for the placement before answering 202 "
                                           "(default: the service's sync_wait)")


class LoadChange(Strict, TextChecked):
    """New base loads of some devices of a registered cluster; the deployments on them are re-evaluated."""

    devices: dict[str, Contention] = Field(..., min_length=1, max_length=4096,
                                           description="device id → its load, as PATCH …/devices/{id} takes it")
    wait: float | None = Field(None, ge=0.0, le=120.0, description="seconds to wait for the decision before 202")


class DeploymentPublic(BaseModel):
    id: str
    url: str
    cluster: str
    status: DeploymentStatus = Field(..., description="placing → serving → stopped, or failed")
    model: str
    owner: str | None
    request: dict[str, Any] = Field(..., description="what was asked: the model (a graph by its digest), cost "
                                                     "model, options, solver limits, horizon")
    horizon: str
    version: int = Field(..., description="plans it has had: 1 once placed, +1 per re-plan")
    plan_id: str | None
    plan_url: str | None
    bottleneck: float | None = Field(..., description="predicted seconds per microbatch under the cluster's loads "
                                                      "as of the last decision")
    throughput: float | None = Field(..., description="predicted samples per second, likewise")
    loads: dict[str, Literal["compute", "memory"]] = Field(..., description="device → load its stages put there")
    plan: PlanDoc | None
    error: str | None
    error_type: str | None
    user_error: bool = Field(False, description="its placement failed because of the request (the planner "
                                                "refused it): a 422")
    last_decision: str | None = Field(..., description="the URL of the last decision that acted on it")
    decisions: str = Field(..., description="the URL of its decisions")
    created_at: datetime
    updated_at: datetime
    stopped_at: datetime | None


class DeploymentSummary(BaseModel):
    id: str
    url: str
    cluster: str
    status: DeploymentStatus
    model: str
    owner: str | None
    version: int
    plan_id: str | None
    bottleneck: float | None
    throughput: float | None
    created_at: datetime
    updated_at: datetime


class DeploymentList(BaseModel):
    items: list[DeploymentSummary]
    total: int
    limit: int
    offset: int
    next: str | None


class DecisionEntry(BaseModel):
    deployment: str
    action: Action = Field(..., description="placed; replanned (applied); declined (considered, not applied: "
                                            "see reason); kept (not considered); stopped")
    reason: str
    plan_id: str | None = Field(None, description="the new plan, when placed or replanned")
    bottleneck_before: float | None = Field(..., description="predicted s per microbatch before the trigger")
    bottleneck_after: float | None = Field(..., description="after the decision")
    throughput_before: float | None
    throughput_after: float | None
    migration: dict[str, Any] | None = Field(None, description="a re-plan's figures: decision, bytes, seconds, "
                                             "moves, horizon_microbatches, break_even_microbatches, "
                                             "stay/fresh/plan bottlenecks, cluster totals without and with it")


class DecisionPublic(BaseModel):
    id: str
    url: str
    cluster: str
    trigger: Literal["place", "stop", "load"]
    deployment_id: str | None = Field(..., description="the deployment placed or stopped")
    status: Literal["pending", "done", "failed"]
    request: dict[str, Any] = Field(..., description="the trigger's details (a load change: before and after)")
    error: str | None
    owner: str | None
    created_at: datetime
    finished_at: datetime | None
    considered: list[str] | None = Field(None, description="deployments whose re-plan was considered, in order")
    entries: list[DecisionEntry] | None = Field(None, description="each deployment's action and figures")
    total_before: float | None = Field(None, description="the cluster's predicted samples/s before the trigger")
    total_after: float | None = Field(None, description="and after the decision")


class DecisionList(BaseModel):
    items: list[DecisionPublic]
    total: int
    limit: int
    offset: int
    next: str | None
