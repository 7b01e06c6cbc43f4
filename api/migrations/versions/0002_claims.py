"""Request-key claims: one active job per key (a partial unique index); Idempotency-Key records.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ACTIVE = sa.text("status IN ('queued', 'running')")


def upgrade() -> None:
    # Jobs a stopped service left active could repeat a key and block the index; the start-up that
    # runs this migration fails them anyway (pipeplan.api.store.recover_jobs).
    op.execute("UPDATE jobs SET status = 'failed', error_type = 'Restarted', "
               "error = 'the service stopped before this job finished; send the request again' "
               "WHERE status IN ('queued', 'running')")
    op.create_index("ux_jobs_active_key", "jobs", ["key"], unique=True, sqlite_where=_ACTIVE,
                    postgresql_where=_ACTIVE)
    op.create_table(
        "idempotency_keys",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("plan_id", sa.String(32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
    op.drop_index("ux_jobs_active_key", table_name="jobs")
