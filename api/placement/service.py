"""The server's side of placement: one decision at a time per cluster, made in a worker, recorded at once.

A decision (:mod:`pipeplan.api.placement.decide`) is triggered by a deployment created or stopped, or by a
load change; its row is written ``pending`` with the trigger, in the request's transaction.  Then, on
a thread of this module (never the event loop):

1. **Snapshot**: read the cluster (its revision), its base loads, the plain reserved plans' loads, and
   every serving deployment with its plan and graph, into a :class:`~pipeplan.api.placement.payload.PlacePayload`;
2. **Decide** in a worker process of the service's pool (the solver pool; with the durable queue,
   which has no solver pool in the server, the server's predict pool), under a time limit made of the
   deployments' solver limits plus ``PIPEPLAN_JOB_GRACE``;
3. **Record** in one transaction, under the cluster row's lock: only if the cluster's revision is the
   snapshot's (else back to 1, at most three times).  New plans are stored as plans holding the
   deployments' reservations (the old plan's released), every deployment's predicted figures updated,
   the decision finished with its record.  A failed decision changes nothing but its own row (and the
   deployment it was placing, which fails).

Decisions on one cluster are serialised in this process by a lock; across replicas, by the revision
check.  A decision left ``pending`` by a stopped server is failed at the next start
(:func:`recover_decisions`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from pipeplan.api.costmodels import CostModels
from pipeplan.api.database import Database
from pipeplan.api.keys import canonical, digest_text
from pipeplan.api.payloads import SolverLimits, ZooCapture
from pipeplan.api.placement.payload import PlacePayload, Tenant, Trigger
from pipeplan.api.pool import Outcome, QueueFull, Task, WorkerPool
from pipeplan.api.registry import Registry, reservation_rows
from pipeplan.api.reservations import with_lent
from pipeplan.api.schemas.plans import PlanOptionsIn
from pipeplan.api.store import new_id, save_graph
from pipeplan.api.tables import (
    ClusterRow,
    DecisionEntryRow,
    DecisionRow,
    DeploymentRow,
    GraphRow,
    PlanRow,
    utcnow,
)
from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.hardware import Contention
from pipeplan.planner.problem import PlanOptions

__all__ = ["Event", "Placement", "recover_decisions"]

log = logging.getLogger(__name__)

_ATTEMPTS = 3  # snapshots per decision before it fails because the cluster keeps changing
_SUBMIT_PATIENCE = 30.0  # seconds a decision waits for room in a full worker queue


@dataclass(frozen=True)
class Event:
    """A decision to make: its pending row's id, the cluster, what triggered it."""

    decision: str
    cluster: str
    trigger: Trigger
    before: dict[str, dict[str, Any]] | None = None  # load: device -> its base load before the change


@dataclass(frozen=True)
class _Snapshot:
    revision: int
    created_at: datetime
    payload: PlacePayload
    timeout: float
    note: str


class _Failed(Exception):
    """The decision cannot be made (the cluster or the deployment is gone): recorded as failed."""


def options_of(request: dict[str, Any]) -> PlanOptions:
    """A stored deployment request's planner options."""
    return PlanOptions(**PlanOptionsIn.model_validate(request["options"]).model_dump())


