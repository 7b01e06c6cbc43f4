"""A restart keeps every plan, cluster and finished job; an unfinished job is marked failed."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.api.api_factories import chain_graph, cluster_spec, plan_body, wide_graph
from tests.api.api_server import create_token, start_server, wait_job


# Two more server starts per database: PostgreSQL's run is marked slow (it still runs in CI).
@pytest.mark.parametrize("database_url", ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)],
                         indirect=True)
def test_restart_keeps_what_was_stored(database_url: str, tmp_path: Path) -> None:
    token = create_token(database_url, "restart")
    first = start_server(database_url, tmp_path / "first.log", workers=1)
    try:
        with first.client(token) as c:
            assert c.put("/v1/clusters/kept", json=cluster_spec(2)).status_code in (200, 201)
            job = c.post("/v1/plans", json=plan_body(chain_graph(5, "kept"), "kept", reserve=True, wait=0)).json()
            done = wait_job(c, job["url"])
            plan = c.get(done["plan_url"]).json()
            assert plan["reserved"]
            cut = c.post("/v1/plans", json=plan_body(wide_graph(name="cut"), "8gpu-2hosts", wait=0,
                                                     solver={"time_limit": 30})).json()
            assert wait_job(c, cut["url"], until=("running",))["status"] == "running"
    finally:
        first.stop()  # stops the worker in the middle of the solve
    second = start_server(database_url, tmp_path / "second.log", workers=1)
    try:
        with second.client(token) as c:
            assert c.get(plan["url"]).json() == plan
            assert c.get(done["url"]).json() == done
            cluster = c.get("/v1/clusters/kept").json()
            assert [d["reservations"] for d in cluster["devices"]] != [[], []]
            stopped = c.get(cut["url"]).json()
            assert stopped["status"] == "failed" and stopped["error_type"] == "Restarted"
            assert c.delete(plan["url"]).status_code == 204
            assert c.delete("/v1/clusters/kept").status_code == 204
    finally:
        second.stop()


def test_a_stopped_server_answers_a_waiting_request_in_json(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) while a client waits for its plan: the client gets a JSON 202 naming the job,
    not a text/plain 500; the job, left unfinished, is failed (Restarted) at the next start."""
    url = f"sqlite:///{tmp_path / 'stop.db'}"
    token = create_token(url, "stopper")
    server = start_server(url, tmp_path / "server.log", workers=1)
    body = plan_body(wide_graph(), "8gpu-2hosts", solver={"time_limit": 30}, wait=60)
    answers: list[httpx.Response] = []
    with server.client(token) as c:
        waiter = threading.Thread(target=lambda: answers.append(c.post("/v1/plans", json=body)))
        waiter.start()
        deadline = time.monotonic() + 30
        while not c.get("/v1/jobs", params={"status": "running"}).json()["items"]:
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.05)
        server.process.send_signal(signal.SIGINT)
        waiter.join(30)
    server.process.wait(30)
    assert answers and answers[0].status_code == 202, answers and answers[0].text
    assert answers[0].headers["content-type"].startswith("application/json")
    job = answers[0].json()
    again = start_server(url, tmp_path / "again.log", workers=1)
    try:
        with again.client(token) as c:
            failed = c.get(job["url"]).json()
            assert failed["status"] == "failed" and failed["error_type"] == "Restarted", failed
    finally:
        again.stop()
