"""Plans, jobs and graphs in the database, and their public views (plain dicts, JSON-ready)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select, update
from sqlalchemy.orm import Session

from pipeplan.api.tables import GraphRow, JobRow, PlanRow, utcnow

__all__ = [
    "find_graph", "finish_job", "job_summary", "job_view", "list_jobs", "list_plans",
    "new_id", "plan_json", "plan_summary", "plan_view",
    "recover_jobs", "save_graph", "start_job", "zoo_digest",
]

TERMINAL = ("done", "failed", "cancelled")


def new_id() -> str:
    return uuid.uuid4().hex


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _plan_head(row: Any, cached: bool) -> dict[str, Any]:
    return {
        "id": row.id, "url": f"/v1/plans/{row.id}", "created_at": _iso(row.created_at), "model": row.model,
        "cluster": row.cluster, "registered_cluster": row.registered, "cluster_revision": row.cluster_revision,
        "costmodel": row.costmodel, "graph_digest": row.graph_digest, "reserved": row.reserved,
        "released_at": _iso(row.released_at), "loads": json.loads(row.loads), "cached": cached, "owner": row.owner,
    }


def plan_view(row: PlanRow, cached: bool = False) -> dict[str, Any]:
    return {**_plan_head(row, cached), "plan": json.loads(row.doc)}


def plan_json(row: Any, cached: bool = False) -> bytes:
    """:func:`plan_view` as JSON text, with the stored plan document spliced in unparsed (the hot
    path of cached reads); ``row`` is a :class:`PlanRow` or a Core row of the plans table."""
    head = json.dumps(_plan_head(row, cached), separators=(",", ":"))
    return f'{head[:-1]},"plan":{row.doc}}}'.encode()


def plan_summary(row: PlanRow) -> dict[str, Any]:
    return {
        "id": row.id, "url": f"/v1/plans/{row.id}", "created_at": _iso(row.created_at), "model": row.model,
        "cluster": row.cluster, "costmodel": row.costmodel, "objective": row.objective, "status": row.status,
        "bottleneck": row.bottleneck, "throughput": row.throughput, "latency": row.latency,
        "reserved": row.reserved, "owner": row.owner,
    }


def job_view(row: JobRow) -> dict[str, Any]:
    return {
        "id": row.id, "url": f"/v1/jobs/{row.id}", "kind": row.kind, "status": row.status,
        "created_at": _iso(row.created_at), "started_at": _iso(row.started_at),
        "finished_at": _iso(row.finished_at), "error": row.error, "error_type": row.error_type,
        "user_error": row.user_error, "worker_pid": row.worker_pid, "worker": row.worker,
        "attempts": row.attempts or 0, "plan_id": row.plan_id,
        "owner": row.owner,
        "plan_url": f"/v1/plans/{row.plan_id}" if row.plan_id else None,
        "result": json.loads(row.result) if row.result else None,
    }


def job_summary(row: JobRow) -> dict[str, Any]:
    """A job as lists show it: everything but a comparison's result."""
    view = job_view(row)
    del view["result"]
    return view


def list_jobs(session: Session, *, status: str | None, kind: str | None, since: datetime | None,
              until: datetime | None, limit: int, offset: int) -> tuple[list[JobRow], int]:
    """One page of jobs, newest first, and how many match in all."""
    query = select(JobRow)
    if status is not None:
        query = query.where(JobRow.status == status)
    if kind is not None:
        query = query.where(JobRow.kind == kind)
    if since is not None:
        query = query.where(JobRow.created_at >= since)
    if until is not None:
        query = query.where(JobRow.created_at < until)
    return _newest_page(session, query, JobRow, limit, offset)


def list_plans(session: Session, *, model: str | None, cluster: str | None, since: datetime | None,
               until: datetime | None, reserved: bool | None, limit: int, offset: int) -> tuple[list[PlanRow], int]:
    """One page of plans, newest first, and how many match in all."""
    query = select(PlanRow)
    if model is not None:
        query = query.where(PlanRow.model == model)
    if cluster is not None:
        query = query.where(PlanRow.cluster == cluster)
    if since is not None:
        query = query.where(PlanRow.created_at >= since)
    if until is not None:
        query = query.where(PlanRow.created_at < until)
    if reserved is not None:
        query = query.where(PlanRow.reserved == reserved)
    return _newest_page(session, query, PlanRow, limit, offset)


