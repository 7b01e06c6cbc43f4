"""``/v1/deployments``: create, list, watch and stop deployments; ``/v1/clusters/{name}/loads`` and
``…/decisions``: report a load change, read the placement decisions (:mod:`pipeplan.api.placement`)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from pipeplan.api.deps import PrincipalDep, Reader, Services, ServicesDep, Writer, errors
from pipeplan.api.errors import ApiError, job_failure, loc_for_error
from pipeplan.api.etags import tagged
from pipeplan.api.links import page_response
from pipeplan.api.placement import requests
from pipeplan.api.placement.views import (
    decision_view,
    deployment_summary,
    deployment_view,
    list_decisions,
    list_deployments,
)
from pipeplan.api.pool import Outcome
from pipeplan.api.schemas.common import NAME_PATTERN, ZooModelRef
from pipeplan.api.schemas.deployments import (
    DecisionList,
    DecisionPublic,
    DeploymentCreate,
    DeploymentList,
    DeploymentPublic,
    LoadChange,
)
from pipeplan.api.tables import ClusterRow, DecisionRow, DeploymentRow, PlanRow

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])
clusters = APIRouter(prefix="/v1/clusters", tags=["deployments"])

DeploymentId = Annotated[str, Path(min_length=1, max_length=64, description="a deployment's id")]
DecisionId = Annotated[str, Path(min_length=1, max_length=64, description="a decision's id")]
ClusterName = Annotated[str, Path(pattern=NAME_PATTERN, description="the cluster's name")]
Limit = Annotated[int, Query(ge=1, le=200)]
Offset = Annotated[int, Query(ge=0, le=10**9)]
_WATCH: dict[int | str, dict[str, Any]] = {304: {"description": "If-None-Match names the current ETag"}}


def _owner(principal: PrincipalDep) -> str | None:
    return principal.owner if principal is not None else None


def _deployment(services: Services, dep_id: str) -> bytes | None:
    with services.db.read() as session:
        row = session.get(DeploymentRow, dep_id)
        if row is None:
            return None
        plan = session.get(PlanRow, row.plan_id) if row.plan_id is not None else None
        return json.dumps(deployment_view(row, plan), separators=(",", ":")).encode()


def _not_found(dep_id: str) -> ApiError:
    return ApiError(404, f"no deployment {dep_id!r}", ["path", "deployment_id"], "not_found")


@router.post("", dependencies=[Writer], response_model=DeploymentPublic, status_code=201,
             responses={202: {"model": DeploymentPublic, "description": "still placing: poll it (Location)"},
                        **errors(401, 403, 409, 413, 422, 503)})
async def create_deployment(body: DeploymentCreate, services: ServicesDep, principal: PrincipalDep) -> Response:
    """Place a model on a registered cluster against the loads there; other deployments may be re-planned
    when that raises the cluster's total throughput.  201 once placed (``serving``) within ``wait``
    seconds, 202 while ``placing``; a placement the planner refuses is a 422 (the deployment stays,
    ``failed``)."""
    zoo_name = None
    if isinstance(body.model, ZooModelRef):
        m = body.model
        zoo_name = await services.zoo.canonical_name(m.name, m.batch, m.seq_len, m.image_size,
                                                     services.settings.max_capture_bytes)
    dep_id, future = await run_in_threadpool(requests.create, services, body, zoo_name, _owner(principal))
    await requests.settle(future, services.settings.sync_wait if body.wait is None else body.wait)
    view = await run_in_threadpool(_deployment, services, dep_id)
    if view is None:
        raise _not_found(dep_id)
    doc = json.loads(view)
    if doc["status"] == "failed":
        what, extra, kind = f"the placement of deployment {dep_id}", {"deployment": doc["url"]}, doc["error_type"]
        if kind == "Conflict":
            raise ApiError(409, f"{what} failed: {doc['error']}", [], "conflict", extra=extra)
        if doc["user_error"]:  # the planner refused the request: the deployment stays, failed
            raise ApiError(422, doc["error"], loc_for_error(kind), kind, extra=extra)
        raise job_failure(Outcome(False, error=doc["error"], error_type=kind), what, extra=extra,
                          retry_after=services.settings.retry_after)
    return Response(view, status_code=202 if doc["status"] == "placing" else 201, media_type="application/json",
                    headers={"Location": doc["url"]})


@router.get("", dependencies=[Reader], response_model=DeploymentList, responses=errors(401, 422))
def get_deployments(services: ServicesDep,
                    cluster: Annotated[str | None, Query(max_length=128, description="the cluster's name")] = None,
                    status: Annotated[Literal["placing", "serving", "stopped", "failed"] | None, Query()] = None,
                    limit: Limit = 50, offset: Offset = 0) -> JSONResponse:
    """Deployments, newest first, filtered by cluster and status, a page at a time."""
    with services.db.read() as session:
        rows, total = list_deployments(session, cluster=cluster, status=status, limit=limit, offset=offset)
        items = [deployment_summary(row) for row in rows]
    return page_response(services.settings.public_url, "/v1/deployments", items, total, limit, offset,
                         {"cluster": cluster, "status": status})


@router.get("/{deployment_id}", dependencies=[Reader], response_model=DeploymentPublic,
            responses={**_WATCH, **errors(401, 404)})
async def get_deployment(deployment_id: DeploymentId, services: ServicesDep, request: Request) -> Response:
    """One deployment with its current plan and predicted figures, with an ``ETag``: poll with
    ``If-None-Match`` to watch it (304 while nothing changed; a placement, re-plan, new prediction or
    stop changes it)."""
    body = await run_in_threadpool(_deployment, services, deployment_id)
    if body is None:
        raise _not_found(deployment_id)
    return tagged(request, body)


@router.delete("/{deployment_id}", dependencies=[Writer], response_model=DeploymentPublic,
               responses=errors(401, 403, 404, 409))
async def stop_deployment(deployment_id: DeploymentId, services: ServicesDep, principal: PrincipalDep) -> JSONResponse:
    """Stop a deployment: its reservation is released at once (its plans and decisions stay), and the
    others on the cluster are re-evaluated in the background (``last_decision``).  A stopped one is a 409."""
    view, _ = await run_in_threadpool(requests.stop, services, deployment_id, principal)
    return JSONResponse(view)


@router.get("/{deployment_id}/decisions", dependencies=[Reader], response_model=DecisionList,
            responses=errors(401, 404))
def get_deployment_decisions(deployment_id: DeploymentId, services: ServicesDep, limit: Limit = 50,
                             offset: Offset = 0) -> JSONResponse:
    """The decisions that placed, re-planned, kept or stopped this deployment, newest first."""
    with services.db.read() as session:
        if session.get(DeploymentRow, deployment_id) is None:
            raise _not_found(deployment_id)
        rows, total = list_decisions(session, deployment=deployment_id, limit=limit, offset=offset)
        items = [decision_view(row) for row in rows]
    return page_response(services.settings.public_url, f"/v1/deployments/{deployment_id}/decisions", items, total,
                         limit, offset, {})


@clusters.post("/{name}/loads", dependencies=[Writer], response_model=DecisionPublic,
               responses={202: {"model": DecisionPublic, "description": "still deciding: poll it (Location)"},
                          **errors(401, 403, 404, 422, 503)})
async def change_loads(name: ClusterName, body: LoadChange, services: ServicesDep,
                       principal: PrincipalDep) -> Response:
    """Set the base load of some devices (as ``PATCH …/devices/{id}`` does, several at once) and
    re-evaluate the deployments on the cluster: 200 with the decision once made within ``wait``
    seconds, 202 with it pending otherwise."""
    decision_id, future = await run_in_threadpool(requests.change_loads, services, name, body, principal)
    await requests.settle(future, services.settings.sync_wait if body.wait is None else body.wait)
    view = await run_in_threadpool(_decision, services, name, decision_id)
    assert view is not None
    status = 202 if json.loads(view)["status"] == "pending" else 200
    return Response(view, status_code=status, media_type="application/json",
                    headers={"Location": f"/v1/clusters/{name}/decisions/{decision_id}"})


def _decision(services: Services, name: str, decision_id: str) -> bytes | None:
    with services.db.read() as session:
        row = session.get(DecisionRow, decision_id)
        if row is None or row.cluster != name:
            return None
        return json.dumps(decision_view(row), separators=(",", ":")).encode()


@clusters.get("/{name}/decisions", dependencies=[Reader], response_model=DecisionList, responses=errors(401, 404))
def get_decisions(name: ClusterName, services: ServicesDep, limit: Limit = 50, offset: Offset = 0) -> JSONResponse:
    """The placement decisions on a registered cluster, newest first."""
    with services.db.read() as session:
        if session.get(ClusterRow, name) is None:
            raise ApiError(404, f"no registered cluster {name!r}", ["path", "name"], "not_found")
        rows, total = list_decisions(session, cluster=name, limit=limit, offset=offset)
        items = [decision_view(row) for row in rows]
    return page_response(services.settings.public_url, f"/v1/clusters/{name}/decisions", items, total, limit,
                         offset, {})


@clusters.get("/{name}/decisions/{decision_id}", dependencies=[Reader], response_model=DecisionPublic,
              responses={**_WATCH, **errors(401, 404)})
async def get_decision(name: ClusterName, decision_id: DecisionId, services: ServicesDep,
                       request: Request) -> Response:
    """One decision, with an ``ETag`` (it changes once, when the decision is made)."""
    body = await run_in_threadpool(_decision, services, name, decision_id)
    if body is None:
        raise ApiError(404, f"no decision {decision_id!r} on cluster {name!r}", ["path", "decision_id"], "not_found")
    return tagged(request, body)
