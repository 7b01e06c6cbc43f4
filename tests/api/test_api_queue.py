"""Several replicas and queue workers on one PostgreSQL (``PIPEPLAN_JOB_QUEUE=postgresql``), as real
processes: replicas do not fail each other's jobs and cancel any job; a worker killed mid-job has its
job claimed again after the lease and done once; a worker told to stop drains (finishes, or hands back).

Each test works in a PostgreSQL schema of its own, dropped at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipeplan.api.pool import Task, WorkerPool
from tests.api.api_factories import chain_graph, plan_body, wide_graph
from tests.api.api_server import ROOT, Server, _env, create_token, start_server, wait_job
from tests.api.conftest import pg_schema

# Short beats and leases, so that a dead worker's job comes back within seconds.
QUEUE: dict[str, Any] = {"job_queue": "postgresql", "queue_heartbeat": 0.3, "queue_lease": 2, "sync_wait": 10,
                         "default_time_limit": 5, "max_time_limit": 30, "log_format": "text"}


@pytest.fixture
def queue_url() -> Iterator[str]:
    with pg_schema("pipeplan_queue") as url:
        yield url


class Worker:
    """``pipeplan worker`` in a session of its own, so that a kill takes its solver processes too."""

    def __init__(self, database_url: str, log: Path, workers: int = 1, **settings: Any) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pipeplan.api", "worker", "--workers", str(workers), "--log-level", "info"],
            env=_env(database_url, {**QUEUE, **settings}), cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True)
        self.name = f"{os.uname().nodename}:{self.process.pid}"

    def kill(self) -> None:
        """As a machine that dies: the worker and its solvers, at once."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 60) -> float:
        """SIGTERM, and the seconds it took to exit."""
        started = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout)
        return time.monotonic() - started

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@pytest.fixture
def cluster(queue_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """What a test starts, stopped at its end whatever happens."""
    made: dict[str, Any] = {"url": queue_url, "token": create_token(queue_url, "queue"), "workers": [], "servers": []}
    yield made
    for w in made["workers"]:
        w.close()
    for s in made["servers"]:
        s.stop()


def _worker(cluster: dict[str, Any], tmp_path: Path, n: int = 1, **settings: Any) -> Worker:
    w = Worker(cluster["url"], tmp_path / f"worker{len(cluster['workers'])}.log", n, **settings)
    cluster["workers"].append(w)
    return w


def _server(cluster: dict[str, Any], tmp_path: Path) -> Server:
    # Ready (/readyz) only once a queue worker is alive: start one first.
    s = start_server(cluster["url"], tmp_path / f"server{len(cluster['servers'])}.log", **QUEUE)
    cluster["servers"].append(s)
    return s


def _workers_alive(client: httpx.Client, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while client.get("/healthz").json()["queue"]["workers"] != n:
        assert time.monotonic() < deadline, f"{n} queue workers did not show up"
        time.sleep(0.1)


def _hard(name: str, seconds: float, seed: int = 0) -> dict[str, Any]:
    """A solve that runs for ``seconds`` (CP-SAT searches to its time limit)."""
    return plan_body(wide_graph(seed=seed, name=name), "8gpu-2hosts", wait=0, solver={"time_limit": seconds,
                                                                                       "seed": seed})


def test_replicas_share_jobs_cancel_any_and_never_fail_each_others(cluster: dict[str, Any], tmp_path: Path) -> None:
    worker = _worker(cluster, tmp_path, 2, log_format="json")
    a = _server(cluster, tmp_path)
    with a.client(cluster["token"]) as ca:
        doomed, busy = (ca.post("/v1/plans", json=_hard(name, 30, seed=seed)) for seed, name in enumerate("db"))
        assert doomed.status_code == busy.status_code == 202, doomed.text
        doomed, busy = doomed.json(), busy.json()
        for job in (doomed, busy):  # both solvers of the one worker
            running = wait_job(ca, job["url"], until=("running",))
            assert running["status"] == "running" and running["worker"] and running["attempts"] == 1

        b = _server(cluster, tmp_path)  # a second replica's start-up leaves A's running jobs alone
        with b.client(cluster["token"]) as cb:
            assert [cb.get(j["url"]).json()["status"] for j in (doomed, busy)] == ["running", "running"]
            same = cb.post("/v1/plans", json=_hard("d", 30, seed=0))  # identical request: the same job
            assert same.status_code == 202 and same.json()["id"] == doomed["id"]

            waits = cb.post("/v1/plans", json=_hard("waits", 30, seed=3)).json()
            assert waits["status"] == "queued"
            dropped = ca.post(f"{waits['url']}/cancel").json()  # cancelled before any worker took it
            assert dropped["status"] == "cancelled" and dropped["started_at"] is None, dropped

            cancelled = cb.post(f"{doomed['url']}/cancel")  # B cancels a running job A made
            assert cancelled.status_code == 200, cancelled.text
            assert cancelled.json()["status"] == "cancelled" and cancelled.json()["error_type"] == "Cancelled"
            assert cb.post(f"{doomed['url']}/cancel").status_code == 409  # ended
            assert ca.post(f"{busy['url']}/cancel").json()["status"] == "cancelled"

            short = cb.post("/v1/plans", json=_hard("short", 2)).json()  # made on B, done, read on A
            done = wait_job(ca, short["url"], timeout=60)
            assert done["status"] == "done" and done["attempts"] == 1, done
            assert ca.get(done["plan_url"]).json() == cb.get(done["plan_url"]).json()
            quick = ca.post("/v1/plans", json=plan_body(chain_graph(5, "quick"), wait=30),  # waits on A
                            headers={"X-Request-ID": "rid-quick"})
            assert quick.status_code == 201 and quick.headers["x-request-id"] == "rid-quick", quick.text
            health = cb.get("/healthz").json()
            assert health["workers"] is None and health["queue"]["workers"] == 1 and health["queue"]["queued"] == 0

            # A replica told to stop answers a request waiting for a job at once (202); the job goes on.
            answers: list[httpx.Response] = []
            body = {**_hard("outlives", 3, seed=4), "wait": 30}
            waiter = threading.Thread(target=lambda: answers.append(ca.post("/v1/plans", json=body)))
            waiter.start()
            deadline = time.monotonic() + 30
            while not [j for j in cb.get("/v1/jobs", params={"status": "running"}).json()["items"]]:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            a.process.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            waiter.join(30)
            assert answers[0].status_code == 202 and time.monotonic() - stopped < 5, answers[0].text
            assert a.process.wait(15) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has stopped
            assert wait_job(cb, answers[0].json()["url"])["status"] == "done"

    # The worker's own lines about a job are JSON and carry the request that made the job.
    entries = [json.loads(line) for line in worker.log.read_text().splitlines() if line.startswith("{")]
    mine = [e["message"] for e in entries if e.get("request_id") == "rid-quick"]
    assert any("claimed, attempt 1" in m for m in mine) and any(" done in " in m for m in mine), mine


def test_a_killed_worker_s_job_is_claimed_again_and_done_once(cluster: dict[str, Any], tmp_path: Path) -> None:
    workers = [_worker(cluster, tmp_path, 1), _worker(cluster, tmp_path, 1)]
    server = _server(cluster, tmp_path)
    with server.client(cluster["token"]) as c:
        _workers_alive(c, 2)
        job = c.post("/v1/plans", json=_hard("orphan", 3)).json()
        running = wait_job(c, job["url"], until=("running",))
        first, second = workers if running["worker"] == workers[0].name else workers[::-1]
        assert running["worker"] == first.name
        time.sleep(0.5)  # well into the solve
        first.kill()
        killed = time.monotonic()
        again = wait_job(c, job["url"], until=("running",), timeout=30)
        while again["worker"] != second.name and time.monotonic() - killed < 30:
            again = c.get(job["url"]).json()
            time.sleep(0.05)
        assert again["worker"] == second.name and again["attempts"] == 2, again
        assert time.monotonic() - killed >= 1.5  # not before the lease (2 s) ran out
        done = wait_job(c, job["url"], timeout=60)
        assert done["status"] == "done" and done["attempts"] == 2 and done["worker"] == second.name
        plans = c.get("/v1/plans", params={"model": "orphan"}).json()
        assert plans["total"] == 1 and plans["items"][0]["id"] == done["plan_id"]
        jobs = c.get("/v1/jobs").json()["items"]
        assert [j["id"] for j in jobs if j["status"] == "done"] == [job["id"]]  # one job, done once
    assert "given back to the queue" in second.log.read_text()


def test_solver_log_lines_are_json_and_carry_the_request_id(capfd: pytest.CaptureFixture[str]) -> None:
    """A solver process writes its lines in the server's format, with the request of its task (a queue
    worker's own lines: test_replicas_share_jobs…)."""
    done = threading.Event()
    pool = WorkerPool(1, 1, log_format="json")
    pool.start()
    try:  # a payload with neither graph nor zoo model: an internal error, logged with its traceback
        pool.submit(Task("broken-task", "plan", {}, 60.0, on_done=lambda _t, _o: done.set(), request_id="rid-solver"))
        assert done.wait(60)
    finally:
        pool.close()
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines() if "broken-task" in line]
    assert lines and lines[0]["request_id"] == "rid-solver" and lines[0]["level"] == "error"



def test_a_stopped_worker_finishes_or_hands_back_its_jobs(cluster: dict[str, Any], tmp_path: Path) -> None:
    hasty = _worker(cluster, tmp_path, 1, drain_timeout=0.5)
    server = _server(cluster, tmp_path)
    with server.client(cluster["token"]) as c:
        job = c.post("/v1/plans", json=_hard("handed", 2.5)).json()
        assert wait_job(c, job["url"], until=("running",))["worker"] == hasty.name
        took = hasty.stop()
        assert hasty.process.returncode == 0 and took < 4, took  # it did not wait for the solve
        back = c.get(job["url"]).json()
        assert back["status"] == "queued" and back["attempts"] == 0 and back["worker"] is None, back
        assert c.get("/readyz").status_code == 503  # no worker alive now

        patient = _worker(cluster, tmp_path, 1, drain_timeout=30)
        running = wait_job(c, job["url"], until=("running",), timeout=60)
        assert running["worker"] == patient.name and running["attempts"] == 1
        took = patient.stop()  # it takes no new job, and finishes this one before it exits
        assert patient.process.returncode == 0
        done = c.get(job["url"]).json()
        assert done["status"] == "done" and done["worker"] == patient.name and done["attempts"] == 1, done
        assert "handed back" in hasty.log.read_text()


def test_replicas_share_each_token_s_rate_limit(cluster: dict[str, Any], tmp_path: Path) -> None:
    _worker(cluster, tmp_path)
    limited = {**QUEUE, "rate_limit": 0.01, "rate_burst": 3}  # no refill within the test
    servers = [start_server(cluster["url"], tmp_path / f"limited{i}.log", **limited) for i in range(2)]
    cluster["servers"].extend(servers)
    with servers[0].client(cluster["token"]) as a, servers[1].client(cluster["token"]) as b:
        codes = [c.get("/v1/clusters").status_code for c in (a, b, a, b)]
        assert codes == [200, 200, 200, 429]  # one bucket of 3 for the token, whichever replica answers
        refused = b.get("/v1/clusters")
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
