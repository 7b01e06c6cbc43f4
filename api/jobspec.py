"""A job as a worker needs it, and what becomes of its outcome: the plan stored, the job finished.

A :class:`JobSpec` is what :mod:`pipeplan.api.planning` knows of a request once it is checked, reduced to
plain JSON: the worker's payload (graph, cluster, cost model, options), and what storing the result
takes (the key's parts, the graph to save, the cluster to reserve on, the owner).  The server's own
pool keeps it in memory; the durable queue stores it in the job's row (``jobs.spec``) so that a
``pipeplan worker`` on another machine can run the job and record it with :func:`record_outcome`.

>>> from pipeplan.api.payloads import PlanPayload, SolverLimits
>>> from pipeplan.costmodel.cluster import load_cluster
>>> from pipeplan.planner.problem import PlanOptions
>>> payload = PlanPayload(load_cluster("local-cpu"), "analytic", "analytic", PlanOptions(microbatches=2),
...                       SolverLimits(5.0, 1, 0, 0.0), graph_text="{}")
>>> spec = JobSpec(kind="plan", payload=payload, timeout=10.0, timeout_note="",
...                key_parts=KeyParts("c", "m", {}, {}), graph=None, digest="d", zoo_key=None, cluster="x",
...                registered=False, revision=None, costmodel_name="analytic", request={}, reserve=False, owner="me")
>>> JobSpec.from_json(spec.to_json()) == spec
True
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeplan.api.database import Database
from pipeplan.api.keys import KeyParts, canonical, request_key
from pipeplan.api.payloads import PlanPayload
from pipeplan.api.registry import Registry
from pipeplan.api.reservations import lent_bytes
from pipeplan.api.store import finish_job, new_id, save_graph
from pipeplan.api.tables import JobRow, PlanRow
from pipeplan.api.tasks import Outcome

if TYPE_CHECKING:
    from pipeplan.api.resolve import Prepared

__all__ = ["Fence", "JobSpec", "record_outcome", "reserve_plan"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobSpec:
    kind: str  # plan | compare
    payload: PlanPayload  # what pipeplan.api.worker.run takes
    timeout: float  # seconds the job may take, everything included
    timeout_note: str
    key_parts: KeyParts
    graph: dict[str, Any] | None  # an uploaded graph: digest, doc, model, layers, edges
    digest: str | None  # the graph's, when known before the job
    zoo_key: str | None
    cluster: str
    registered: bool
    revision: int | None
    costmodel_name: str
    request: dict[str, Any]
    reserve: bool
    owner: str | None
    request_id: str | None = field(default=None)  # the request that made the job, for the worker's logs

    @classmethod
    def of(cls, prep: Prepared, payload: PlanPayload, request_id: str | None = None) -> JobSpec:
        """The spec of :class:`pipeplan.api.resolve.Prepared` ``prep`` with worker payload ``payload``."""
        graph = None
        if prep.graph is not None:
            g = prep.graph
            graph = {"digest": g.digest, "doc": g.doc, "model": g.model, "layers": g.layers, "edges": g.edges}
        return cls(kind=prep.kind, payload=payload, timeout=prep.timeout, timeout_note=prep.timeout_note,
                   key_parts=prep.key_parts, graph=graph, digest=prep.digest, zoo_key=prep.zoo_key,
                   cluster=prep.cluster.name, registered=prep.cluster.registered, revision=prep.cluster.revision,
                   costmodel_name=prep.costmodel_name, request=prep.request, reserve=prep.reserve, owner=prep.owner,
                   request_id=request_id)

    def to_json(self) -> str:
        doc = {f.name: getattr(self, f.name) for f in fields(self)}
        payload = self.payload.to_json()
        if self.graph is not None and payload.get("graph_text") == self.graph["doc"]:
            del payload["graph_text"]  # stored once
        doc["payload"] = payload
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        doc = json.loads(text)
        if doc["graph"] is not None and "zoo" not in doc["payload"]:
            doc["payload"]["graph_text"] = doc["graph"]["doc"]
        doc["payload"], doc["key_parts"] = PlanPayload.from_json(doc["payload"]), KeyParts(*doc["key_parts"])
        return cls(**doc)


@dataclass(frozen=True)
class Fence:
    """The claim a queue worker holds on a job: its outcome is recorded only while the job is still
    ``running`` under this attempt (a worker whose lease expired and was replaced records nothing)."""

    attempt: int


class _Stale(Exception):
    """The job is no longer this worker's to record."""


