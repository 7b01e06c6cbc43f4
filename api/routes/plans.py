"""``/v1/plans``: make, read, list, release and delete plans; compare the ILP with the baselines."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy import bindparam, select, update
from starlette.concurrency import run_in_threadpool

from pipeplan.api.deps import PrincipalDep, Reader, Services, ServicesDep, Writer, errors, owner_check
from pipeplan.api.errors import ApiError
from pipeplan.api.etags import tagged
from pipeplan.api.idempotency import KEY_PATTERN
from pipeplan.api.links import check_time_zones, page_response
from pipeplan.api.placement.requests import check_not_deployed
from pipeplan.api.planning import Answer
from pipeplan.api.schemas.jobs import JobPublic
from pipeplan.api.schemas.plans import CompareCreate, ComparePublic, PlanCreate, PlanList, PlanPublic
from pipeplan.api.store import list_plans, plan_json, plan_summary, plan_view
from pipeplan.api.tables import JobRow, PlanRow, utcnow

router = APIRouter(prefix="/v1/plans", tags=["plans"])

_PLANS = PlanRow.__table__
_BY_ID = select(_PLANS).where(_PLANS.c.id == bindparam("id"))

PlanId = Annotated[str, Path(min_length=1, max_length=64, description="a plan's id")]
IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", pattern=KEY_PATTERN,
    description="1 to 255 visible ASCII characters: a retry with the same key and body gets the first "
                "request's job or plan; the same key with another body is a 409")]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Writer]


def _owner(principal: PrincipalDep) -> str | None:
    return principal.owner if principal is not None else None


def _idempotency(credentials: HTTPAuthorizationCredentials | None, key: str | None) -> tuple[str, str] | None:
    return (credentials.credentials, key) if credentials is not None and key is not None else None


def _respond(answer: Answer) -> Response:
    if isinstance(answer.body, bytes):
        return Response(answer.body, status_code=answer.status, headers=answer.headers, media_type="application/json")
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)


@router.post("", response_model=PlanPublic, status_code=201,
             responses={200: {"model": PlanPublic, "description": "an identical request's stored plan"},
                        202: {"model": JobPublic, "description": "still solving: poll the job (Location)"},
                        **errors(401, 403, 409, 413, 422, 503)})
async def create_plan(body: PlanCreate, services: ServicesDep, credentials: Credentials, principal: PrincipalDep,
                      idempotency_key: IdempotencyKey = None) -> Response:
    """Plan a model on a cluster.  201 with the plan when it is solved within ``wait`` seconds, 202
    with the job otherwise; 200 with the stored plan for a request identical to an earlier one."""
    return _respond(await services.planning.create(body, "plan", _idempotency(credentials, idempotency_key),
                                                   _owner(principal)))


@router.post("/compare", response_model=ComparePublic,
             responses={202: {"model": JobPublic, "description": "still solving: poll the job (Location)"},
                        **errors(401, 403, 409, 413, 422, 503)})
async def compare_plans(body: CompareCreate, services: ServicesDep, credentials: Credentials,
                        principal: PrincipalDep, idempotency_key: IdempotencyKey = None) -> Response:
    """The ILP and every baseline on one problem, scored by the same simulator, side by side."""
    return _respond(await services.planning.create(body, "compare", _idempotency(credentials, idempotency_key),
                                                   _owner(principal)))


@router.get("", dependencies=[Reader], response_model=PlanList, responses=errors(401, 422))
def get_plans(services: ServicesDep, request: Request,
              model: Annotated[str | None, Query(max_length=256, description="the model's name")] = None,
              cluster: Annotated[str | None, Query(max_length=128, description="the cluster's name")] = None,
              since: Annotated[datetime | None, Query(description="made at or after (ISO 8601)")] = None,
              until: Annotated[datetime | None, Query(description="made before (ISO 8601)")] = None,
              reserved: Annotated[bool | None, Query(description="only plans that hold (or not) a reservation")] = None,
              limit: Annotated[int, Query(ge=1, le=200)] = 50,
              offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> JSONResponse:
    """Plans, newest first, filtered by model, cluster and time, a page at a time."""
    check_time_zones(since=since, until=until)
    with services.db.read() as session:
        rows, total = list_plans(session, model=model, cluster=cluster, since=since, until=until,
                                 reserved=reserved, limit=limit, offset=offset)
        items = [plan_summary(row) for row in rows]
    return page_response(services.settings.public_url, "/v1/plans", items, total, limit, offset,
                         {"model": model, "cluster": cluster, "since": since, "until": until, "reserved": reserved})


@router.get("/{plan_id}", dependencies=[Reader], response_model=PlanPublic,
            responses={304: {"description": "If-None-Match names the current ETag"}, **errors(401, 404)})
async def get_plan(plan_id: PlanId, request: Request) -> Response:
    """One plan, with an ``ETag``: send it back in ``If-None-Match`` for a 304 while the plan is unchanged."""
    # The hottest route: services straight from the app, the stored JSON spliced in unparsed.
    services: Services = request.app.state.services

    def read() -> bytes | None:
        # Core, not the ORM: a plain row is all the view needs, at a fraction of the cost.
        with services.db.engine.connect() as conn:
            row = conn.execute(_BY_ID, {"id": plan_id}).first()
        return plan_json(row) if row is not None else None

    body = await services.db.quick(read)
    if body is None:
        raise ApiError(404, f"no plan {plan_id!r}", ["path", "plan_id"], "not_found")
    return tagged(request, body)


@router.post("/{plan_id}/release", dependencies=[Writer], response_model=PlanPublic,
             responses=errors(401, 403, 404, 409))
def release_plan(plan_id: PlanId, services: ServicesDep, principal: PrincipalDep) -> JSONResponse:
    """Remove the load a reserved plan records on its cluster; the plan itself stays.  A deployment's
    current plan is a 409 naming the deployment: stop the deployment instead."""
    with services.db.write() as session:
        row = session.get(PlanRow, plan_id, with_for_update=True)
        if row is None:
            raise ApiError(404, f"no plan {plan_id!r}", ["path", "plan_id"], "not_found")
        owner_check(principal, row.owner, f"plan {plan_id}", ["path", "plan_id"])
        check_not_deployed(session, plan_id, "releasing")
        if row.reserved:
            services.registry.release(session, plan_id)
            row.reserved, row.released_at = False, utcnow()
        view = plan_view(row)
    return JSONResponse(view)


@router.delete("/{plan_id}", dependencies=[Writer], status_code=204, response_class=Response,
               responses=errors(401, 403, 404, 409))
async def delete_plan(plan_id: PlanId, services: ServicesDep, principal: PrincipalDep) -> Response:
    """Delete a plan, releasing its reservation; its jobs stay, without the plan.  A deployment's current
    plan is a 409 naming the deployment: stop the deployment instead."""

    def delete() -> bool:
        with services.db.write() as session:
            row = session.get(PlanRow, plan_id, with_for_update=True)
            if row is None:
                return False
            owner_check(principal, row.owner, f"plan {plan_id}", ["path", "plan_id"])
            check_not_deployed(session, plan_id, "deleting")
            services.registry.release(session, plan_id)
            session.execute(update(JobRow).where(JobRow.plan_id == plan_id).values(plan_id=None))
            session.delete(row)
            return True

    if not await run_in_threadpool(delete):
        raise ApiError(404, f"no plan {plan_id!r}", ["path", "plan_id"], "not_found")
    return Response(status_code=204)
