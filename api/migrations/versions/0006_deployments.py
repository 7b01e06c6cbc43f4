"""Deployments placed on registered clusters, and the placement decisions made for them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "deployments",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("request", sa.Text(), nullable=False),
        sa.Column("graph_digest", sa.String(64), nullable=True),
        sa.Column("zoo_key", sa.String(64), nullable=True),
        sa.Column("costmodel", sa.String(256), nullable=False),
        sa.Column("horizon", sa.String(64), nullable=False),
        sa.Column("plan_id", sa.String(32), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("bottleneck", sa.Float(), nullable=True),
        sa.Column("throughput", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("error_type", sa.String(64), nullable=True),
        sa.Column("last_decision", sa.String(32), nullable=True),
        sa.Column("owner", sa.String(128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_deployments_cluster", "deployments", ["cluster"])
    op.create_index("ix_deployments_status", "deployments", ["status"])
    op.create_index("ix_deployments_created_at", "deployments", ["created_at"])
    op.create_table(
        "decisions",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("deployment_id", sa.String(32), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("request", sa.Text(), nullable=False),
        sa.Column("doc", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("owner", sa.String(128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_decisions_cluster", "decisions", ["cluster"])
    op.create_index("ix_decisions_deployment_id", "decisions", ["deployment_id"])
    op.create_index("ix_decisions_created_at", "decisions", ["created_at"])
    op.create_table(
        "decision_entries",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("decision_id", sa.String(32), sa.ForeignKey("decisions.id", ondelete="CASCADE"), nullable=False),
        sa.Column("deployment_id", sa.String(32), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
    )
    op.create_index("ix_decision_entries_decision_id", "decision_entries", ["decision_id"])
    op.create_index("ix_decision_entries_deployment_id", "decision_entries", ["deployment_id"])


def downgrade() -> None:
    op.drop_table("decision_entries")
    op.drop_table("decisions")
    op.drop_table("deployments")
