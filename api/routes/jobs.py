"""``/v1/jobs/{id}``: how a solve is going, and why it failed."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from api.deps import Reader, ServicesDep, errors
from api.errors import ApiError
from api.models import JobRow
from api.schemas.jobs import JobPublic
from api.store import job_view

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.get("/{job_id}", dependencies=[Reader], response_model=JobPublic, responses=errors(401, 404))
async def get_job(job_id: Annotated[str, Path(min_length=1, max_length=64)], services: ServicesDep) -> JSONResponse:
    """queued → running → done (with the plan's URL, or the comparison) or failed (with the error)."""

    def read() -> dict[str, Any] | None:
        with services.db.read() as session:
            row = session.get(JobRow, job_id)
            return job_view(row) if row is not None else None

    view = await services.db.quick(read)
    if view is None:
        raise ApiError(404, f"no job {job_id!r}", ["path", "job_id"], "not_found")
    return JSONResponse(view)
