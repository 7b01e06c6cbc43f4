"""``/v1/clusters``: the registry of clusters, their devices' loads and the reservations on them."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from pipeplan.api.deps import PrincipalDep, Reader, Services, ServicesDep, Writer, errors, owner_check
from pipeplan.api.errors import ApiError
from pipeplan.api.etags import tagged
from pipeplan.api.placement import requests
from pipeplan.api.placement.service import Event
from pipeplan.api.registry import ClusterState
from pipeplan.api.schemas.clusters import ClusterList, ClusterPublic, ClusterPut, DevicePatch
from pipeplan.api.schemas.common import NAME_PATTERN
from pipeplan.api.tables import ClusterRow, DecisionRow
from pipeplan.costmodel.cluster import builtin_clusters

router = APIRouter(prefix="/v1/clusters", tags=["clusters"])

ClusterName = Annotated[str, Path(pattern=NAME_PATTERN, description="the cluster's name")]
DeviceId = Annotated[str, Path(min_length=1, max_length=128, description="a device id of the cluster")]


def cluster_view(state: ClusterState) -> dict[str, Any]:
    devices = []
    for base, now in zip(state.base.devices, state.effective.devices, strict=True):
        devices.append({
            "id": base.id, "type": base.type, "host": base.host,
            "base_load": base.load.model_dump(mode="json"), "load": now.load.model_dump(mode="json"),
            "reservations": [{"plan_id": p, "kind": k} for p, k in state.reservations.get(base.id, [])],
            "memory": now.memory, "lent": [{"plan_id": p, "bytes": b} for p, b in state.lent.get(base.id, [])],
        })
    return {"name": state.name, "url": f"/v1/clusters/{state.name}", "builtin": state.builtin,
            "revision": state.revision,
            "created_at": state.created_at.isoformat() if state.created_at else None,
            "updated_at": state.updated_at.isoformat() if state.updated_at else None, "owner": state.owner,
            "devices": devices, "spec": state.base.to_dict()}


@router.get("", dependencies=[Reader], response_model=ClusterList, responses=errors(401))
def list_clusters(services: ServicesDep) -> dict[str, Any]:
    """Registered clusters, then the built-in ones not registered under the same name."""
    with services.db.read() as session:
        registered = services.registry.names(session)
        taken = {name.lower() for name, _, _, _ in registered}
        items = [{"name": n, "url": f"/v1/clusters/{n}", "builtin": False, "devices": d, "revision": r}
                 for n, d, r, _ in registered]
        for name in builtin_clusters():
            if name.lower() not in taken:
                state = services.registry.find(session, name)
                assert state is not None
                items.append({"name": name, "url": f"/v1/clusters/{name}", "builtin": True,
                              "devices": len(state.base.devices), "revision": None})
    return {"items": items}


@router.put("/{name}", dependencies=[Writer], response_model=ClusterPublic,
            responses={201: {"model": ClusterPublic, "description": "registered"}, **errors(401, 403, 409, 422)})
def put_cluster(name: ClusterName, body: ClusterPut, services: ServicesDep, principal: PrincipalDep) -> JSONResponse:
    """Register a cluster (201, owned by the token's owner) or replace its spec (200, its owner or an
    admin).  Reservations on it are kept; a spec that drops a reserved device is refused (409)."""
    if body.name is not None and body.name != name:
        raise ApiError(422, f"the body names cluster {body.name!r} but the URL names {name!r}", ["body", "name"])
    spec = body.model_dump(mode="json", exclude_none=True)
    spec["name"] = name
    cluster = services.registry.validate(spec, ["body"])
    with services.db.write() as session:
        existing = session.get(ClusterRow, name, with_for_update=True)
        if existing is not None:
            owner_check(principal, existing.owner, f"cluster {name!r}", ["path", "name"])
        created = services.registry.put(session, name, cluster, principal.owner if principal is not None else None)
        # The answer is rendered before the commit: if it cannot be, nothing is stored.
        return JSONResponse(cluster_view(services.registry.pending(session, name)), status_code=201 if created else 200,
                            headers={"Location": f"/v1/clusters/{name}"})


@router.get("/{name}", dependencies=[Reader], response_model=ClusterPublic,
            responses={304: {"description": "If-None-Match names the current ETag"}, **errors(401, 404)})
async def get_cluster(name: ClusterName, services: ServicesDep, request: Request) -> Response:
    """A cluster: each device's base load, the reservations on it, and the load plans see; with an
    ``ETag`` that changes with any of them (send it in ``If-None-Match`` for a 304)."""

    def read() -> bytes:
        with services.db.read() as session:
            view = cluster_view(services.registry.get(session, name, ["path", "name"]))
        return json.dumps(view, separators=(",", ":")).encode()

    return tagged(request, await run_in_threadpool(read))


@router.patch("/{name}/devices/{device_id}", dependencies=[Writer], response_model=ClusterPublic,
              responses={202: {"model": ClusterPublic, "description": "the load is set and the deployments' "
                                                                      "re-evaluation still running: poll the "
                                                                      "decision (Location)"},
                         **errors(401, 403, 404, 422, 503)})
async def patch_device(name: ClusterName, device_id: DeviceId, body: DevicePatch, services: ServicesDep,
                       principal: PrincipalDep) -> Response:
    """Set a device's current (base) load; reserved plans' loads still come on top.  With deployments
    serving on the cluster this is a load change (``POST …/loads`` with one device): the deployments are
    re-evaluated, and the answer is the cluster once the decision is made within ``PIPEPLAN_SYNC_WAIT``
    (200), else as the load left it (202); ``Location`` names the decision."""

    def write() -> tuple[dict[str, Any], Event | None]:
        with services.db.write() as session:
            _check_owner(session, name, principal)
            event = requests.set_device_load(session, services, name, device_id, body.load, principal)
            return cluster_view(services.registry.pending(session, name)), event  # rendered before the commit

    view, event = await run_in_threadpool(write)
    if event is None:
        return JSONResponse(view)
    assert services.placement is not None, "set_device_load made a decision: the placement service runs"
    await requests.settle(services.placement.submit(event), services.settings.sync_wait)
    headers = {"Location": f"/v1/clusters/{name}/decisions/{event.decision}"}
    if await run_in_threadpool(_pending, services, event.decision):
        return JSONResponse(view, status_code=202, headers=headers)

    def read() -> dict[str, Any]:
        with services.db.read() as session:
            return cluster_view(services.registry.get(session, name, ["path", "name"]))

    return JSONResponse(await run_in_threadpool(read), headers=headers)  # the re-plans' reservations included


def _pending(services: Services, decision_id: str) -> bool:
    with services.db.read() as session:
        row = session.get(DecisionRow, decision_id)
        return row is not None and row.status == "pending"


@router.delete("/{name}", dependencies=[Writer], status_code=204, response_class=Response,
               responses=errors(401, 403, 404, 409))
def delete_cluster(name: ClusterName, services: ServicesDep, principal: PrincipalDep) -> Response:
    """Remove a cluster from the registry (refused while plans hold reservations on it)."""
    with services.db.write() as session:
        _check_owner(session, name, principal)
        services.registry.delete(session, name)
    return Response(status_code=204)


def _check_owner(session: Any, name: str, principal: PrincipalDep) -> None:
    """A 403 unless the token may change registered cluster ``name`` (a 404 names a missing one later)."""
    row = session.get(ClusterRow, name, with_for_update=True)
    if row is not None:
        owner_check(principal, row.owner, f"cluster {name!r}", ["path", "name"])
