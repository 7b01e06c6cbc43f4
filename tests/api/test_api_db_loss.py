"""A database connection killed mid-request (pg_terminate_backend, as an operator or a failover
does) is a 503 with Retry-After, never a 500; the service goes on answering once it reconnects."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.api.api_factories import chain_graph, plan_body
from tests.api.api_server import create_token, start_server
from tests.api.conftest import PG_ROOT

APP = "pipeplan-db-loss-test"


def test_killed_connections_are_503s_with_retry_after(pg_schema_url: str, tmp_path: Path) -> None:
    url = f"{pg_schema_url}&application_name={APP}"
    token = create_token(url, "db-loss")
    server = start_server(url, tmp_path / "server.log", workers=1)
    admin = create_engine(PG_ROOT)
    stop = threading.Event()

    def kill() -> None:
        while not stop.is_set():
            with admin.begin() as conn:
                conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE application_name = :app"), {"app": APP})
            time.sleep(0.02)

    killer = threading.Thread(target=kill)
    codes: list[int] = []
    try:
        with server.client(token) as c:
            assert c.post("/v1/plans", json=plan_body(chain_graph(4), wait=30)).status_code in (200, 201)
            killer.start()
            for i in range(150):
                r = c.get("/v1/plans") if i % 3 else c.post("/v1/plans", json=plan_body(chain_graph(4), wait=30))
                codes.append(r.status_code)
                if r.status_code == 503:
                    assert r.headers["Retry-After"] == "1" and r.json()["detail"], r.text
                    assert "database connection was lost" in r.json()["detail"][0]["msg"]
            stop.set()
            killer.join()
            assert c.get("/v1/plans").status_code == 200  # reconnected
    finally:
        stop.set()
        if killer.is_alive():
            killer.join()
        server.stop()
        admin.dispose()
    assert set(codes) <= {200, 201, 202, 503}, codes
    assert codes.count(503) >= 1, "no request met a killed connection: the test proved nothing"
