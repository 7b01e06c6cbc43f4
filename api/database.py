"""The database: engine, sessions and migrations, for SQLite (default) or PostgreSQL.

>>> db = Database("sqlite://")
>>> db.migrate()
>>> with db.read() as session:
...     session.execute(text("select count(*) from plans")).scalar_one()
0
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool
from starlette.concurrency import run_in_threadpool

__all__ = ["Database", "private_file", "text"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_MIGRATIONS = Path(__file__).parent / "migrations"

# PostgreSQL advisory lock keys of the service (any 64-bit number no other program on the database uses).
MIGRATION_LOCK = 0x70697065706C0001


def private_file(path: Path) -> None:
    """Create ``path`` (and the folders missing above it) readable by this user only: 0600 and 0700.

    The database holds token digests and every plan; SQLite creates its -wal and -shm files with the
    database file's mode, so they are private too.  A file already there that others can read is
    made private, with a warning.
    """
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        mode = os.fstat(fd).st_mode & 0o777
        if mode & 0o077:
            log.warning("database file %s was readable by others (%o): made private (600)", path, mode)
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm", "-journal"):  # left by an older service that made them readable
        sibling = path.with_name(path.name + suffix)
        if sibling.exists() and sibling.stat().st_mode & 0o077:
            sibling.chmod(0o600)


def _sqlite_engine(url: str) -> Engine:
    parsed = make_url(url)
    memory = parsed.database in (None, "", ":memory:")
    if not memory:
        private_file(Path(str(parsed.database)))
    engine = create_engine(
        url, connect_args={"check_same_thread": False, "timeout": 30},
        # An in-memory database lives in one connection.  A file is shared by a pool big enough for
        # every threadpool thread (40) plus the event loop's own quick reads, which must never wait.
        **({"poolclass": StaticPool} if memory else {"pool_size": 16, "max_overflow": 48}))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event, below, open transactions: pysqlite's own implicit BEGIN
        # cannot be made IMMEDIATE.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        if not memory:
            cursor.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A write transaction takes the write lock up front: a deferred one that reads first and
        # writes later fails with SQLITE_BUSY if another writer committed in between.
        immediate = conn.get_execution_options().get("pipeplan_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class Database:
    """Sessions on one database: ``read()`` for queries, ``write()`` for changes (committed at exit)."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite"):
            self.engine = _sqlite_engine(url)
        else:
            self.engine = create_engine(url, pool_size=8, max_overflow=8, pool_pre_ping=True)
        self._reader = sessionmaker(self.engine, expire_on_commit=False)
        self._writer = sessionmaker(self.engine.execution_options(pipeplan_write=True), expire_on_commit=False)

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    async def quick(self, read: Callable[[], T]) -> T:
        """Run a short read by key: inline on SQLite, in the threadpool otherwise.

        A read of a local SQLite file in WAL mode never waits for a writer and takes a fraction of a
        millisecond, less than handing it to a thread costs on a busy machine; a server database is
        across a network, so its reads leave the event loop.
        """
        if self.backend == "sqlite":
            return read()
        return await run_in_threadpool(read)

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._reader() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        with self._writer() as session, session.begin():
            yield session

    def migrate(self) -> None:
        """Bring the schema to the newest migration (Alembic ``upgrade head``)."""
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(_MIGRATIONS))
        with self.engine.begin() as conn:
            if self.backend == "postgresql":
                # Replicas starting together migrate one at a time (the lock ends with the transaction).
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
        log.info("database %s at the newest schema", self.engine.url.render_as_string(hide_password=True))

    def ping(self) -> None:
        """Raise if the database cannot be reached."""
        with self.engine.connect() as conn:
            conn.execute(text("select 1"))

    def dispose(self) -> None:
        self.engine.dispose()