class Placement:
    """Makes and records decisions (see the module docstring); ``pool`` runs them."""

    def __init__(self, db: Database, registry: Registry, costmodels: CostModels, pool: WorkerPool,
                 job_grace: float, capture_timeout: float, threads: int = 4) -> None:
        self.db, self.registry, self.costmodels, self.pool = db, registry, costmodels, pool
        self.job_grace, self.capture_timeout = job_grace, capture_timeout
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="placement")
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._closing = threading.Event()

    def has_room(self) -> bool:
        return self.pool.has_room()

    def submit(self, event: Event) -> Future[None]:
        """Make ``event``'s decision in the background; the future ends when it is recorded."""
        return self._executor.submit(self._run, event)

    def close(self) -> None:
        """Stop waiting for decisions (pending ones are failed at the next start)."""
        self._closing.set()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _lock(self, cluster: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(cluster, threading.Lock())

    # -- one decision -----------------------------------------------------------------------------

    def _run(self, event: Event) -> None:
        try:
            with self._lock(event.cluster):
                for _ in range(_ATTEMPTS):
                    if self._closing.is_set():
                        return
                    snap = self._snapshot(event)
                    outcome = self._decide(event, snap)
                    if outcome is None:  # the server is stopping
                        return
                    if self._record(event, snap, outcome):
                        return
                    log.info("decision %s: cluster %r changed while deciding; deciding again", event.decision,
                             event.cluster)
                raise _Failed(f"cluster {event.cluster!r} changed during each of {_ATTEMPTS} attempts to decide; "
                              "report the change again")
        except _Failed as exc:
            self._fail(event, str(exc), "Conflict")
        except Exception as exc:
            log.exception("decision %s on cluster %r failed", event.decision, event.cluster)
            self._fail(event, f"internal error ({type(exc).__name__}); the service logged it with decision "
                       f"{event.decision}", type(exc).__name__)

    def _snapshot(self, event: Event) -> _Snapshot:
        with self.db.read() as session:
            row = session.get(ClusterRow, event.cluster)
            if row is None:
                raise _Failed(f"cluster {event.cluster!r} was deleted")
            after = Cluster.from_dict(json.loads(row.spec), source=f"cluster {row.name!r}")
            before = after
            for device, load in (event.before or {}).items():
                if device in {d.id for d in after.devices}:
                    before = before.with_load(device, Contention.model_validate(load))
            serving = session.execute(select(DeploymentRow).where(DeploymentRow.cluster == event.cluster,
                                                                  DeploymentRow.status == "serving")
                                      .order_by(DeploymentRow.created_at, DeploymentRow.id)).scalars().all()
            held = {d.plan_id for d in serving if d.plan_id is not None}
            loads, lent_rows = reservation_rows(session, event.cluster)
            fixed = {device: kinds for device, rows in loads.items()
                     if (kinds := [kind for plan_id, kind in rows if plan_id not in held])}
            lent = {device: sum(nbytes for _, nbytes in rows) for device, rows in lent_rows.items()}
            before, after = with_lent(before, lent), with_lent(after, lent)
            tenants = [self._tenant(session, d, "serving") for d in serving]
            subject = event.trigger.deployment
            if subject is not None:
                dep = session.get(DeploymentRow, subject)
                if event.trigger.kind == "place":
                    if dep is None or dep.status != "placing":
                        raise _Failed(f"deployment {subject} was stopped before it was placed")
                    tenants.append(self._tenant(session, dep, "new"))
                elif dep is not None and dep.plan_id is not None:
                    tenants.append(self._tenant(session, dep, "leaving"))
        payload = PlacePayload(before, after, {d: tuple(k) for d, k in fixed.items()}, tuple(tenants), event.trigger)
        limit = sum(t.solver.time_limit for t in tenants if t.role != "leaving")
        capture = self.capture_timeout if any(t.graph_text is None for t in tenants) else 0.0
        note = f"the deployments' solver limits, {limit:g} s, + {self.job_grace:g} s (PIPEPLAN_JOB_GRACE)"
        if capture:
            note += f" + {capture:g} s to capture the model (PIPEPLAN_CAPTURE_TIMEOUT)"
        return _Snapshot(row.revision, row.created_at, payload, limit + self.job_grace + capture, note)

    def _tenant(self, session: Session, dep: DeploymentRow, role: str) -> Tenant:
        request = json.loads(dep.request)
        costmodel = self.costmodels.resolve(dep.costmodel)
        graph_text = zoo = None
        if dep.graph_digest is not None:
            graph = session.get(GraphRow, dep.graph_digest)
            if graph is None:
                raise _Failed(f"the graph of deployment {dep.id} is missing")
            graph_text = graph.doc
        else:
            zoo = ZooCapture(**request["zoo"])
        plan: dict[str, Any] | None = None
        loads: dict[str, str] = {}
        if role != "new" and dep.plan_id is not None:
            plan_row = session.get(PlanRow, dep.plan_id)
            if plan_row is None:
                raise _Failed(f"the plan {dep.plan_id} of deployment {dep.id} was deleted; stop the deployment")
            plan, loads = json.loads(plan_row.doc), json.loads(plan_row.loads)
        return Tenant(id=dep.id, role=role, costmodel=costmodel.spec, costmodel_name=costmodel.name,
                      options=options_of(request), solver=SolverLimits(**request["limits"]), horizon=dep.horizon,
                      graph_text=graph_text, zoo=zoo, plan=plan, loads=loads)

    def _decide(self, event: Event, snap: _Snapshot) -> Outcome | None:
        """Run the decision in a worker; None when this server stops meanwhile."""
        done: Future[Outcome] = Future()
        task = Task(new_id(), "place", snap.payload, snap.timeout, snap.note,
                    on_done=lambda _task, outcome: done.set_result(outcome))
        waited = 0.0
        while True:
            try:
                self.pool.submit(task)
                break
            except QueueFull as exc:
                if waited >= _SUBMIT_PATIENCE or self._closing.is_set():
                    return Outcome(False, error=f"the worker queue stayed full for {waited:g} s ({exc}); "
                                   "report the change again", error_type="QueueFull")
                time.sleep(0.5)
                waited += 0.5
        while not self._closing.is_set():
            try:
                return done.result(timeout=0.25)
            except TimeoutError:
                continue
        return None

    # -- recording --------------------------------------------------------------------------------

    def _record(self, event: Event, snap: _Snapshot, outcome: Outcome) -> bool:
        """Store ``outcome``; False (nothing written) when the cluster changed since ``snap``."""
        with self.db.write() as session:
            cluster = session.get(ClusterRow, event.cluster, with_for_update=True)
            if cluster is None:
                raise _Failed(f"cluster {event.cluster!r} was deleted")
            if (cluster.revision, cluster.created_at) != (snap.revision, snap.created_at):
                return False
            decision = session.get(DecisionRow, event.decision, with_for_update=True)
            if decision is None:
                return True
            if not outcome.ok:
                self._failed(session, decision, event, outcome.error or "failed", outcome.error_type,
                             outcome.user_error)
                return True
            subject = session.get(DeploymentRow, event.trigger.deployment) if event.trigger.deployment else None
            if event.trigger.kind == "place" and (subject is None or subject.status != "placing"):
                decision.status, decision.finished_at = "failed", utcnow()
                decision.error = f"deployment {event.trigger.deployment} was stopped before it was placed"
                return True
            value = outcome.value
            record = value["record"]
            if value.get("graph") is not None and subject is not None:
                g = value["graph"]
                save_graph(session, g["digest"], g["doc"], g["model"], g["layers"], g["edges"],
                           zoo_key=subject.zoo_key)
                subject.graph_digest = g["digest"]
            now = utcnow()
            plan_ids: dict[str, str] = {}
            for dep_id, made in sorted(value["plans"].items()):
                plan_ids[dep_id] = self._switch(session, dep_id, made, snap.revision, now)
            for dep_id, (bottleneck, throughput) in value["figures"].items():
                dep = session.get(DeploymentRow, dep_id)
                assert dep is not None
                if (dep.bottleneck, dep.throughput) != (bottleneck, throughput) or dep_id in plan_ids:
                    dep.bottleneck, dep.throughput, dep.updated_at = bottleneck, throughput, now
            for entry in record["entries"]:
                if entry["deployment"] in plan_ids:
                    entry["plan_id"] = plan_ids[entry["deployment"]]
                session.add(DecisionEntryRow(decision_id=decision.id, deployment_id=entry["deployment"],
                                             action=entry["action"]))
                dep = session.get(DeploymentRow, entry["deployment"])
                if dep is not None and entry["action"] != "kept":
                    dep.last_decision = decision.id
            decision.status, decision.doc, decision.finished_at = "done", canonical(record), now
        return True

    def _switch(self, session: Session, dep_id: str, made: dict[str, Any], revision: int, now: datetime) -> str:
        """Store deployment ``dep_id``'s new plan, reserve its load and release the old plan's."""
        dep = session.get(DeploymentRow, dep_id, with_for_update=True)
        assert dep is not None and dep.graph_digest is not None
        plan = made["plan"]
        version = dep.version + 1
        row = PlanRow(id=new_id(), key=digest_text(f"deployment:{dep.id}:{version}"), model=str(plan["model"])[:256],
                      cluster=dep.cluster, registered=True, cluster_revision=revision, graph_digest=dep.graph_digest,
                      costmodel=dep.costmodel, objective=plan["options"]["objective"], bottleneck=plan["bottleneck"],
                      throughput=plan["throughput"], latency=plan["latency"],
                      status=plan["certificate"]["status"][:32],
                      request=canonical({"deployment": dep.id, "version": version}),
                      doc=json.dumps(plan, allow_nan=False), loads=json.dumps(made["loads"]), reserved=False,
                      owner=dep.owner)
        session.add(row)
        session.flush()
        if self.registry.reserve(session, dep.cluster, row.id, made["loads"]):
            row.reserved = True
        if dep.plan_id is not None:
            self.registry.release(session, dep.plan_id)
            session.execute(update(PlanRow).where(PlanRow.id == dep.plan_id, PlanRow.reserved.is_(True))
                            .values(reserved=False, released_at=now))
        dep.plan_id, dep.version, dep.status, dep.updated_at = row.id, version, "serving", now
        return row.id

    def _failed(self, session: Session, decision: DecisionRow, event: Event, error: str,
                error_type: str | None, user_error: bool = False) -> None:
        now = utcnow()
        decision.status, decision.error, decision.finished_at = "failed", _storable(error), now
        if event.trigger.kind == "place" and event.trigger.deployment is not None:
            dep = session.get(DeploymentRow, event.trigger.deployment, with_for_update=True)
            if dep is not None and dep.status == "placing":
                dep.status, dep.error, dep.error_type = "failed", _storable(error), (error_type or "Error")[:64]
                dep.user_error = user_error
                dep.updated_at, dep.last_decision = now, decision.id

    def _fail(self, event: Event, error: str, error_type: str | None) -> None:
        try:
            with self.db.write() as session:
                decision = session.get(DecisionRow, event.decision, with_for_update=True)
                if decision is not None and decision.status == "pending":
                    self._failed(session, decision, event, error, error_type)
        except Exception:
            log.exception("could not record the failure of decision %s", event.decision)


def _storable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\0")


def recover_decisions(session: Session) -> int:
    """Fail the decisions, and the placements, a stopped service left unfinished; the count of decisions."""
    error = "the service stopped before this decision was made; send the request again"
    now = utcnow()
    session.execute(update(DeploymentRow).where(DeploymentRow.status == "placing")
                    .values(status="failed", error=error, error_type="Restarted", updated_at=now))
    result = session.execute(update(DecisionRow).where(DecisionRow.status == "pending")
                             .values(status="failed", error=error, finished_at=now))
    return int(getattr(result, "rowcount", 0) or 0)

