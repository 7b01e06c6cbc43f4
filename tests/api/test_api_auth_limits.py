"""Tokens and limits against a real server process, on SQLite and on PostgreSQL."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx

from tests.api.api_factories import chain_graph, cluster_spec, plan_body
from tests.api.api_server import Server, create_token, start_server


def test_writes_need_a_valid_token_and_write_nothing_without(client: httpx.Client, anonymous: httpx.Client,
                                                              server: Server) -> None:
    total = client.get("/v1/plans").json()["total"]
    body = plan_body(chain_graph(5, "auth"))
    missing = anonymous.post("/v1/plans", json=body)
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert missing.json()["detail"][0]["loc"] == ["header", "Authorization"]
    with server.client("pp_not-a-real-token") as wrong:
        assert wrong.post("/v1/plans", json=body).status_code == 401
        assert wrong.put("/v1/clusters/sneaky", json=cluster_spec(2)).status_code == 401
    with server.client() as other_scheme:
        assert other_scheme.post("/v1/plans", json=body, headers={"Authorization": "Basic eDp5"}).status_code == 401
    assert anonymous.post("/v1/plans", content=b"{broken").status_code == 401  # auth before parsing
    assert anonymous.post("/v1/plans/compare", json=body).status_code == 401
    assert anonymous.put("/v1/clusters/sneaky", json=cluster_spec(2)).status_code == 401
    assert anonymous.patch("/v1/clusters/hetero-a100-t4/devices/gpu0", json={"load": {}}).status_code == 401
    plan = client.post("/v1/plans", json=body).json()
    assert anonymous.delete(plan["url"]).status_code == 401
    assert anonymous.post(f"{plan['url']}/release").status_code == 401

    assert client.get("/v1/plans").json()["total"] == total + 1  # only the authorised plan
    assert anonymous.get("/v1/clusters/sneaky").status_code == 404
    assert anonymous.get(plan["url"]).status_code == 200  # reads are open by default


def test_limits_answer_413_and_422(client: httpx.Client, server: Server) -> None:
    limits = server.settings
    big = client.post("/v1/plans", content=b"{" + b" " * limits["max_body_bytes"] + b"}",
                      headers={"content-type": "application/json"})
    assert big.status_code == 413 and "limit" in big.json()["detail"][0]["msg"]

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(limits["max_body_bytes"] // 50_000 + 2):
            yield b" " * 50_000

    assert client.post("/v1/plans", content=chunks(), headers={"content-type": "application/json"}).status_code == 413

    layers = client.post("/v1/plans", json=plan_body(chain_graph(limits["max_graph_layers"] + 1)))
    assert layers.status_code == 413 and layers.json()["detail"][0]["loc"] == ["body", "model", "graph", "layers"]
    graph = chain_graph(20)
    graph["edges"] = graph["edges"] * 60  # over max_graph_edges; the count is checked before parsing
    edges = client.post("/v1/plans", json=plan_body(graph))
    assert edges.status_code == 413 and edges.json()["detail"][0]["loc"] == ["body", "model", "graph", "edges"]

    devices = client.post("/v1/plans", json=plan_body(cluster={**cluster_spec(limits["max_devices"] + 1), "name": "x"}))
    assert devices.status_code == 422 and devices.json()["detail"][0]["loc"] == ["body", "cluster", "devices"]
    assert client.put("/v1/clusters/huge", json=cluster_spec(limits["max_devices"] + 1)).status_code == 422

    slow = client.post("/v1/plans", json=plan_body(solver={"time_limit": limits["max_time_limit"] + 1}))
    assert slow.status_code == 422 and slow.json()["detail"][0]["loc"] == ["body", "solver", "time_limit"]
    assert client.post("/v1/plans", json=plan_body(solver={"time_limit": -1})).status_code == 422
    assert client.post("/v1/plans", json=plan_body(solver={"threads": 10_000})).status_code == 422


def test_a_body_sent_too_slowly_is_a_408(tmp_path: Path) -> None:
    """A client that declares a body and trickles it (slowloris) is answered 408 once the body
    timeout passes, and the connection is freed; a prompt request on the same server is served."""
    url = f"sqlite:///{tmp_path / 'slow.db'}"
    token = create_token(url, "slow")
    server = start_server(url, tmp_path / "server.log", workers=1, body_timeout=1)
    try:
        where = urlparse(server.url)
        with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/plans HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode()
                         + b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
            started = time.monotonic()
            answer = sock.recv(65536).decode()
            waited = time.monotonic() - started
            while "PIPEPLAN_BODY_TIMEOUT" not in answer and (more := sock.recv(65536)):  # the body may come apart
                answer += more.decode()
        assert answer.startswith("HTTP/1.1 408"), answer
        assert "PIPEPLAN_BODY_TIMEOUT" in answer and 0.8 < waited < 5, (answer, waited)
        with server.client(token) as c:
            assert c.post("/v1/plans", json=plan_body(chain_graph(3), wait=30)).status_code in (200, 201)
    finally:
        server.stop()