def _check_fence(session: Session, job_id: str, fence: Fence | None) -> None:
    if fence is None:
        return
    row = session.execute(select(JobRow.status, JobRow.attempts).where(JobRow.id == job_id)
                          .with_for_update()).first()
    if row is None or row.status != "running" or row.attempts != fence.attempt:
        raise _Stale


def reserve_plan(session: Session, registry: Registry, row: PlanRow) -> None:
    """Reserve ``row``'s load on its registered cluster, and the memory its lenders hold, unless it
    holds a reservation already."""
    if row.reserved:
        return
    loads = json.loads(row.loads)
    lent = lent_bytes(json.loads(row.doc))  # hosts among them are not devices: the registry skips them
    if registry.reserve(session, row.cluster, row.id, loads, lent):
        row.reserved, row.released_at = True, None


def record_outcome(db: Database, registry: Registry, spec: JobSpec, job_id: str, outcome: Outcome,
                   fence: Fence | None = None) -> tuple[Outcome, str | None, bool]:
    """Store what job ``job_id`` made (its graph, plan, reservation) and finish it, or record its
    failure; returns the outcome as recorded (a failure to store becomes one), the plan's id, and
    whether it was recorded at all (False: ``fence`` no longer holds: another worker has the job)."""
    try:
        if outcome.ok:
            plan_id = _store(db, registry, spec, job_id, outcome.value, fence)
            return outcome, plan_id, True
        with db.write() as session:
            _check_fence(session, job_id, fence)
            finish_job(session, job_id, error=outcome.error or "failed", error_type=outcome.error_type,
                       user_error=outcome.user_error)
        return outcome, None, True
    except _Stale:
        log.warning("job %s is no longer this worker's (cancelled, or claimed again after its lease expired); "
                    "its outcome is dropped", job_id)
        return outcome, None, False
    except Exception as exc:
        log.exception("could not record the end of job %s", job_id)
        failed = Outcome(False, error=f"could not store the result ({type(exc).__name__}); the service logged it",
                         error_type=type(exc).__name__)
        try:
            with db.write() as session:
                _check_fence(session, job_id, fence)
                finish_job(session, job_id, error=failed.error, error_type=failed.error_type)
        except _Stale:
            return failed, None, False
        return failed, None, True


def _store(db: Database, registry: Registry, spec: JobSpec, job_id: str, value: dict[str, Any],
           fence: Fence | None) -> str | None:
    """Store what a finished job made; the id of its plan (None for a comparison)."""
    for attempt in range(2):
        try:
            with db.write() as session:
                _check_fence(session, job_id, fence)
                digest = _save_graph(session, spec, value.get("graph"))
                key = request_key(spec.kind, digest, *spec.key_parts)
                if spec.kind == "compare":
                    finish_job(session, job_id, result=json.dumps(value["comparison"]), key=key)
                    return None
                row = session.execute(select(PlanRow).where(PlanRow.key == key)).scalar_one_or_none()
                if row is None:
                    row = _new_plan(spec, key, digest, value)
                    session.add(row)
                    session.flush()
                if spec.reserve:
                    reserve_plan(session, registry, row)
                finish_job(session, job_id, plan_id=row.id, key=key)
                return row.id
        except IntegrityError:  # another process stored the same plan a moment ago: take that one
            if attempt:
                raise
    raise AssertionError("unreachable")


def _save_graph(session: Session, spec: JobSpec, captured: dict[str, Any] | None) -> str:
    if captured is not None:
        save_graph(session, captured["digest"], captured["doc"], captured["model"], captured["layers"],
                   captured["edges"], zoo_key=spec.zoo_key)
        return str(captured["digest"])
    if spec.graph is not None:
        g = spec.graph
        save_graph(session, g["digest"], g["doc"], g["model"], g["layers"], g["edges"])
    assert spec.digest is not None, "a zoo graph is either captured by the job or already stored"
    return spec.digest


def _new_plan(spec: JobSpec, key: str, digest: str, value: dict[str, Any]) -> PlanRow:
    plan = value["plan"]
    return PlanRow(
        id=new_id(), key=key, model=str(plan["model"])[:256], cluster=spec.cluster,
        registered=spec.registered, cluster_revision=spec.revision, graph_digest=digest,
        costmodel=spec.costmodel_name, objective=plan["options"]["objective"], bottleneck=plan["bottleneck"],
        throughput=plan["throughput"], latency=plan["latency"], status=plan["certificate"]["status"][:32],
        request=canonical(spec.request), doc=json.dumps(plan, allow_nan=False), loads=json.dumps(value["loads"]),
        reserved=False, owner=spec.owner)
