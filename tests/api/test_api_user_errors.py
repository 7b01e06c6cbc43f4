"""Whose fault a failed job was is decided by the exception's type where the worker catches it, stored
in the job's row (``user_error``), and answered from that flag: a 422 naming the class and its message,
or a 500 that names only the class.  Migration 0007 gives rows written before it the flag their
``error_type`` earned then.

In process (TestClient) on a real database (SQLite and PostgreSQL), with a real worker and CP-SAT.
A request that carries an ``Idempotency-Key`` and is sent again is answered from its job's row: the path
of every request that reads a job another process ran.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from fastapi.testclient import TestClient

from pipeplan.api.auth import create_token
from pipeplan.api.database import _MIGRATIONS, Database
from pipeplan.api.main import create_app
from pipeplan.api.settings import Settings
from pipeplan.api.store import finish_job
from pipeplan.api.tables import JobRow
from pipeplan.api.worker import failure_of
from pipeplan.errors import UserError
from tests.api.api_factories import chain_graph, cluster_spec, plan_body
from tests.api.api_server import wait_job
from tests.api.conftest import pg_schema


class QuotaError(UserError, ValueError):
    """A domain error the service has never heard of: the request's fault by its type alone."""


@pytest.fixture(scope="module")
def served(database_url: str) -> Iterator[tuple[TestClient, Database]]:
    db = Database(database_url)
    db.migrate()
    token = create_token(db, f"faults-{uuid.uuid4().hex[:6]}")
    with TestClient(create_app(Settings(database_url=database_url, workers=1, sync_wait=30)),
                    headers={"Authorization": f"Bearer {token}"}) as c:
        yield c, db
    db.dispose()


def _too_big(name: str) -> dict[str, Any]:
    graph = chain_graph(2, name)
    for layer in graph["layers"]:
        layer["param_bytes"] = 60 * 2**30
    return plan_body(graph, cluster_spec(1, name="one"))


def _failed_job(client: TestClient, body: dict[str, Any], key: dict[str, str]) -> str:
    """Send ``body`` under Idempotency-Key ``key`` without waiting (the key records the job), and wait
    until the job has failed; its id.  The same request sent again is answered from the job's row."""
    queued = client.post("/v1/plans", json={**body, "wait": 0}, headers=key)
    assert queued.status_code == 202, queued.text
    job = wait_job(client, queued.json()["url"])
    assert job["status"] == "failed", job
    return str(job["id"])


def _refail(db: Database, job_id: str, exc: Exception) -> None:
    """Record job ``job_id`` as failed with ``exc``, as a worker does: decided where it is caught."""
    outcome = failure_of(exc, job_id, "plan")
    with db.write() as session:
        finish_job(session, job_id, error=outcome.error, error_type=outcome.error_type, user_error=outcome.user_error)


def test_a_user_error_is_a_422_naming_its_type_and_message_and_is_stored(
        served: tuple[TestClient, Database]) -> None:
    client, db = served
    body, key = _too_big(f"big-{uuid.uuid4().hex[:6]}"), {"Idempotency-Key": uuid.uuid4().hex}
    answer = client.post("/v1/plans", json=body)  # waited for: the worker's outcome itself
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    assert detail["type"] == "PlanError" and "short" in detail["msg"] and detail["loc"] == ["body", "options"]

    job_id = _failed_job(client, body, key)
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["error_type"] == "PlanError" and job["user_error"] is True
    with db.read() as session:
        row = session.get(JobRow, job_id)
        assert row is not None and row.user_error
    replay = client.post("/v1/plans", json=body, headers=key)  # answered from the row
    assert replay.status_code == 422 and replay.json()["detail"][0] == detail


