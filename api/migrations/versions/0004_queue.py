"""Jobs in the durable queue: what a worker elsewhere needs (spec), the queue's job, who claimed it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("spec", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("queue_id", sa.BigInteger(), nullable=True))
    op.add_column("jobs", sa.Column("worker", sa.String(128), nullable=True))
    op.add_column("jobs", sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in ("attempts", "worker", "queue_id", "spec"):
            batch.drop_column(column)
