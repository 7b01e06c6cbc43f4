"""Plan requests and plan answers: ``POST /v1/plans``, ``GET /v1/plans[/{id}]``, compare."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from pipeplan.api.schemas.common import ClusterRef, ModelRef, Strict, TextChecked
from pipeplan.api.schemas.harvest import HarvestDoc, HarvestIn

__all__ = [
    "CertificateDoc",
    "CompareCreate",
    "ComparePublic",
    "ComparisonDoc",
    "ComparisonRow",
    "PinIn",
    "PlanCreate",
    "PlanDoc",
    "PlanList",
    "PlanOptionsIn",
    "PlanPublic",
    "PlanSummary",
    "SolverIn",
    "StageDoc",
]

COSTMODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"


LayerPattern = Annotated[str, Field(min_length=1, max_length=256,
                                    description="a layer name, or an fnmatch glob such as 'blocks.1*'")]
DeviceName = Annotated[str, Field(min_length=1, max_length=128,
                                  description="a device id, or a device type (any device of that type)")]


class PinIn(Strict):
    """Layers that must run on one device, or on some device of one type (pipeplan.planner.constraints.Pin)."""

    layers: LayerPattern
    device: DeviceName


# Added after plans were stored under request keys made from the options: left out of the
# options' dump while they hold their defaults, so that those keys, and the plans, stay found.
_LATER_DEFAULTS: dict[str, Any] = {"transfer": "per-device", "pins": [], "keep_together": [], "forbid_devices": []}


class PlanOptionsIn(Strict):
    """What the plan optimises and under which rules (pipeplan.planner.problem.PlanOptions); an unknown layer
    or device in the constraints, or constraints that conflict, is a 422 naming them."""

    objective: Literal["throughput", "latency"] = Field(
        "throughput", description="minimise the bottleneck stage, or the end-to-end latency")
    comm: Literal["overlap", "serial"] = Field(
        "overlap", description="a stage's time is max(compute, recv, send), or their sum")
    microbatches: int = Field(4, ge=1, le=4096)
    in_flight: int | None = Field(None, ge=1, le=4096, description="microbatches whose activations a stage keeps")
    memory_margin: float = Field(0.1, ge=0.0, lt=1.0, description="share of each device's memory kept free")
    min_throughput: float | None = Field(None, gt=0.0, description="samples/s floor for the latency objective")
    max_devices: int | None = Field(None, ge=1, le=4096,
                                    description="use at most this many devices, so at most this many stages")
    transfer: Literal["per-device", "per-edge"] = Field(
        "per-device", description="a layer's output is sent once per receiving device, or once per consumer "
                                  "layer on another device")
    pins: list[PinIn] = Field(default_factory=list, max_length=4096,
                              description="layers that must run on a device or a device type; all of them hold")
    keep_together: list[Annotated[list[LayerPattern], Field(min_length=1, max_length=4096)]] = Field(
        default_factory=list, max_length=4096, description="groups of layers (names or globs), each on one device")
    forbid_devices: list[DeviceName] = Field(default_factory=list, max_length=4096,
                                             description="devices (ids or types) no layer may use")

    @model_serializer(mode="wrap")
    def _without_later_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        return {k: v for k, v in dumped.items() if k not in _LATER_DEFAULTS or v != _LATER_DEFAULTS[k]}


class SolverIn(Strict):
    """CP-SAT's limits (pipeplan.planner.ilp.SolverOptions); defaults come from the service's settings."""

    time_limit: float | None = Field(None, gt=0.0, description="seconds; at most the service's max_time_limit")
    seed: int = Field(0, ge=0, le=2**31 - 1)
    gap_limit: float = Field(0.0, ge=0.0, le=1.0, description="stop once (objective − bound) / objective ≤ this")
    threads: int | None = Field(None, ge=1, le=256, description="CP-SAT workers; at most max_solver_threads")


class _PlanRequest(Strict, TextChecked):
    model: ModelRef
    cluster: ClusterRef
    costmodel: str = Field("analytic", pattern=COSTMODEL_PATTERN,
                           description="'analytic', or the file name of a learned model the service offers")
    options: PlanOptionsIn = Field(default_factory=PlanOptionsIn)
    solver: SolverIn = Field(default_factory=SolverIn)
    wait: float | None = Field(None, ge=0.0, le=120.0,
                               description="seconds to wait for the result before answering 202 with a job "
                                           "(default: the service's sync_wait)")


# A request that plans for real: the OpenAPI example, which the schema tests send, so that they
# reach the solver (a zoo model captured by a worker, a built-in cluster, the roofline).
PLAN_EXAMPLE: dict[str, Any] = {"model": {"name": "tinygpt", "batch": 2, "granularity": "block"},
                                "cluster": "hetero-a100-t4", "costmodel": "analytic",
                                "options": {"microbatches": 4}, "solver": {"time_limit": 5}, "wait": 30}


class _HarvestingRequest(_PlanRequest):
    harvest: HarvestIn | None = Field(None, description="let stages keep weights in other devices' or their "
                                                        "host's spare memory; null (default): no borrowing")

    @model_serializer(mode="wrap")
    def _without_harvest_off(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out while off, so that the fingerprints of Idempotency-Keys sent before it existed hold.
        dumped: dict[str, Any] = handler(self)
        if dumped.get("harvest", 0) is None:
            del dumped["harvest"]
        return dumped


class PlanCreate(_HarvestingRequest):
    """A plan request.  The same graph, cluster state, cost model and options give the stored plan."""

    model_config = ConfigDict(json_schema_extra={"examples": [PLAN_EXAMPLE]})

    reserve: bool = Field(False, description="record the load this plan's stages put on their devices, "
                                             "and the memory its lenders hold (registered clusters only), "
                                             "until the plan is released")


class CompareCreate(_HarvestingRequest):
    """The ILP and every baseline on one problem, scored alike (pipeplan.planner.compare.compare); with
    ``harvest``, the plan that borrows memory beside them."""


class CertificateDoc(BaseModel):
    method: str
    status: str = Field(..., description="OPTIMAL, FEASIBLE or HEURISTIC")
    objective: float | None
    best_bound: float | None = None
    gap: float | None = None
    solve_time: float = 0.0
    details: dict[str, Any] = Field(default_factory=dict)
    solver: dict[str, Any] | None = Field(None, description="how the ILP ran (pipeplan.planner.plan.SolverDetails; "
                                          "docs/planner.md); null for baselines")


class StageDoc(BaseModel):
    index: int
    device: str
    layers: list[str]
    compute: float | None = Field(..., description="seconds per microbatch")
    recv: float | None
    send: float | None
    time: float | None
    memory: int = Field(..., description="bytes")
    capacity: int = Field(..., description="bytes usable on the device")


class PlanDoc(BaseModel):
    """The versioned plan JSON (pipeplan.planner.plan.Plan.to_dict); non-finite numbers are null."""

    format: Literal["pipeplan.plan"]
    version: int
    model: str
    cluster: str
    costmodel: str
    costmodel_digest: str | None = Field(None, description="sha256:… of the cost-model file; null for analytic")
    batch_size: int
    options: dict[str, Any]
    bottleneck: float | None
    throughput: float | None
    latency: float | None
    peak_memory: int
    certificate: CertificateDoc
    stages: list[StageDoc]
    harvest: HarvestDoc | None = Field(None, description="a plan made with harvest: the memory map per device, "
                                                         "the loans and the links that carry them")


class PlanPublic(BaseModel):
    id: str
    url: str
    created_at: datetime
    model: str
    cluster: str
    registered_cluster: bool = Field(..., description="planned on a cluster of the registry")
    cluster_revision: int | None = Field(..., description="the registered cluster's revision it was planned on")
    costmodel: str
    graph_digest: str
    reserved: bool = Field(..., description="its load is recorded on the cluster now")
    released_at: datetime | None
    loads: dict[str, Literal["compute", "memory"]] = Field(..., description="device → load a stage puts on it")
    cached: bool = Field(False, description="true when an identical earlier request made this plan")
    owner: str | None = Field(None, description="the owner of the token that first asked for it")
    plan: PlanDoc


class PlanSummary(BaseModel):
    id: str
    url: str
    created_at: datetime
    model: str
    cluster: str
    costmodel: str
    objective: str
    status: str
    bottleneck: float | None
    throughput: float | None
    latency: float | None
    reserved: bool
    owner: str | None = None


class PlanList(BaseModel):
    items: list[PlanSummary]
    total: int
    limit: int
    offset: int
    next: str | None = Field(..., description="the next page's URL, or null on the last page")


class ComparisonRow(BaseModel):
    method: str
    plan: PlanDoc
    objective_vs_ilp: float | None
    bottleneck_vs_bound: float | None


class ComparisonDoc(BaseModel):
    model: str
    cluster: str
    objective: str
    lower_bound: float | None = Field(..., description="seconds no plan's bottleneck can beat, borrowing or not")
    plans: list[ComparisonRow] = Field(..., description="the ILP first, then each baseline; with harvest, empty "
                                                        "when nothing fits without borrowing")
    failures: list[dict[str, str]] = Field(..., description="methods that found no plan, and why (the ILP among "
                                                            "them only with harvest)")
    harvest: ComparisonRow | None = Field(None, description="only with harvest: the plan that borrows memory "
                                                            "(method 'harvest'; its plan's harvest section has the "
                                                            "memory map), its ratios to the ILP's plan and the bound")


class ComparePublic(BaseModel):
    job_id: str
    cached: bool
    comparison: ComparisonDoc
