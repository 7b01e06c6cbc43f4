"""Jobs: solves that run in the worker pool (``GET /v1/jobs/{id}``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from pipeplan.api.schemas.plans import ComparisonDoc

__all__ = ["JobList", "JobPublic", "JobStatus", "JobSummary"]

JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]


class JobSummary(BaseModel):
    """A job as ``GET /v1/jobs`` lists it: :class:`JobPublic` without a comparison's result."""

    id: str
    url: str
    kind: Literal["plan", "compare"]
    status: JobStatus
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None = Field(..., description="why it failed")
    error_type: str | None = Field(..., description="PlanError, GraphError, … MemoryLimit, Timeout, WorkerDied, "
                                                      "Cancelled, Restarted")
    user_error: bool = Field(False, description="it failed because of the request (a pipeplan.errors.UserError "
                                                "such as PlanError, or MemoryLimit): a 422 to a request waiting "
                                                "for it; else the service's fault (a 500) or a passing one (a 503)")
    worker_pid: int | None = Field(..., description="the worker process that ran it")
    worker: str | None = Field(None, description="host:pid of the queue worker that claimed it "
                                                 "(PIPEPLAN_JOB_QUEUE=postgresql); null in a server's own pool")
    attempts: int = Field(0, description="times a queue worker claimed it: more than 1 after a worker died "
                                         "and its lease expired, or after a worker handed it back")
    plan_id: str | None
    plan_url: str | None
    owner: str | None = Field(None, description="the owner of the token that made it")


class JobPublic(JobSummary):
    result: ComparisonDoc | None = Field(None, description="a finished comparison")


class JobList(BaseModel):
    items: list[JobSummary]
    total: int = Field(..., description="jobs that match, over all pages")
    limit: int
    offset: int
    next: str | None = Field(..., description="the next page (under PIPEPLAN_PUBLIC_URL when set), or null")
