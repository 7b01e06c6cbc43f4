"""Memory a reserved plan's lenders hold: ``reservations.bytes``, on rows of kind ``lent``.

A plan made with harvesting keeps some weights in other devices' memory; reserving it records, per
lending device, one row of kind ``lent`` with the bytes held there, so later plans on the cluster see
that device with that much less memory.  Rows written before (stage loads) have no bytes.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("reservations", sa.Column("bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    # Without the column a lent row would read as a stage's load: drop them first.
    op.execute(sa.text("DELETE FROM reservations WHERE kind = 'lent'"))
    with op.batch_alter_table("reservations") as batch:
        batch.drop_column("bytes")