def _newest_page(session: Session, query: Select[Any], table: type[JobRow] | type[PlanRow], limit: int,
                 offset: int) -> tuple[list[Any], int]:
    """One page of ``query``'s rows, newest first (ties by id), and how many it matches in all."""
    total = session.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    rows = session.execute(query.order_by(table.created_at.desc(), table.id.desc())
                           .limit(limit).offset(offset)).scalars().all()
    return list(rows), total


def find_graph(session: Session, *, digest: str | None = None, zoo_key: str | None = None) -> GraphRow | None:
    if digest is not None:
        return session.get(GraphRow, digest)
    return session.execute(select(GraphRow).where(GraphRow.zoo_key == zoo_key)).scalar_one_or_none()


def zoo_digest(session: Session, zoo_key: str) -> str | None:
    """The digest of the graph a zoo request captured, if it was captured (without the document)."""
    return session.execute(select(GraphRow.digest).where(GraphRow.zoo_key == zoo_key)).scalar_one_or_none()


def save_graph(session: Session, digest: str, doc: str, model: str, layers: int, edges: int,
               zoo_key: str | None = None) -> None:
    """Store a graph once; a zoo capture also records which zoo request gives it."""
    if zoo_key is not None:
        # The same zoo request may capture a different graph after a torch upgrade: the newest wins.
        session.execute(update(GraphRow).where(GraphRow.zoo_key == zoo_key, GraphRow.digest != digest)
                        .values(zoo_key=None))
    row = session.get(GraphRow, digest)
    if row is None:
        session.add(GraphRow(digest=digest, zoo_key=zoo_key, model=model[:256], layers=layers, edges=edges,
                             doc=doc))
    elif zoo_key is not None and row.zoo_key is None:
        row.zoo_key = zoo_key


def start_job(session: Session, job_id: str, pid: int) -> None:
    session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == "queued")
                    .values(status="running", started_at=utcnow(), worker_pid=pid))


def _storable(text: str | None, limit: int | None = None) -> str | None:
    """Text any database stores: no NUL (PostgreSQL refuses it), no lone surrogate, within ``limit``."""
    if text is None:
        return None
    text = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\0")
    return text[:limit] if limit else text


def finish_job(session: Session, job_id: str, *, plan_id: str | None = None, result: str | None = None,
               error: str | None = None, error_type: str | None = None, user_error: bool = False,
               key: str | None = None) -> None:
    """End job ``job_id``: done (``plan_id``, ``result``), or failed or cancelled with ``error`` and its class;
    ``user_error`` when the request was at fault (the worker decided it: :func:`pipeplan.api.worker.failure_of`)."""
    status = "done" if error is None else "cancelled" if error_type == "Cancelled" else "failed"
    values: dict[str, Any] = {"status": status, "finished_at": utcnow(),
                              "plan_id": plan_id, "result": result, "error": _storable(error),
                              "error_type": _storable(error_type, 64), "user_error": error is not None and user_error,
                              "spec": None}
    if key is not None:
        values["key"] = key
    session.execute(update(JobRow).where(JobRow.id == job_id).values(**values))


def recover_jobs(session: Session) -> int:
    """Fail the jobs a stopped service left unfinished in its own worker pool; the count of them.

    Jobs of the durable queue (``queue_id`` set) are not this server's: their workers hold leases,
    and only a lease that expired gives a job back (:func:`pipeplan.api.queue.sweep`)."""
    result = session.execute(
        update(JobRow).where(JobRow.status.in_(("queued", "running")), JobRow.queue_id.is_(None))
        .values(status="failed", finished_at=utcnow(), error_type="Restarted",
                error="the service stopped before this job finished; send the request again"))
    return int(getattr(result, "rowcount", 0) or 0)
