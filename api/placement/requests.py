"""What the deployment routes write: a new deployment, a stop, a load change, each with its pending
decision, in one transaction; the decision itself is then made by :class:`~pipeplan.api.placement.service.Placement`.
Also what protects deployments from the other routes: a deployment's plan cannot be released or deleted
through ``/v1/plans`` (:func:`check_not_deployed`), and a device's load set by ``PATCH`` is re-evaluated
like a load change (:func:`set_device_load`).

Every check comes first (a 4xx naming the field), so that a refused request writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeplan.api.errors import ApiError
from pipeplan.api.keys import canonical
from pipeplan.api.placement.payload import Trigger
from pipeplan.api.placement.service import Event, Placement
from pipeplan.api.placement.views import deployment_view
from pipeplan.api.schemas.deployments import DeploymentCreate, LoadChange
from pipeplan.api.schemas.plans import PlanCreate
from pipeplan.api.store import new_id, save_graph
from pipeplan.api.tables import ClusterRow, DecisionRow, DeploymentRow, PlanRow, utcnow
from pipeplan.planner.migration import Horizon
from pipeplan.planner.problem import PlanError

if TYPE_CHECKING:
    from pipeplan.api.auth import Principal
    from pipeplan.api.deps import Services
    from pipeplan.api.registry import ClusterState
    from pipeplan.costmodel.hardware import Contention

__all__ = ["change_loads", "check_not_deployed", "create", "set_device_load", "settle", "stop"]


async def settle(future: Future[None], wait: float) -> None:
    """Wait up to ``wait`` seconds for a decision to be recorded."""
    if wait > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), wait)


def _busy(services: Services) -> ApiError:
    return ApiError(503, "the solver workers' queue is full; retry later", [], "busy",
                    headers={"Retry-After": str(services.settings.retry_after)})


def _placement(services: Services) -> Placement:
    assert services.placement is not None, "the app's lifespan makes the placement service"
    return services.placement


def create(services: Services, body: DeploymentCreate, zoo_name: str | None,
           owner: str | None) -> tuple[str, Future[None]]:
    """Check and store a new deployment (``placing``) and its pending decision; start the decision."""
    placement = _placement(services)
    try:
        Horizon.parse(body.horizon)
    except PlanError as exc:
        raise ApiError(422, str(exc), ["body", "horizon"]) from None
    plan_body = PlanCreate(model=body.model, cluster=body.cluster, costmodel=body.costmodel, options=body.options,
                           solver=body.solver)
    with services.db.read() as session:
        prep = services.planning.resolver.prepare(session, plan_body, "plan", zoo_name)
    if not prep.cluster.registered:
        raise ApiError(422, f"cluster {body.cluster!r} is built in: deployments need a registered cluster "
                       f"(PUT /v1/clusters/{body.cluster}), whose loads the service tracks", ["body", "cluster"])
    if not placement.has_room():
        raise _busy(services)
    request: dict[str, Any] = {"model": prep.request["model"], "costmodel": body.costmodel,
                               "options": body.options.model_dump(mode="json"),
                               "solver": body.solver.model_dump(mode="json"), "horizon": body.horizon,
                               "limits": asdict(prep.solver)}
    if prep.zoo is not None:
        request["zoo"] = asdict(prep.zoo)
    model = prep.graph.model if prep.graph is not None else prep.zoo.name if prep.zoo is not None else "model"
    dep_id, decision_id, now = new_id(), new_id(), utcnow()
    with services.db.write() as session:
        if session.get(ClusterRow, body.cluster) is None:
            raise ApiError(422, f"cluster {body.cluster!r} was deleted a moment ago", ["body", "cluster"])
        if prep.graph is not None:
            g = prep.graph
            save_graph(session, g.digest, g.doc, g.model, g.layers, g.edges)
        session.add(DeploymentRow(id=dep_id, cluster=body.cluster, status="placing", model=model[:256],
                                  request=canonical(request), graph_digest=prep.digest, zoo_key=prep.zoo_key,
                                  costmodel=body.costmodel, horizon=body.horizon, version=0, owner=owner,
                                  last_decision=decision_id, created_at=now, updated_at=now))
        session.add(DecisionRow(id=decision_id, cluster=body.cluster, trigger="place", deployment_id=dep_id,
                                status="pending", request=canonical({"kind": "place", "deployment": dep_id}),
                                owner=owner, created_at=now))
    return dep_id, placement.submit(Event(decision_id, body.cluster, Trigger("place", dep_id)))


def stop(services: Services, dep_id: str, principal: Principal | None) -> tuple[dict[str, Any], Future[None] | None]:
    """Stop deployment ``dep_id``: its reservation released at once, the others re-evaluated after."""
    from pipeplan.api.deps import owner_check

    placement = _placement(services)
    now = utcnow()
    decision_id: str | None = None
    with services.db.write() as session:
        row = session.get(DeploymentRow, dep_id, with_for_update=True)
        if row is None:
            raise ApiError(404, f"no deployment {dep_id!r}", ["path", "deployment_id"], "not_found")
        owner_check(principal, row.owner, f"deployment {dep_id}", ["path", "deployment_id"])
        if row.status == "stopped":
            when = row.stopped_at.isoformat() if row.stopped_at is not None else "an unknown time"
            raise ApiError(409, f"deployment {dep_id} was stopped already (at {when})", ["path", "deployment_id"],
                           "conflict")
        plan = session.get(PlanRow, row.plan_id) if row.plan_id is not None else None
        if row.status == "serving" and plan is not None and plan.reserved:
            services.registry.release(session, plan.id)
            plan.reserved, plan.released_at = False, now
            decision_id = new_id()
            session.add(DecisionRow(id=decision_id, cluster=row.cluster, trigger="stop", deployment_id=dep_id,
                                    status="pending", request=canonical({"kind": "stop", "deployment": dep_id}),
                                    owner=principal.owner if principal is not None else None, created_at=now))
            row.last_decision = decision_id
        row.status, row.stopped_at, row.updated_at = "stopped", now, now
        view = deployment_view(row, plan)
    if decision_id is None:  # it held no load: nothing to re-evaluate
        return view, None
    return view, placement.submit(Event(decision_id, view["cluster"], Trigger("stop", dep_id)))


def change_loads(services: Services, name: str, body: LoadChange,
                 principal: Principal | None) -> tuple[str, Future[None]]:
    """Set the base loads ``body`` names on cluster ``name`` and start the re-evaluation."""
    from pipeplan.api.deps import owner_check

    placement = _placement(services)
    if not placement.has_room():
        raise _busy(services)
    with services.db.write() as session:
        state = services.registry.registered(session, name)
        row = session.get(ClusterRow, name, with_for_update=True)
        assert row is not None
        owner_check(principal, row.owner, f"cluster {name!r}", ["path", "name"])
        ids = {d.id for d in state.base.devices}
        for device in body.devices:
            if device not in ids:
                raise ApiError(422, f"cluster {name!r} has no device {device!r}; its devices are "
                               f"{', '.join(sorted(ids))}", ["body", "devices", device])
        event = _load_change(session, services, state, body.devices, principal)
    return event.decision, placement.submit(event)


def _load_change(session: Session, services: Services, state: ClusterState, loads: Mapping[str, Contention],
                 principal: Principal | None) -> Event:
    """Set the base loads ``loads`` names on registered cluster ``state`` and add the pending decision that
    re-evaluates its deployments, in ``session``'s transaction; the event to submit once it commits."""
    changes = {}
    for device, load in sorted(loads.items()):
        services.registry.set_load(session, state.name, device, load)  # a 404 for a device it lacks
        before = state.base.device(device).load
        changes[device] = {"before": before.model_dump(mode="json"), "after": load.model_dump(mode="json")}
    decision_id = new_id()
    session.add(DecisionRow(id=decision_id, cluster=state.name, trigger="load", deployment_id=None, status="pending",
                            request=canonical({"kind": "load", "devices": changes}),
                            owner=principal.owner if principal is not None else None, created_at=utcnow()))
    return Event(decision_id, state.name, Trigger("load", devices=tuple(sorted(changes))),
                 before={d: c["before"] for d, c in changes.items()})


