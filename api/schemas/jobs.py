"""Jobs: solves that run in the worker pool (``GET /v1/jobs/{id}``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from api.schemas.plans import ComparisonDoc

__all__ = ["JobPublic", "JobStatus"]

JobStatus = Literal["queued", "running", "done", "failed"]


class JobPublic(BaseModel):
    id: str
    url: str
    kind: Literal["plan", "compare"]
    status: JobStatus
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None = Field(..., description="why it failed")
    error_type: str | None = Field(..., description="PlanError, GraphError, … WorkerDied, Timeout, Restarted")
    worker_pid: int | None = Field(..., description="the worker process that ran it")
    plan_id: str | None
    plan_url: str | None
    result: ComparisonDoc | None = Field(None, description="a finished comparison")
