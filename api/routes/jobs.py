"""``/v1/jobs``: solves in the worker pool: list them, follow one, cancel one."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from pipeplan.api.deps import PrincipalDep, Reader, Services, ServicesDep, Writer, errors, owner_check
from pipeplan.api.errors import ApiError
from pipeplan.api.links import check_time_zones, page_response
from pipeplan.api.schemas.jobs import JobList, JobPublic, JobStatus
from pipeplan.api.store import job_summary, job_view, list_jobs
from pipeplan.api.tables import ACTIVE, JobRow

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JobId = Annotated[str, Path(min_length=1, max_length=64, description="a job's id")]

_CANCEL_WAIT = 10.0  # seconds a cancel waits for the job's end to be recorded


@router.get("", dependencies=[Reader], response_model=JobList, responses=errors(401, 422))
def get_jobs(services: ServicesDep,
             status: Annotated[JobStatus | None, Query(description="only jobs in this state")] = None,
             kind: Annotated[Literal["plan", "compare"] | None, Query(description="plan or compare")] = None,
             since: Annotated[datetime | None, Query(description="created at or after (ISO 8601)")] = None,
             until: Annotated[datetime | None, Query(description="created before (ISO 8601)")] = None,
             limit: Annotated[int, Query(ge=1, le=200)] = 50,
             offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> JSONResponse:
    """Jobs, newest first, filtered by state, kind and time, a page at a time."""
    check_time_zones(since=since, until=until)
    with services.db.read() as session:
        rows, total = list_jobs(session, status=status, kind=kind, since=since, until=until, limit=limit,
                                offset=offset)
        items = [job_summary(row) for row in rows]
    return page_response(services.settings.public_url, "/v1/jobs", items, total, limit, offset,
                         {"status": status, "kind": kind, "since": since, "until": until})


def _read(services: Services, job_id: str) -> dict[str, Any] | None:
    with services.db.read() as session:
        row = session.get(JobRow, job_id)
        return job_view(row) if row is not None else None


@router.get("/{job_id}", dependencies=[Reader], response_model=JobPublic, responses=errors(401, 404))
async def get_job(job_id: JobId, services: ServicesDep) -> JSONResponse:
    """queued → running → done (with the plan's URL, or the comparison), failed (with the error) or
    cancelled."""
    view = await services.db.quick(lambda: _read(services, job_id))
    if view is None:
        raise ApiError(404, f"no job {job_id!r}", ["path", "job_id"], "not_found")
    return JSONResponse(view)


@router.post("/{job_id}/cancel", dependencies=[Writer], response_model=JobPublic,
             responses=errors(401, 403, 404, 409))
async def cancel_job(job_id: JobId, services: ServicesDep, principal: PrincipalDep) -> JSONResponse:
    """Stop a queued or running job (its owner's token, or an admin's): a queued one never starts, a
    running one's worker is stopped (and replaced).  The job ends ``cancelled``; requests waiting for
    it get a 409.  A job that has ended is a 409 naming its state.  With the durable queue any replica
    cancels any job; otherwise only the server whose pool runs it can."""
    view = await run_in_threadpool(_read, services, job_id)
    if view is None:
        raise ApiError(404, f"no job {job_id!r}", ["path", "job_id"], "not_found")
    owner_check(principal, view["owner"], f"job {job_id}", ["path", "job_id"])
    if view["status"] not in ACTIVE:
        raise ApiError(409, f"job {job_id} has ended ({view['status']}); only queued and running jobs can be "
                       "cancelled", ["path", "job_id"], "conflict")
    held = await run_in_threadpool(services.planning.cancel, job_id,
                                   "cancelled by a client (POST /v1/jobs/{id}/cancel)")
    # The end is recorded by the pool's callback thread (or the queue worker that runs it): wait for it,
    # so the answer shows it.  Not held: it may have just ended (its callback still to run), or it runs
    # in another replica's own pool.
    deadline = time.monotonic() + (_CANCEL_WAIT if held else 1.0)
    while True:
        view = await run_in_threadpool(_read, services, job_id)
        assert view is not None  # jobs are never deleted
        if view["status"] not in ACTIVE:
            break
        if time.monotonic() > deadline:
            raise ApiError(409, f"job {job_id} is {view['status']} but not in this server's worker pool (another "
                           "replica runs it); cancel it there", ["path", "job_id"], "conflict")
        await asyncio.sleep(0.05 if held else 0.2)
    if view["status"] != "cancelled":  # it ended on its own as the cancel arrived
        raise ApiError(409, f"job {job_id} ended ({view['status']}) before it could be cancelled",
                       ["path", "job_id"], "conflict")
    return JSONResponse(view)
