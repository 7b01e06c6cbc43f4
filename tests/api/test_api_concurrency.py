"""Identical requests at the same moment make one job; ``Idempotency-Key`` gives a retry the first
request's answer.  Real threads against a real server process, on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from sqlalchemy import text

from pipeplan.api.database import Database
from tests.api.api_factories import chain_graph, plan_body
from tests.api.api_server import Server


def _at_once(server: Server, n: int, send: Callable[[httpx.Client], httpx.Response]) -> list[httpx.Response]:
    """``send`` from ``n`` threads released together, each with its own connection."""
    barrier = threading.Barrier(n)
    answers: list[httpx.Response | BaseException] = [RuntimeError("not run")] * n

    def run(i: int) -> None:
        with server.client(server.tokens[0]) as c:
            barrier.wait()
            try:
                answers[i] = send(c)
            except BaseException as exc:  # reported below, with the others
                answers[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    failed = [a for a in answers if not isinstance(a, httpx.Response)]
    assert not failed, failed[:3]
    return [a for a in answers if isinstance(a, httpx.Response)]


def _jobs_for(server: Server, graph_digest: str) -> int:
    db = Database(server.database_url)
    try:
        with db.read() as session:
            return int(session.execute(text("select count(*) from jobs where request like :d"),
                                       {"d": f"%{graph_digest}%"}).scalar_one())
    finally:
        db.dispose()


def test_fifty_identical_requests_make_one_job(server: Server) -> None:
    body = plan_body(chain_graph(12, f"same-{uuid.uuid4().hex[:8]}"), solver={"time_limit": 5})
    answers = _at_once(server, 50, lambda c: c.post("/v1/plans", json=body))
    assert all(a.status_code in (200, 201) for a in answers), {a.status_code: a.text[:200] for a in answers}
    assert sorted(a.status_code for a in answers).count(201) == 1  # one made it, the others shared it
    plans = {a.json()["id"] for a in answers}
    assert len(plans) == 1
    assert _jobs_for(server, answers[0].json()["graph_digest"]) == 1


def test_idempotency_key_replays_and_refuses_another_body(server: Server, client: httpx.Client) -> None:
    key = f"retry-{uuid.uuid4()}"
    body = plan_body(chain_graph(5, f"idem-{uuid.uuid4().hex[:8]}"))
    first = client.post("/v1/plans", json=body, headers={"Idempotency-Key": key})
    assert first.status_code == 201, first.text
    again = client.post("/v1/plans", json={**body, "wait": 3}, headers={"Idempotency-Key": key})  # wait is not the body
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"] and again.json()["cached"]

    other = client.post("/v1/plans", json=plan_body(chain_graph(5, "idem-other")), headers={"Idempotency-Key": key})
    assert other.status_code == 409, other.text
    item = other.json()["detail"][0]
    assert item["loc"] == ["header", "Idempotency-Key"] and item["type"] == "idempotency_conflict"
    assert key in item["msg"] and "different" in item["msg"]

    compared = client.post("/v1/plans/compare", json=body, headers={"Idempotency-Key": key})
    assert compared.status_code == 200, compared.text  # keys are per route: this one is new there
    bad = client.post("/v1/plans", json=body, headers={"Idempotency-Key": "has space"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]


def test_idempotency_keys_belong_to_one_token(server: Server, client: httpx.Client) -> None:
    from tests.api.api_server import create_token

    key = f"shared-{uuid.uuid4()}"
    mine = client.post("/v1/plans", json=plan_body(chain_graph(4, "idem-mine")), headers={"Idempotency-Key": key})
    assert mine.status_code in (200, 201), mine.text
    with server.client(create_token(server.database_url, "other")) as theirs:
        answer = theirs.post("/v1/plans", json=plan_body(chain_graph(4, "idem-theirs")),
                             headers={"Idempotency-Key": key})
    assert answer.status_code in (200, 201) and answer.json()["id"] != mine.json()["id"]


def test_concurrent_retries_with_one_key_share_one_plan(server: Server) -> None:
    key = f"burst-{uuid.uuid4()}"
    body: dict[str, Any] = plan_body(chain_graph(10, f"idem-burst-{uuid.uuid4().hex[:8]}"))
    answers = _at_once(server, 12, lambda c: c.post("/v1/plans", json=body, headers={"Idempotency-Key": key}))
    assert all(a.status_code in (200, 201) for a in answers), {a.status_code: a.text[:200] for a in answers}
    assert len({a.json()["id"] for a in answers}) == 1
    assert _jobs_for(server, answers[0].json()["graph_digest"]) == 1
