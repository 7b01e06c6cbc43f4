"""Fixtures of the service tests: databases (SQLite and PostgreSQL), real server processes, tokens.

PostgreSQL is the one on 127.0.0.1:5432 (database ``test``); each test session works in a schema of
its own, dropped at the end.  Where no PostgreSQL answers, its tests are skipped, except in CI
(``CI`` set), where that is a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.api_server import Server, create_token, start_server

PG_ROOT = os.environ.get("PIPEPLAN_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

# Settings of the shared test servers: small limits so that the limit tests stay cheap.
SERVER_SETTINGS: dict[str, Any] = {
    "queue_size": 2, "max_body_bytes": 400_000, "max_graph_layers": 300, "max_graph_edges": 1000,
    "max_devices": 16, "max_time_limit": 30, "default_time_limit": 5, "sync_wait": 10, "retry_after": 7,
}


@contextmanager
def pg_schema(prefix: str) -> Iterator[str]:
    """A URL of a fresh schema of the test PostgreSQL, dropped afterwards; skips without PostgreSQL
    (fails in CI, which always has it)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    engine = create_engine(PG_ROOT)
    try:
        with engine.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    except OperationalError as exc:
        engine.dispose()
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no PostgreSQL at {PG_ROOT}: {exc.orig}")
    try:
        yield f"{PG_ROOT}?options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


@pytest.fixture(scope="session")
def pg_schema_url() -> Iterator[str]:
    with pg_schema("pipeplan_test") as url:
        yield url


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('db') / 'pipeplan.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


@pytest.fixture(scope="session")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A service process on ``database_url`` with two workers, shared by the tests of one backend."""
    token = create_token(database_url)
    log: Path = tmp_path_factory.mktemp("log") / "server.log"
    srv = start_server(database_url, log, **SERVER_SETTINGS)
    srv.tokens.append(token)
    yield srv
    srv.stop()


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(server.tokens[0]) as c:
        yield c


@pytest.fixture
def anonymous(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c
