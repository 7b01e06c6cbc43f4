"""The database tables (SQLAlchemy 2 ORM).  Their history is in ``api/migrations``.

JSON documents (plans, cluster specs, graphs, requests) are stored as text: the service writes
them once and hands the stored text back, which keeps cached reads cheap on both SQLite and
PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, false, text
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

__all__ = ["ACTIVE", "Base", "ClusterRow", "DecisionEntryRow", "DecisionRow", "DeploymentRow", "GraphRow",
           "IdempotencyRow", "JobRow", "PlanRow", "ReservationRow", "TokenRow", "utcnow"]


# A job in one of these states holds its request key: at most one such job per key (ux_jobs_active_key).
ACTIVE = ("queued", "running")
_ACTIVE_SQL = text("status IN ('queued', 'running')")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite hands back naive ones otherwise)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class TokenRow(Base):
    """A bearer token, stored as the SHA-256 of the token (the token itself is shown once).

    ``owner`` is who the token acts for: plans, clusters and jobs it makes are that owner's, and
    only that owner (or an admin) may change them.  ``scopes``: space-separated ``read``, ``plan``,
    ``admin`` (see :mod:`pipeplan.api.auth`).  A revoked token stays listed, refused.
    """

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    owner: Mapped[str] = mapped_column(String(128))
    scopes: Mapped[str] = mapped_column(String(64))
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ClusterRow(Base):
    """A registered cluster: its spec with every device's base load.

    ``revision`` grows on every change, reservations included, so a cached view of the cluster
    is valid exactly while the revision is unchanged.
    """

    __tablename__ = "clusters"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    spec: Mapped[str] = mapped_column(Text)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True)  # None: registered before owners


class GraphRow(Base):
    """A layer graph, by the SHA-256 of its canonical JSON; ``zoo_key`` names the zoo request
    that captured it, so a repeated zoo request skips the capture."""

    __tablename__ = "graphs"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    zoo_key: Mapped[str | None] = mapped_column(String(64), unique=True, nullable=True)
    model: Mapped[str] = mapped_column(String(256))
    layers: Mapped[int] = mapped_column(Integer)
    edges: Mapped[int] = mapped_column(Integer)
    doc: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class PlanRow(Base):
    """A plan and the request that made it; ``key`` identifies identical requests."""

    __tablename__ = "plans"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    model: Mapped[str] = mapped_column(String(256), index=True)
    cluster: Mapped[str] = mapped_column(String(128), index=True)
    registered: Mapped[bool] = mapped_column(Boolean, default=False)  # cluster from the registry
    cluster_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    graph_digest: Mapped[str] = mapped_column(String(64))
    costmodel: Mapped[str] = mapped_column(String(256))
    objective: Mapped[str] = mapped_column(String(16))
    bottleneck: Mapped[float | None] = mapped_column(Float, nullable=True)
    throughput: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency: Mapped[float | None] = mapped_column(Float, nullable=True)
    status: Mapped[str] = mapped_column(String(32))  # the solver certificate's status
    request: Mapped[str] = mapped_column(Text)
    doc: Mapped[str] = mapped_column(Text)
    loads: Mapped[str] = mapped_column(Text)  # device -> kind of load a stage puts on it (JSON)
    reserved: Mapped[bool] = mapped_column(Boolean, default=False)
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True)  # who first asked; None: before owners


class ReservationRow(Base):
    """The load one stage of a reserved plan puts on one device of a registered cluster, or (kind
    ``lent``) the bytes of a device's memory it holds for the plan's borrowing stages."""

    __tablename__ = "reservations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    plan_id: Mapped[str] = mapped_column(String(32), ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    cluster: Mapped[str] = mapped_column(String(128), ForeignKey("clusters.name"), index=True)
    device: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))  # compute | memory | lent
    bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # lent rows only
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class JobRow(Base):
    """A solve run by the worker pool: queued → running → done | failed | cancelled.

    The partial unique index is the claim on a request key: inserting a second active job for the
    same key fails in the database, so identical requests, from any thread or replica, share one job.

    With the durable queue (``PIPEPLAN_JOB_QUEUE=postgresql``) a job also has ``spec`` (what a worker
    on another machine needs to run and store it; cleared when it ends), ``queue_id`` (its job in the
    queue library's table), ``worker`` (the ``host:pid`` of the queue worker that claimed it) and
    ``attempts`` (claims so far: a worker records an outcome only while the claim is still its own).
    """

    __tablename__ = "jobs"
    __table_args__ = (Index("ux_jobs_active_key", "key", unique=True, sqlite_where=_ACTIVE_SQL,
                            postgresql_where=_ACTIVE_SQL),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # plan | compare
    status: Mapped[str] = mapped_column(String(16), index=True)
    key: Mapped[str] = mapped_column(String(64), index=True)
    request: Mapped[str] = mapped_column(Text)
    plan_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    result: Mapped[str | None] = mapped_column(Text, nullable=True)  # compare: the comparison (JSON)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    error_type: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Failed for the request's fault (a pipeplan.errors.UserError, or MemoryLimit): decided by the worker
    # where it caught the exception, and what makes the answer a 422 rather than a 500.
    user_error: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    worker_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True)
    spec: Mapped[str | None] = mapped_column(Text, nullable=True)
    queue_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    worker: Mapped[str | None] = mapped_column(String(128), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class IdempotencyRow(Base):
    """What the first request with an ``Idempotency-Key`` made, so that a retry gets the same answer.

    ``key`` is the SHA-256 of the token's digest, the route and the header (keys are per token, and
    the client's text is not stored); ``fingerprint`` the SHA-256 of the request body.
    """

    __tablename__ = "idempotency_keys"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    plan_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RateBucketRow(Base):
    """A token bucket of the rate limit, shared by the replicas of one database (queue mode):
    ``level`` requests left at ``at`` (seconds since the epoch); ``granted``: whether the last take
    was allowed (what :class:`pipeplan.api.ratelimit.SharedBuckets` reads back)."""

    __tablename__ = "rate_buckets"

    key: Mapped[str] = mapped_column(String(80), primary_key=True)
    level: Mapped[float] = mapped_column(Float)
    at: Mapped[float] = mapped_column(Float)
    granted: Mapped[bool] = mapped_column(Boolean, default=True)


class DeploymentRow(Base):
    """A long-running job the service places on a registered cluster: placing → serving → stopped, or
    failed.  Its current plan is a stored plan (``plan_id``) that holds its reservation on the cluster;
    ``version`` counts the plans it has had; ``bottleneck`` and ``throughput`` are its predicted figures
    under the cluster's loads as of the last decision.  No foreign key on ``cluster``: the history of a
    deployment outlives the cluster (deleting a cluster is refused while a serving one holds load)."""

    __tablename__ = "deployments"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    model: Mapped[str] = mapped_column(String(256))
    request: Mapped[str] = mapped_column(Text)  # the create body (a graph by its digest), canonical JSON
    graph_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)  # None: a zoo model not captured yet
    zoo_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    costmodel: Mapped[str] = mapped_column(String(256))
    horizon: Mapped[str] = mapped_column(String(64))
    plan_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    bottleneck: Mapped[float | None] = mapped_column(Float, nullable=True)
    throughput: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    error_type: Mapped[str | None] = mapped_column(String(64), nullable=True)
    user_error: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())  # as JobRow's
    last_decision: Mapped[str | None] = mapped_column(String(32), nullable=True)
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class DecisionRow(Base):
    """One placement decision on a cluster: what triggered it (``place``, ``stop``, ``load``), and,
    once made (``pending`` → ``done`` or ``failed``), its record (``doc``, JSON): each deployment's
    action and predicted figures before and after, migrations, the cluster's total throughput."""

    __tablename__ = "decisions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128), index=True)
    trigger: Mapped[str] = mapped_column(String(16))
    deployment_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)  # the trigger's
    status: Mapped[str] = mapped_column(String(16))
    request: Mapped[str] = mapped_column(Text)  # the trigger's details (JSON)
    doc: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True)  # who triggered it
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class DecisionEntryRow(Base):
    """A deployment a decision acted on (``placed``, ``replanned``, ``kept``, ``declined``, ``stopped``):
    what lists a deployment's decisions."""

    __tablename__ = "decision_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    decision_id: Mapped[str] = mapped_column(String(32), ForeignKey("decisions.id", ondelete="CASCADE"), index=True)
    deployment_id: Mapped[str] = mapped_column(String(32), index=True)
    action: Mapped[str] = mapped_column(String(16))
