"""Token owners, scopes and revocation; the owner of each plan, cluster and job.

Tokens made before owners existed keep what they could do: every scope, owned by their name.
Plans, clusters and jobs made before have no owner: only an admin token may change them.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:  # batch: SQLite cannot add NOT NULL columns in place
        batch.add_column(sa.Column("owner", sa.String(128), nullable=False, server_default=""))
        batch.add_column(sa.Column("scopes", sa.String(64), nullable=False, server_default="read plan admin"))
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE tokens SET owner = name")
    with op.batch_alter_table("tokens") as batch:  # the defaults were for the rows already there
        batch.alter_column("owner", server_default=None)
        batch.alter_column("scopes", server_default=None)
    for table in ("plans", "clusters", "jobs"):
        op.add_column(table, sa.Column("owner", sa.String(128), nullable=True))


def downgrade() -> None:
    for table in ("jobs", "clusters", "plans"):
        op.drop_column(table, "owner")
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("revoked_at")
        batch.drop_column("scopes")
        batch.drop_column("owner")
