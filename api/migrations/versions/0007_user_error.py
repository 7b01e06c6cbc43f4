"""Whose fault a failure was, recorded when it happens: ``user_error`` on jobs and deployments.

A worker decides it where it catches the exception (``isinstance(exc, pipeplan.errors.UserError)``,
:func:`pipeplan.api.worker.failure_of`), and the service answers a 422 or a 500 from this flag.  Rows
written before it get the flag derived from their ``error_type`` as the service did until now: a
failure whose class was a UserError subclass, or ``MemoryLimit``.  The names are frozen here, as they
were when this migration was written, so that it means the same whatever the code becomes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Every subclass of pipeplan.errors.UserError at revision 0006, and MemoryLimit (a job that needs more
# memory than a worker may hold): the failures that were answered as the request's fault.
USER_ERROR_TYPES = ("CaptureError", "ClusterError", "CostModelError", "GraphError", "LayerError", "LivenessError",
                    "MemoryLimit", "ModelFileError", "PlacementError", "PlanError", "PlanMismatchError",
                    "ProfileTableError", "SourceError", "TableError", "UnitError", "UserError", "ZooError")

_TABLES = ("jobs", "deployments")


def upgrade() -> None:
    for table in _TABLES:
        op.add_column(table, sa.Column("user_error", sa.Boolean(), nullable=False, server_default=sa.false()))
        rows = sa.table(table, sa.column("status", sa.String), sa.column("error_type", sa.String),
                        sa.column("user_error", sa.Boolean))
        op.execute(rows.update().where(rows.c.status == "failed", rows.c.error_type.in_(USER_ERROR_TYPES))
                   .values(user_error=True))


def downgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("user_error")