def set_device_load(session: Session, services: Services, name: str, device: str, load: Contention,
                    principal: Principal | None) -> Event | None:
    """``PATCH /v1/clusters/{name}/devices/{device}``: set one device's base load in ``session``'s transaction
    (the caller checked the owner).  With deployments serving on the cluster, this is a load change like
    ``POST …/loads`` (a pending decision; the event to submit once it commits; a 503 when the workers'
    queue is full, writing nothing); without, the load alone (None).

    Deployments still placing need no decision: the load bumps the cluster's revision, so a placement
    decided on the old loads is not recorded but decided again on the new ones."""
    state = services.registry.registered(session, name)
    serving = session.execute(select(DeploymentRow.id).where(DeploymentRow.cluster == name,
                                                             DeploymentRow.status == "serving").limit(1)).first()
    if serving is None:
        services.registry.set_load(session, name, device, load)
        return None
    if not _placement(services).has_room():
        raise _busy(services)
    return _load_change(session, services, state, {device: load}, principal)


def check_not_deployed(session: Session, plan_id: str, action: str) -> None:
    """A 409 when plan ``plan_id`` is the current plan of a deployment that has not stopped: its reservation
    is that deployment's load, which only stopping the deployment may remove (``action``: what was asked).

    Read without a lock, after the caller locked the plan's row: a plan becomes a deployment's current
    plan only when it is made (a decision stores a new plan row), so a plan found not to be one stays so."""
    dep = session.execute(select(DeploymentRow).where(DeploymentRow.plan_id == plan_id,
                                                      DeploymentRow.status.in_(("placing", "serving")))
                          .limit(1)).scalar_one_or_none()
    if dep is not None:
        raise ApiError(409, f"plan {plan_id} is the current plan of deployment {dep.id} ({dep.status} on cluster "
                       f"{dep.cluster!r}), whose load its reservation is: {action} it would leave the deployment "
                       f"serving with no load on the cluster. Stop the deployment instead "
                       f"(DELETE /v1/deployments/{dep.id}), which releases its load and re-evaluates the others",
                       ["path", "plan_id"], "conflict", extra={"deployment": f"/v1/deployments/{dep.id}"})
