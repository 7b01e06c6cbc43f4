"""What operators expect: liveness and readiness, ETags, request IDs in headers and JSON logs, rate
limits, CORS, links from the public URL, job limits and predictions in workers.

The shared servers (SQLite and PostgreSQL) run with the defaults: CORS and rate limits off, no
public URL.  ``ops`` is one more server (SQLite) with all of them set, and small job limits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from pipeplan.api.main import create_app
from pipeplan.api.settings import Settings
from tests.api.api_factories import chain_graph, cluster_spec, plan_body, wide_graph
from tests.api.api_server import Server, create_token, start_server

ORIGIN = "https://ui.example.com"
PUBLIC = "https://plans.example.com"
JOB_MEMORY = 512 * 2**20  # a learned cost model needs about 380 MB (it imports torch)


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    url = f"sqlite:///{tmp_path_factory.mktemp('ops') / 'ops.db'}"
    tokens = [create_token(url, f"ops-{i}") for i in range(2)]
    log = tmp_path_factory.mktemp("ops-log") / "server.log"
    srv = start_server(url, log, workers=1, log_level="info", access_log=True, public_url=PUBLIC,
                       cors_origins=json.dumps([ORIGIN]), rate_limit=0.2, rate_burst=20, job_memory=JOB_MEMORY,
                       worker_max_jobs=2, max_graph_layers=2000, max_devices=32, sync_wait=30)
    srv.tokens.extend(tokens)
    yield srv
    srv.stop()


def test_ready_only_once_the_workers_are(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ready.db'}", workers=1)
    with TestClient(create_app(settings)) as c:
        # The workers are still importing the solver (about a second): alive, not ready.
        assert c.get("/livez").json() == {"status": "alive"}
        starting = c.get("/readyz")
        assert starting.status_code == 503 and starting.json()["status"] == "not ready"
        assert "the solver workers are starting" in starting.json()["reasons"]
        deadline = time.monotonic() + 60
        while c.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.get("/readyz").json() == {"status": "ready", "reasons": []}


def test_liveness_and_readiness(anonymous: httpx.Client) -> None:
    assert anonymous.get("/livez").json() == {"status": "alive"}
    ready = anonymous.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready", "reasons": []}
    # Ready means a worker of each pool is; the others may still be importing the solver, which
    # took seconds beside other tests' processes on 2 cores (seen failing once with no wait).
    deadline = time.monotonic() + 60
    health = anonymous.get("/healthz").json()
    while (health["workers"]["ready"], health["predict_workers"]["ready"]) != (2, 1) and time.monotonic() < deadline:
        time.sleep(0.1)
        health = anonymous.get("/healthz").json()
    assert health["workers"]["ready"] == 2 and health["predict_workers"]["ready"] == 1


def test_etags_answer_304_until_the_resource_changes(client: httpx.Client) -> None:
    plan = client.post("/v1/plans", json=plan_body(chain_graph(4, "etag"))).json()
    first = client.get(plan["url"])
    etag = first.headers["etag"]
    assert etag.startswith('"') and client.get(plan["url"]).headers["etag"] == etag
    same = client.get(plan["url"], headers={"If-None-Match": etag})
    assert same.status_code == 304 and same.content == b"" and same.headers["etag"] == etag
    assert client.get(plan["url"], headers={"If-None-Match": f'"other", W/{etag}'}).status_code == 304
    assert client.get(plan["url"], headers={"If-None-Match": '"stale"'}).status_code == 200

    assert client.put("/v1/clusters/etagged", json=cluster_spec(2)).status_code == 201
    cluster = client.get("/v1/clusters/etagged")
    tag = cluster.headers["etag"]
    assert client.get("/v1/clusters/etagged", headers={"If-None-Match": tag}).status_code == 304
    loaded = client.patch("/v1/clusters/etagged/devices/gpu0", json={"load": {"corunners": 1, "kind": "compute"}})
    assert loaded.status_code == 200
    changed = client.get("/v1/clusters/etagged", headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert changed.json()["devices"][0]["base_load"]["corunners"] == 1
    assert client.delete("/v1/clusters/etagged").status_code == 204


def test_request_ids_are_echoed_or_made(anonymous: httpx.Client) -> None:
    assert anonymous.get("/livez", headers={"X-Request-ID": "trace-42.a:b"}).headers["x-request-id"] == "trace-42.a:b"
    for sent in ("has space", "x" * 129, "é"):
        made = anonymous.get("/livez", headers={"X-Request-ID": sent.encode()})
        assert len(made.headers["x-request-id"]) == 32 and made.headers["x-request-id"] != sent
    errors = [anonymous.get("/v1/plans/nope"), anonymous.post("/v1/plans", content=b"{")]  # 404, 401
    assert [e.status_code for e in errors] == [404, 401] and all(len(e.headers["x-request-id"]) == 32 for e in errors)


def test_cors_is_off_by_default(anonymous: httpx.Client) -> None:
    answer = anonymous.get("/v1/clusters", headers={"Origin": ORIGIN})
    assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers


def test_cors_allows_the_configured_origins(ops: Server) -> None:
    with ops.client() as c:
        preflight = c.options("/v1/plans", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                                                    "Access-Control-Request-Headers": "authorization,content-type"})
        assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == ORIGIN
        answer = c.get("/v1/clusters", headers={"Origin": ORIGIN, "Authorization": "Bearer pp_cors"})
        assert answer.headers["access-control-allow-origin"] == ORIGIN
        assert "etag" in answer.headers["access-control-expose-headers"].lower()
        other = c.get("/v1/clusters", headers={"Origin": "https://evil.example", "Authorization": "Bearer pp_cors"})
        assert other.status_code == 200 and "access-control-allow-origin" not in other.headers


def test_links_use_the_public_url(ops: Server) -> None:
    with ops.client(ops.tokens[0]) as c:
        for n in (2, 3):
            assert c.post("/v1/plans", json=plan_body(chain_graph(4, "linked"), options={"microbatches": n}))\
                .status_code == 201
        page = c.get("/v1/plans", params={"limit": 1}, headers={"Host": "evil.example"}).json()
        assert page["next"] == f"{PUBLIC}/v1/plans?limit=1&offset=1"
        assert c.get("/v1/jobs", params={"limit": 1}).json()["next"] == f"{PUBLIC}/v1/jobs?limit=1&offset=1"


def test_rate_limits_answer_429_with_retry_after_per_token(ops: Server) -> None:
    with ops.client("pp_rate-a") as a, ops.client("pp_rate-b") as b:
        answers = [a.get("/v1/clusters").status_code for _ in range(21)]
        assert answers[:20] == [200] * 20 and answers[20] == 429
        refused = a.get("/v1/plans")
        # One request every 5 s: 21 requests in well under 5 s leave less than one in the bucket.
        assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 5
        assert refused.json()["detail"][0]["type"] == "rate_limited"
        assert b.get("/v1/clusters").status_code == 200  # another token has its own allowance
        assert a.get("/readyz").status_code == 200 and a.get("/metrics").status_code == 200  # never limited


def test_access_log_lines_are_json_with_the_request_id(ops: Server) -> None:
    with ops.client() as c:
        assert c.get("/v1/clusters/local-cpu", headers={"X-Request-ID": "find-me-in-the-log"}).status_code == 200
    # The access line is written once the response is sent: on a busy machine, after the client has it.
    deadline = time.monotonic() + 10
    while True:
        lines = [json.loads(line) for line in ops.log.read_text().splitlines() if line.startswith("{")]
        mine = [entry for entry in lines if entry.get("request_id") == "find-me-in-the-log"]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert mine and mine[-1]["logger"] == "api.access" and mine[-1]["status"] == 200
    assert mine[-1]["path"] == "/v1/clusters/local-cpu" and mine[-1]["method"] == "GET" and mine[-1]["duration_ms"] >= 0
    assert {"time", "level", "message"} <= set(mine[-1])


def test_a_job_over_its_memory_limit_is_a_422_and_its_worker_is_replaced(ops: Server) -> None:
    cluster = {**cluster_spec(32), "name": "wide32"}
    with ops.client(ops.tokens[1]) as c:
        before = c.get("/healthz").json()["workers"]["recycled"]
        # too wide for the stage program to prove: CP-SAT's model of it needs over a GB to build
        answer = c.post("/v1/plans", json=plan_body(wide_graph(40, 40, name="huge"), cluster,
                                                     solver={"time_limit": 10}))
        assert answer.status_code == 422, answer.text
        item = answer.json()["detail"][0]
        assert item["type"] == "MemoryLimit" and item["loc"] == ["body"] and str(JOB_MEMORY) in item["msg"]
        job = c.get("/v1/jobs", params={"status": "failed"}).json()["items"][0]
        assert job["error_type"] == "MemoryLimit"
        assert c.get("/healthz").json()["workers"]["recycled"] == before + 1
        # worker_max_jobs=2: the fresh worker plans two jobs, then is replaced too.
        made = [c.post("/v1/plans", json=plan_body(chain_graph(5, f"recycle-{i}"))) for i in range(3)]
        assert [m.status_code for m in made] == [201, 201, 201]
        done = c.get("/v1/jobs", params={"status": "done", "limit": 3}).json()["items"]
        workers = [j["worker_pid"] for j in reversed(done)]
        assert workers[0] == workers[1] != workers[2] and job["worker_pid"] not in workers


@pytest.mark.slow  # loads the learned model (torch, scikit-learn) in two workers: about 6 s
def test_predictions_run_in_a_worker_not_in_the_server(ops: Server) -> None:
    maps = Path(f"/proc/{ops.process.pid}/maps")
    if not maps.exists():
        pytest.skip("needs Linux /proc")
    layers = chain_graph(3)["layers"]
    with ops.client(ops.tokens[0]) as c:
        answer = c.post("/v1/costmodel/predict",
                        json={"layers": layers, "cluster": "local-cpu", "costmodel": "learned"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["costmodel"] == "learned" and len(answer.json()["layers"]) == 3
        assert c.post("/v1/plans", json=plan_body(chain_graph(4, "learned-here"), "local-cpu",
                                                  costmodel="learned")).status_code == 201
    # The learned model (skops, scikit-learn) was loaded by workers: the server never mapped sklearn.
    assert "/sklearn/" not in maps.read_text()
