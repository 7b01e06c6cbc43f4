"""The worker pool under pressure, against a real server: a full queue, a worker that dies."""

from __future__ import annotations

import os
import signal

import httpx

from tests.api.api_factories import chain_graph, plan_body, wide_graph
from tests.api.api_server import Server, wait_job


def test_full_queue_503_and_a_dead_worker_fails_only_its_job(client: httpx.Client, server: Server) -> None:
    # Two workers and two queue slots (SERVER_SETTINGS): two hard solves keep both workers busy, two
    # easy ones wait, and a fifth request is refused.
    bodies = [plan_body(wide_graph(seed=seed, name=f"hard-{seed}"), "8gpu-2hosts", wait=0,
                        solver={"time_limit": 3, "seed": seed}) for seed in range(2)]
    bodies += [plan_body(chain_graph(5, f"easy-{n}"), wait=0) for n in range(3)]
    jobs = []
    for body in bodies[:2]:
        answer = client.post("/v1/plans", json=body)
        assert answer.status_code == 202, answer.text
        jobs.append(answer.json()["url"])
    for url in jobs:  # both taken by a worker before the queue fills
        assert wait_job(client, url, until=("running",))["status"] == "running"
    for body in bodies[2:4]:
        answer = client.post("/v1/plans", json=body)
        assert answer.status_code == 202, answer.text
        jobs.append(answer.json()["url"])
    before = client.get("/v1/plans").json()["total"]
    refused = client.post("/v1/plans", json=bodies[4])
    assert refused.status_code == 503 and refused.headers["retry-after"] == str(server.settings["retry_after"])
    assert "queue is full" in refused.json()["detail"][0]["msg"]

    running = wait_job(client, jobs[0], until=("running",))
    assert running["status"] == "running"
    os.kill(running["worker_pid"], signal.SIGKILL)
    failed = wait_job(client, jobs[0])
    assert failed["status"] == "failed" and failed["error_type"] == "WorkerDied"
    assert "SIGKILL" in failed["error"] and str(running["worker_pid"]) in failed["error"]

    for url in jobs[1:]:  # the others finish; the killed worker was replaced
        assert wait_job(client, url)["status"] == "done"
    assert client.get("/v1/plans").json()["total"] == before + 3
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and health["workers"]["alive"] == 2 and health["workers"]["restarts"] >= 1
    assert client.post("/v1/plans", json=plan_body(chain_graph(5, "after-death"))).status_code == 201
