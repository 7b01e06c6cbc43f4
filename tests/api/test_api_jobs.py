"""Jobs over HTTP: the list with its filters and pages, and cancelling; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import httpx

from pipeplan.api.schemas.jobs import JobList, JobPublic
from tests.api.api_factories import chain_graph, plan_body, wide_graph
from tests.api.api_server import Server, wait_job


def test_jobs_are_listed_newest_first_with_filters_and_pages(client: httpx.Client) -> None:
    # the server stamps a job with this machine's clock as it takes the request: no margin, or the jobs
    # the tests before this one made a moment ago are counted too
    since = datetime.now(UTC)
    made = [client.post("/v1/plans", json=plan_body(chain_graph(4, f"listed-{i}"))) for i in range(3)]
    assert [m.status_code for m in made] == [201, 201, 201]
    failed = client.post("/v1/plans", json=plan_body(chain_graph(4, "listed-bad"), cluster={
        "name": "tiny", "devices": [{"id": "d0", "memory": 1024, "peak_flops": 1e12, "mem_bandwidth": 1e11}]}))
    assert failed.status_code == 422  # a job that failed: the planner refused the problem

    listed = client.get("/v1/jobs", params={"since": since.isoformat()})
    assert listed.status_code == 200
    page = JobList.model_validate(listed.json())
    assert page.total == 4 and [j.status for j in page.items] == ["failed", "done", "done", "done"]
    assert page.items[0].error_type == "PlanError" and page.items[1].plan_url == made[2].headers["location"]
    assert "result" not in listed.json()["items"][0]  # lists leave a comparison's result out

    done = client.get("/v1/jobs", params={"since": since.isoformat(), "status": "done", "limit": 2}).json()
    assert done["total"] == 3 and len(done["items"]) == 2 and done["offset"] == 0
    assert done["next"].startswith("/v1/jobs?")  # a path: no PIPEPLAN_PUBLIC_URL on this server
    rest = client.get(done["next"]).json()
    assert [j["plan_url"] for j in rest["items"]] == [made[0].headers["location"]] and rest["next"] is None
    assert client.get("/v1/jobs", params={"since": since.isoformat(), "kind": "compare"}).json()["total"] == 0
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert client.get("/v1/jobs", params={"since": later}).json() == {"items": [], "total": 0, "limit": 50,
                                                                      "offset": 0, "next": None}
    for bad in ({"status": "sleeping"}, {"since": "2026-01-01T00:00:00"}, {"limit": 0}, {"kind": "x"}):
        answer = client.get("/v1/jobs", params=bad)
        assert answer.status_code == 422 and answer.json()["detail"][0]["loc"][0] == "query", bad


def test_links_ignore_the_host_header(client: httpx.Client) -> None:
    for i in range(2):
        client.post("/v1/plans", json=plan_body(chain_graph(4, "hosted")))
        client.post("/v1/plans", json=plan_body(chain_graph(4, "hosted"), options={"microbatches": 2 + i}))
    answer = client.get("/v1/plans", params={"model": "hosted", "limit": 1}, headers={"Host": "evil.example"})
    assert answer.json()["next"] == "/v1/plans?model=hosted&limit=1&offset=1"


def test_cancel_a_queued_and_a_running_job(client: httpx.Client, anonymous: httpx.Client, server: Server) -> None:
    # Two hard solves hold both workers (SERVER_SETTINGS); a third job waits in the queue.
    hard = [client.post("/v1/plans", json=plan_body(wide_graph(seed=s, name=f"cancel-{s}"), "8gpu-2hosts", wait=0,
                                                     solver={"time_limit": 2, "seed": s})) for s in range(2)]
    urls = [h.json()["url"] for h in hard]
    assert [h.status_code for h in hard] == [202, 202]
    running = [wait_job(client, url, until=("running",)) for url in urls]
    waiting = client.post("/v1/plans", json=plan_body(chain_graph(5, "cancel-queued"), wait=0))
    assert waiting.status_code == 202 and waiting.json()["status"] == "queued"

    assert anonymous.post(f"{waiting.json()['url']}/cancel").status_code == 401
    cancelled = client.post(f"{waiting.json()['url']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    job = JobPublic.model_validate(cancelled.json())
    assert job.status == "cancelled" and job.error_type == "Cancelled" and job.started_at is None

    # A request waiting for a running job hears of the cancel: 409, naming the job.
    answers: list[httpx.Response] = []
    same = plan_body(wide_graph(seed=0, name="cancel-0"), "8gpu-2hosts", wait=20, solver={"time_limit": 2, "seed": 0})
    waiter = threading.Thread(target=lambda: answers.append(client.post("/v1/plans", json=same)))
    waiter.start()
    time.sleep(0.5)  # it attaches to the running job within milliseconds
    stopped = client.post(f"{urls[0]}/cancel")
    waiter.join(30)
    assert stopped.status_code == 200 and stopped.json()["status"] == "cancelled"
    assert stopped.json()["worker_pid"] == running[0]["worker_pid"]
    assert answers[0].status_code == 409, answers[0].text
    assert answers[0].json()["detail"][0]["type"] == "cancelled" and answers[0].json()["job"] == urls[0]

    again = client.post(f"{urls[0]}/cancel")
    assert again.status_code == 409 and "cancelled" in again.json()["detail"][0]["msg"]
    assert client.post("/v1/jobs/no-such-job/cancel").status_code == 404
    assert wait_job(client, urls[1])["status"] == "done"  # the other solve was left alone
    listed = client.get("/v1/jobs", params={"status": "cancelled"}).json()
    assert {urls[0], waiting.json()["url"]} <= {j["url"] for j in listed["items"]}
    health = client.get("/healthz").json()
    assert health["workers"]["alive"] == 2  # the stopped worker was replaced
    assert client.post("/v1/plans", json=plan_body(chain_graph(5, "cancel-queued"))).status_code == 201
