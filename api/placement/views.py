"""Deployments and decisions as the API shows them (plain dicts, JSON-ready), and their lists."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, or_, select
from sqlalchemy.orm import Session

from pipeplan.api.tables import DecisionEntryRow, DecisionRow, DeploymentRow, PlanRow

__all__ = ["decision_view", "deployment_summary", "deployment_view", "list_decisions", "list_deployments"]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _decision_url(cluster: str, decision: str | None) -> str | None:
    return f"/v1/clusters/{cluster}/decisions/{decision}" if decision is not None else None


def deployment_summary(row: DeploymentRow) -> dict[str, Any]:
    return {"id": row.id, "url": f"/v1/deployments/{row.id}", "cluster": row.cluster, "status": row.status,
            "model": row.model, "owner": row.owner, "version": row.version, "plan_id": row.plan_id,
            "bottleneck": row.bottleneck, "throughput": row.throughput, "created_at": _iso(row.created_at),
            "updated_at": _iso(row.updated_at)}


def deployment_view(row: DeploymentRow, plan: PlanRow | None) -> dict[str, Any]:
    """A deployment with its current plan (``plan``: its row, None before it is placed)."""
    return {**deployment_summary(row), "request": json.loads(row.request), "horizon": row.horizon,
            "plan_url": f"/v1/plans/{row.plan_id}" if row.plan_id else None,
            "loads": json.loads(plan.loads) if plan is not None else {},
            "plan": json.loads(plan.doc) if plan is not None else None,
            "error": row.error, "error_type": row.error_type, "user_error": row.user_error,
            "last_decision": _decision_url(row.cluster, row.last_decision),
            "decisions": f"/v1/deployments/{row.id}/decisions", "stopped_at": _iso(row.stopped_at)}


def decision_view(row: DecisionRow) -> dict[str, Any]:
    record = json.loads(row.doc) if row.doc else {}
    return {"id": row.id, "url": _decision_url(row.cluster, row.id), "cluster": row.cluster, "trigger": row.trigger,
            "deployment_id": row.deployment_id, "status": row.status, "request": json.loads(row.request),
            "error": row.error, "owner": row.owner, "created_at": _iso(row.created_at),
            "finished_at": _iso(row.finished_at), "considered": record.get("considered"),
            "entries": record.get("entries"), "total_before": record.get("total_before"),
            "total_after": record.get("total_after")}


def _page(session: Session, query: Select[Any], table: type[DeploymentRow] | type[DecisionRow], limit: int,
          offset: int) -> tuple[list[Any], int]:
    total = session.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    rows = session.execute(query.order_by(table.created_at.desc(), table.id.desc())
                           .limit(limit).offset(offset)).scalars().all()
    return list(rows), total


def list_deployments(session: Session, *, cluster: str | None, status: str | None, limit: int,
                     offset: int) -> tuple[list[DeploymentRow], int]:
    """One page of deployments, newest first, and how many match in all."""
    query = select(DeploymentRow)
    if cluster is not None:
        query = query.where(DeploymentRow.cluster == cluster)
    if status is not None:
        query = query.where(DeploymentRow.status == status)
    return _page(session, query, DeploymentRow, limit, offset)


def list_decisions(session: Session, *, cluster: str | None = None, deployment: str | None = None, limit: int,
                   offset: int) -> tuple[list[DecisionRow], int]:
    """One page of decisions on ``cluster``, or that ``deployment`` triggered or appears in, newest first."""
    query = select(DecisionRow)
    if cluster is not None:
        query = query.where(DecisionRow.cluster == cluster)
    if deployment is not None:
        involved = select(DecisionEntryRow.decision_id).where(DecisionEntryRow.deployment_id == deployment)
        query = query.where(or_(DecisionRow.deployment_id == deployment, DecisionRow.id.in_(involved)))
    return _page(session, query, DecisionRow, limit, offset)
