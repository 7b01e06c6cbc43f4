"""``/v1/clusters``: the registry of clusters, their devices' loads and the reservations on them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse, Response

from api.deps import Reader, ServicesDep, Writer, errors
from api.errors import ApiError
from api.registry import ClusterState
from api.schemas.clusters import ClusterList, ClusterPublic, ClusterPut, DevicePatch
from api.schemas.common import NAME_PATTERN
from planner.cluster import builtin_clusters

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
        })
    return {"name": state.name, "url": f"/v1/clusters/{state.name}", "builtin": state.builtin,
            "revision": state.revision,
            "created_at": state.created_at.isoformat() if state.created_at else None,
            "updated_at": state.updated_at.isoformat() if state.updated_at else None,
            "devices": devices, "spec": state.base.to_dict()}


@router.get("", dependencies=[Reader], response_model=ClusterList, responses=errors(401))
def list_clusters(services: ServicesDep) -> dict[str, Any]:
    """Registered clusters, then the built-in ones not registered under the same name."""
    with services.db.read() as session:
        registered = services.registry.names(session)
        taken = {name.lower() for name, _, _ in registered}
        items = [{"name": n, "url": f"/v1/clusters/{n}", "builtin": False, "devices": d, "revision": r}
                 for n, d, r in registered]
        for name in builtin_clusters():
            if name.lower() not in taken:
                state = services.registry.find(session, name)
                assert state is not None
                items.append({"name": name, "url": f"/v1/clusters/{name}", "builtin": True,
                              "devices": len(state.base.devices), "revision": None})
    return {"items": items}


@router.put("/{name}", dependencies=[Writer], response_model=ClusterPublic,
            responses={201: {"model": ClusterPublic, "description": "registered"}, **errors(401, 409, 422)})
def put_cluster(name: ClusterName, body: ClusterPut, services: ServicesDep) -> JSONResponse:
    """Register a cluster (201) or replace its spec (200).  Reservations on it are kept; a spec that
    drops a reserved device is refused (409)."""
    if body.name is not None and body.name != name:
        raise ApiError(422, f"the body names cluster {body.name!r} but the URL names {name!r}", ["body", "name"])
    spec = body.model_dump(mode="json", exclude_none=True)
    spec["name"] = name
    cluster = services.registry.validate(spec, ["body"])
    with services.db.write() as session:
        created = services.registry.put(session, name, cluster)
        # The answer is rendered before the commit: if it cannot be, nothing is stored.
        return JSONResponse(cluster_view(services.registry.pending(session, name)), status_code=201 if created else 200,
                            headers={"Location": f"/v1/clusters/{name}"})


@router.get("/{name}", dependencies=[Reader], response_model=ClusterPublic, responses=errors(401, 404))
def get_cluster(name: ClusterName, services: ServicesDep) -> dict[str, Any]:
    """A cluster: each device's base load, the reservations on it, and the load plans see."""
    with services.db.read() as session:
        return cluster_view(services.registry.get(session, name, ["path", "name"]))


@router.patch("/{name}/devices/{device_id}", dependencies=[Writer], response_model=ClusterPublic,
              responses=errors(401, 404, 422))
def patch_device(name: ClusterName, device_id: DeviceId, body: DevicePatch, services: ServicesDep) -> JSONResponse:
    """Set a device's current (base) load; reserved plans' loads still come on top."""
    with services.db.write() as session:
        services.registry.set_load(session, name, device_id, body.load)
        return JSONResponse(cluster_view(services.registry.pending(session, name)))  # rendered before the commit


@router.delete("/{name}", dependencies=[Writer], status_code=204, response_class=Response,
               responses=errors(401, 404, 409))
def delete_cluster(name: ClusterName, services: ServicesDep) -> Response:
    """Remove a cluster from the registry (refused while plans hold reservations on it)."""
    with services.db.write() as session:
        services.registry.delete(session, name)
    return Response(status_code=204)
