"""Alembic environment: run by :meth:`pipeplan.api.database.Database.migrate` with an open connection, or
by the ``alembic`` command with ``-c api/alembic.ini`` and ``PIPEPLAN_DATABASE_URL``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from pipeplan.api.tables import Base

config = context.config
target_metadata = Base.metadata


def _run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    from pipeplan.api.settings import get_settings

    engine = create_engine(get_settings().database_url)
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    from pipeplan.api.settings import get_settings

    context.configure(url=get_settings().database_url, target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    _run_online()
