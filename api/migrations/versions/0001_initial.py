"""Initial schema: tokens, clusters, graphs, plans, reservations, jobs.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_table(
        "clusters",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
    )
    op.create_table(
        "graphs",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("zoo_key", sa.String(64), nullable=True, unique=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("layers", sa.Integer, nullable=False),
        sa.Column("edges", sa.Integer, nullable=False),
        sa.Column("doc", sa.Text, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_table(
        "plans",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("key", sa.String(64), nullable=False, unique=True),
        sa.Column("model", sa.String(256), nullable=False, index=True),
        sa.Column("cluster", sa.String(128), nullable=False, index=True),
        sa.Column("registered", sa.Boolean, nullable=False),
        sa.Column("cluster_revision", sa.Integer, nullable=True),
        sa.Column("graph_digest", sa.String(64), nullable=False),
        sa.Column("costmodel", sa.String(256), nullable=False),
        sa.Column("objective", sa.String(16), nullable=False),
        sa.Column("bottleneck", sa.Float, nullable=True),
        sa.Column("throughput", sa.Float, nullable=True),
        sa.Column("latency", sa.Float, nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("doc", sa.Text, nullable=False),
        sa.Column("loads", sa.Text, nullable=False),
        sa.Column("reserved", sa.Boolean, nullable=False),
        sa.Column("released_at", _TS, nullable=True),
        sa.Column("created_at", _TS, nullable=False, index=True),
    )
    op.create_table(
        "reservations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("plan_id", sa.String(32), sa.ForeignKey("plans.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("cluster", sa.String(128), sa.ForeignKey("clusters.name"), nullable=False, index=True),
        sa.Column("device", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("key", sa.String(64), nullable=False, index=True),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("plan_id", sa.String(32), nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("error_type", sa.String(64), nullable=True),
        sa.Column("worker_pid", sa.Integer, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("started_at", _TS, nullable=True),
        sa.Column("finished_at", _TS, nullable=True),
    )


def downgrade() -> None:
    for table in ("jobs", "reservations", "plans", "graphs", "clusters", "tokens"):
        op.drop_table(table)