def test_the_answer_follows_the_stored_flag_not_the_class_name(served: tuple[TestClient, Database],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    client, db = served
    body, key = _too_big(f"flag-{uuid.uuid4().hex[:6]}"), {"Idempotency-Key": uuid.uuid4().hex}
    job_id = _failed_job(client, body, key)

    # A UserError subclass no name list holds: the request's fault, with its message.
    _refail(db, job_id, QuotaError("the quota of team 'ml' allows 2 devices; ask for at most 2"))
    mine = client.post("/v1/plans", json=body, headers=key)
    assert mine.status_code == 422, mine.text
    assert mine.json()["detail"][0]["type"] == "QuotaError"
    assert mine.json()["detail"][0]["msg"] == "the quota of team 'ml' allows 2 devices; ask for at most 2"
    assert client.get(f"/v1/jobs/{job_id}").json()["user_error"] is True

    # numpy's ValueError: the service's fault, a 500 naming only the class; the details stay in the log.
    with pytest.raises(ValueError) as numpy_error:
        np.ones(2) + np.ones(3)
    with caplog.at_level(logging.ERROR, logger="pipeplan.api.worker"):
        _refail(db, job_id, numpy_error.value)
    ours = client.post("/v1/plans", json=body, headers=key)
    assert ours.status_code == 500, ours.text
    detail = ours.json()["detail"][0]
    assert detail["type"] == "ValueError" and "internal error (ValueError)" in detail["msg"]
    assert "broadcast" not in ours.text and "Traceback" not in ours.text and "broadcast" in caplog.text
    assert client.get(f"/v1/jobs/{job_id}").json()["user_error"] is False


def test_a_placement_the_planner_refuses_is_stored_as_the_requests_fault(
        served: tuple[TestClient, Database]) -> None:
    client, _ = served
    name = f"faults-{uuid.uuid4().hex[:8]}"
    assert client.put(f"/v1/clusters/{name}", json=cluster_spec(2)).status_code == 201
    graph = chain_graph(4, "huge")
    graph["layers"][0]["param_bytes"] = 10**14
    huge = client.post("/v1/deployments", json={"model": {"graph": graph}, "cluster": name, "wait": 30})
    assert huge.status_code == 422 and huge.json()["detail"][0]["type"] == "PlanError", huge.text
    failed = client.get(huge.json()["deployment"]).json()
    assert failed["status"] == "failed" and failed["user_error"] is True


# -- migration 0007 --------------------------------------------------------------------------------------

_OLD_JOBS = [  # id, status, error_type: what the service answered for each before 0007
    ("j-plan", "failed", "PlanError", True), ("j-placement", "failed", "PlacementError", True),
    ("j-memory", "failed", "MemoryLimit", True), ("j-numpy", "failed", "ValueError", False),
    ("j-restart", "failed", "Restarted", False), ("j-cancel", "cancelled", "Cancelled", False),
    ("j-done", "done", None, False)]
_OLD_DEPLOYMENTS = [("d-plan", "failed", "PlanError", True), ("d-conflict", "failed", "Conflict", False),
                    ("d-serving", "serving", None, False)]
_NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _upgrade(conn: sa.Connection, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = conn
    command.upgrade(config, revision)


@contextmanager
def _sqlite(folder: Path) -> Iterator[str]:
    yield f"sqlite:///{folder / 'old.db'}"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_migration_0007_derives_the_flag_of_rows_written_before(backend: str, tmp_path: Path) -> None:
    with pg_schema("pipeplan_0007") if backend == "postgresql" else _sqlite(tmp_path) as url:
        db = Database(url)
        try:
            with db.engine.begin() as conn:
                _upgrade(conn, "0006")
                for job_id, status, error_type, _ in _OLD_JOBS:
                    conn.execute(sa.text(
                        "INSERT INTO jobs (id, kind, status, key, request, error_type, created_at, attempts) "
                        "VALUES (:id, 'plan', :status, :key, '{}', :error_type, :now, 0)"),
                        {"id": job_id, "status": status, "key": job_id, "error_type": error_type, "now": _NOW})
                for dep_id, status, error_type, _ in _OLD_DEPLOYMENTS:
                    conn.execute(sa.text(
                        "INSERT INTO deployments (id, cluster, status, model, request, costmodel, horizon, version, "
                        "error_type, created_at, updated_at) VALUES (:id, 'c', :status, 'm', '{}', 'analytic', "
                        "'10m', 0, :error_type, :now, :now)"),
                        {"id": dep_id, "status": status, "error_type": error_type, "now": _NOW})
            db.migrate()
            with db.engine.connect() as conn:
                jobs = dict(conn.execute(sa.text("SELECT id, user_error FROM jobs")).tuples().all())
                deps = dict(conn.execute(sa.text("SELECT id, user_error FROM deployments")).tuples().all())
            assert {k: bool(v) for k, v in jobs.items()} == {j: user for j, _, _, user in _OLD_JOBS}
            assert {k: bool(v) for k, v in deps.items()} == {d: user for d, _, _, user in _OLD_DEPLOYMENTS}
            with db.write() as session:  # a new row, and the ORM's default
                session.add(JobRow(id="j-new", kind="plan", status="queued", key="new", request="{}"))
            with db.read() as session:
                row = session.get(JobRow, "j-new")
                assert row is not None and row.user_error is False
        finally:
            db.dispose()
