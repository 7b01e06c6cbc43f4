"""Auth hygiene: the token before the body, private database files, OpenAPI that matches the settings."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx
import pytest

from pipeplan.api.database import Database
from pipeplan.api.main import create_app
from pipeplan.api.settings import Settings
from tests.api.api_factories import chain_graph, plan_body
from tests.api.api_server import Server


def test_a_bad_token_is_401_before_the_body_is_read(server: Server, anonymous: httpx.Client) -> None:
    huge = b"{" + b" " * (server.settings["max_body_bytes"] * 2) + b"}"
    json_type = {"content-type": "application/json"}
    with server.client("pp_wrong") as wrong:
        for body in (b"{broken", b"[1, 2", huge, b"\xff\xfe"):
            answer = wrong.post("/v1/plans", content=body, headers=json_type)
            assert answer.status_code == 401, (body[:10], answer.text)
            assert answer.json()["detail"][0]["loc"] == ["header", "Authorization"]
        assert wrong.put("/v1/clusters/x", content=huge, headers=json_type).status_code == 401

    def chunks():  # no Content-Length: the token is refused before the first chunk is read
        for _ in range(server.settings["max_body_bytes"] // 50_000 + 2):
            yield b" " * 50_000

    assert anonymous.post("/v1/plans/compare", content=chunks(), headers=json_type).status_code == 401
    assert anonymous.patch("/v1/clusters/c/devices/d", content=b"{", headers=json_type).status_code == 401
    with server.client(server.tokens[0]) as good:  # with a valid token the body checks apply as before
        assert good.post("/v1/plans", content=huge, headers=json_type).status_code == 413
        assert good.post("/v1/plans", content=b"{broken", headers=json_type).status_code == 422
    assert anonymous.get("/v1/plans").status_code == 200  # reads are open on the test servers
    assert anonymous.post("/v1/nope", content=b"{").status_code == 404  # no route, no token asked


def test_the_sqlite_file_and_its_folders_are_private(tmp_path: Path) -> None:
    path = tmp_path / "made" / "here" / "pipeplan.db"
    db = Database(f"sqlite:///{path}")
    try:
        db.migrate()
        files = [p for p in path.parent.iterdir() if p.name.startswith("pipeplan.db")]
        assert {p.name for p in files} >= {"pipeplan.db"}
        for p in files:  # the -wal and -shm files too
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
        for folder in (path.parent, path.parent.parent):
            assert stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0, folder
    finally:
        db.dispose()
    old = tmp_path / "old.db"
    old.touch()
    os.chmod(old, 0o644)
    Database(f"sqlite:///{old}").dispose()
    assert stat.S_IMODE(old.stat().st_mode) == 0o600


def test_the_server_database_file_is_private(server: Server) -> None:
    if not server.database_url.startswith("sqlite"):
        pytest.skip("a PostgreSQL server keeps its own files")
    path = Path(server.database_url.removeprefix("sqlite:///"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("read_auth", ["open", "token"])
def test_openapi_declares_bearer_security_where_it_is_checked(read_auth: str) -> None:
    schema = create_app(Settings(database_url="sqlite://", workers=1, read_auth=read_auth)).openapi()
    paths = schema["paths"]
    writes = [paths["/v1/plans"]["post"], paths["/v1/plans/compare"]["post"], paths["/v1/clusters/{name}"]["put"],
              paths["/v1/plans/{plan_id}"]["delete"]]
    reads = [paths["/v1/plans"]["get"], paths["/v1/plans/{plan_id}"]["get"], paths["/v1/clusters"]["get"],
             paths["/v1/jobs/{job_id}"]["get"]]
    for operation in writes:
        assert operation["security"] == [{"HTTPBearer": []}] and "401" in operation["responses"]
    for operation in reads:
        assert ("security" in operation) == (read_auth == "token")
        assert ("401" in operation["responses"]) == (read_auth == "token")
    for path in ("/healthz", "/metrics"):
        assert "security" not in paths[path]["get"]


def test_closed_reads_need_a_token(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from pipeplan.api.auth import create_token

    url = f"sqlite:///{tmp_path / 'closed.db'}"
    db = Database(url)
    db.migrate()
    token = create_token(db, "reader")
    db.dispose()
    with TestClient(create_app(Settings(database_url=url, workers=1, read_auth="token"))) as c:
        assert c.get("/v1/plans").status_code == 401
        assert c.get("/v1/plans", headers={"Authorization": "Bearer pp_wrong"}).status_code == 401
        assert c.get("/v1/plans", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert c.get("/healthz").status_code in (200, 503)
        missing = c.post("/v1/plans", json=plan_body(chain_graph(3)))
        assert missing.status_code == 401
