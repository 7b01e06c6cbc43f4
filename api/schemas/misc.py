"""The zoo, cost predictions and health."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SkipValidation

from pipeplan.api.schemas.common import ClusterRef, Strict, TextChecked
from pipeplan.api.schemas.graph import LayerDoc
from pipeplan.api.schemas.plans import COSTMODEL_PATTERN
from pipeplan.costmodel.hardware import Contention, Device

__all__ = ["Health", "LayerPrediction", "Liveness", "PoolHealth", "PredictRequest", "PredictResponse", "QueueHealth",
           "Readiness", "ZooModelPublic"]


class ZooModelPublic(BaseModel):
    name: str
    family: str = Field(..., description="builtin or transformers")
    inputs: str = Field(..., description="features, image or tokens")
    description: str
    meta: bool = Field(False, description="built on the meta device (LLM-scale): it can be planned, not run")


class PredictRequest(Strict, TextChecked):
    """Each layer's time on each device, under the devices' loads (or ``load`` for all of them)."""

    costmodel: str = Field("analytic", pattern=COSTMODEL_PATTERN)
    # Checked by pipeplan.costmodel.graph (as a graph of these layers), whose messages name the layer.
    layers: SkipValidation[list[LayerDoc]] = Field(..., description="layers in the graph format")
    cluster: ClusterRef | None = Field(None, description="a cluster (its loads apply), or give devices")
    devices: list[Device] | None = Field(None, description="devices, when no cluster is given")
    load: Contention | None = Field(None, description="assume this load on every device instead")


class LayerPrediction(BaseModel):
    name: str
    seconds: dict[str, float | None] = Field(..., description="device id → seconds for one forward pass")
    params: int
    activations: int
    workspace: int


class PredictResponse(BaseModel):
    costmodel: str
    devices: list[str]
    layers: list[LayerPrediction]
    totals: dict[str, float | None] = Field(..., description="device id → the whole list of layers, seconds")


class PoolHealth(BaseModel):
    size: int
    alive: int
    busy: int
    queued: int
    capacity: int
    restarts: int = Field(..., description="workers started in place of ones that died or were stopped")
    ready: int = Field(..., description="workers alive with their imports done")
    recycled: int = Field(..., description="workers replaced on purpose: PIPEPLAN_WORKER_MAX_JOBS, "
                                           "PIPEPLAN_WORKER_MAX_RSS, or after running out of memory")
    started: bool = Field(..., description="whether the pool's first workers have finished starting")


class QueueHealth(BaseModel):
    workers: int = Field(..., description="`pipeplan worker` processes with a heartbeat within the lease")
    queued: int = Field(..., description="jobs waiting for a worker, over all replicas")
    running: int
    capacity: int = Field(..., description="jobs that may wait before a 503 (PIPEPLAN_QUEUE_SIZE)")
    lease: float = Field(..., description="seconds without a heartbeat before a worker's jobs go to another")


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    database: Literal["ok", "unreachable"]
    backend: str
    workers: PoolHealth | None = Field(..., description="this server's solver pool; null with the durable queue")
    predict_workers: PoolHealth
    queue: QueueHealth | None = Field(None, description="the durable queue (PIPEPLAN_JOB_QUEUE=postgresql)")


class Liveness(BaseModel):
    status: Literal["alive"]


class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    reasons: list[str] = Field(..., description="why not ready; empty when ready")
