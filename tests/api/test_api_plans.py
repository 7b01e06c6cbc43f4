"""Plans over HTTP against a real server process, on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from pipeplan.api.schemas.jobs import JobPublic
from pipeplan.api.schemas.plans import PlanPublic
from tests.api.api_factories import chain_graph, plan_body, wide_graph
from tests.api.api_server import wait_job


def test_create_get_list_delete(client: httpx.Client) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    made = client.post("/v1/plans", json=plan_body(chain_graph(6, "lifecycle")))
    assert made.status_code == 201, made.text
    plan = made.json()
    assert made.headers["location"] == plan["url"] == f"/v1/plans/{plan['id']}"
    assert plan["model"] == "lifecycle" and plan["cluster"] == "hetero-a100-t4" and not plan["cached"]
    doc = plan["plan"]
    assert doc["format"] == "pipeplan.plan" and doc["certificate"]["method"] == "ilp"
    assert doc["certificate"]["solver"]["tick_seconds"] > 0  # the typed solver details reach clients
    assert sorted(layer for s in doc["stages"] for layer in s["layers"]) == sorted(f"l{i}" for i in range(6))

    got = client.get(plan["url"])
    assert got.status_code == 200 and got.json() == plan
    PlanPublic.model_validate(got.json())  # the answer is what the OpenAPI schema says

    again = client.post("/v1/plans", json=plan_body(chain_graph(6, "lifecycle")))
    assert again.status_code == 200 and again.json()["id"] == plan["id"] and again.json()["cached"]

    other = client.post("/v1/plans", json=plan_body(chain_graph(6, "lifecycle"), options={"microbatches": 8}))
    assert other.status_code == 201 and other.json()["id"] != plan["id"]

    listed = client.get("/v1/plans", params={"model": "lifecycle", "since": before.isoformat()}).json()
    assert listed["total"] == 2 and {p["id"] for p in listed["items"]} == {plan["id"], other.json()["id"]}
    assert listed["items"][0]["id"] == other.json()["id"]  # newest first
    page = client.get("/v1/plans", params={"model": "lifecycle", "limit": 1}).json()
    assert len(page["items"]) == 1 and page["next"] is not None
    second = client.get(page["next"]).json()
    assert second["items"][0]["id"] == plan["id"] and second["next"] is None
    assert client.get("/v1/plans", params={"model": "lifecycle", "cluster": "local-cpu"}).json()["total"] == 0
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert client.get("/v1/plans", params={"model": "lifecycle", "since": future}).json()["total"] == 0

    assert client.delete(plan["url"]).status_code == 204
    assert client.get(plan["url"]).status_code == 404
    assert client.delete(plan["url"]).status_code == 404
    resolved = client.post("/v1/plans", json=plan_body(chain_graph(6, "lifecycle")))
    assert resolved.status_code == 201 and resolved.json()["id"] != plan["id"]  # solved again


def test_slow_solve_answers_202_with_a_job(client: httpx.Client) -> None:
    # A solve that takes its whole second: with wait=0 an instant one could still race the answer.
    body = plan_body(wide_graph(name="async"), "8gpu-2hosts", wait=0, solver={"time_limit": 1})
    accepted = client.post("/v1/plans", json=body)
    assert accepted.status_code == 202, accepted.text
    job = accepted.json()
    assert accepted.headers["location"] == job["url"] and job["kind"] == "plan"
    assert job["status"] in ("queued", "running")
    done = wait_job(client, job["url"])
    assert done["status"] == "done" and done["error"] is None and done["worker_pid"] > 0
    JobPublic.model_validate(done)
    plan = client.get(done["plan_url"]).json()
    assert plan["model"] == "async"
    # The same request now has a stored answer.
    assert client.post("/v1/plans", json=body).json()["id"] == plan["id"]


def test_compare_puts_the_ilp_beside_the_baselines(client: httpx.Client) -> None:
    body = plan_body(chain_graph(8, "cmp"), "4xa100-nvlink")
    answer = client.post("/v1/plans/compare", json=body)
    assert answer.status_code == 200, answer.text
    comparison = answer.json()["comparison"]
    methods = [row["method"] for row in comparison["plans"]]
    assert methods[0] == "ilp" and {"uniform", "param-balanced", "time-balanced", "chain-dp"} <= set(methods)
    ilp = comparison["plans"][0]
    assert ilp["objective_vs_ilp"] == 1.0
    assert all(row["objective_vs_ilp"] >= 1.0 - 1e-9 for row in comparison["plans"])  # never worse than a baseline
    assert comparison["lower_bound"] <= ilp["plan"]["bottleneck"]
    cached = client.post("/v1/plans/compare", json=body).json()
    assert cached["cached"] and cached["comparison"] == comparison
    job = client.get(f"/v1/jobs/{answer.json()['job_id']}").json()
    assert job["kind"] == "compare" and job["status"] == "done" and job["result"] == comparison


def test_planner_errors_are_422_naming_the_field(client: httpx.Client) -> None:
    cyclic = chain_graph(3, "cyclic")
    cyclic["edges"].append({"src": "l2", "dst": "l0", "bytes": 1})
    answer = client.post("/v1/plans", json=plan_body(cyclic))
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "model", "graph"]
    assert "l2 -> l0" in answer.json()["detail"][0]["msg"]

    unknown = client.post("/v1/plans", json=plan_body(cluster="no-such-cluster"))
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == ["body", "cluster"]
    assert "hetero-a100-t4" in unknown.json()["detail"][0]["msg"]  # lists what exists

    uncovered = {"name": "gap", "devices": [
        {"id": "a", "memory": "1GiB", "peak_flops": 1e12, "mem_bandwidth": 1e11},
        {"id": "b", "host": "other", "memory": "1GiB", "peak_flops": 1e12, "mem_bandwidth": 1e11}]}
    answer = client.post("/v1/plans", json=plan_body(cluster=uncovered))
    assert answer.status_code == 422 and "no link between a and b" in answer.json()["detail"][0]["msg"]

    tiny = {"name": "tiny", "devices": [{"id": "d0", "memory": 1024, "peak_flops": 1e12, "mem_bandwidth": 1e11}]}
    answer = client.post("/v1/plans", json=plan_body(cluster=tiny))
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["body", "options"]
    assert "short" in answer.json()["detail"][0]["msg"]

    answer = client.post("/v1/plans", json=plan_body(options={"objective": "speed"}))
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"][:3] == ["body", "options", "objective"]
    answer = client.post("/v1/plans", json=plan_body(options={"max_devices": 9}))
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["body", "options", "max_devices"]
    answer = client.post("/v1/plans", json=plan_body(reserve=True))
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["body", "reserve"]
    answer = client.post("/v1/plans", json=plan_body(costmodel="../../etc/passwd"))
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"][:2] == ["body", "costmodel"]
    answer = client.post("/v1/plans", json=plan_body(costmodel="learned.pkl"))
    assert answer.status_code == 422 and "only 'analytic'" in answer.json()["detail"][0]["msg"]
    answer = client.post("/v1/plans", content=b"{not json", headers={"content-type": "application/json"})
    assert answer.status_code == 422
    assert client.post("/v1/plans", json=plan_body(typo=1)).json()["detail"][0]["loc"] == ["body", "typo"]


def test_sizes_beyond_the_planners_range_are_422(client: httpx.Client) -> None:
    huge = chain_graph(3, "huge")
    huge["layers"][1]["param_bytes"] = 10**30
    answer = client.post("/v1/plans", json=plan_body(huge))
    assert answer.status_code == 422 and "param_bytes" in answer.json()["detail"][0]["msg"]
    big_memory = {"name": "big", "devices": [{"id": "d0", "memory": 10**40, "peak_flops": 1e12,
                                              "mem_bandwidth": 1e11}]}
    answer = client.post("/v1/plans", json=plan_body(cluster=big_memory))
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "cluster", "devices", 0, "memory"]
    layers = chain_graph(2)["layers"]
    layers[0]["flops"] = 10**400
    answer = client.post("/v1/costmodel/predict", json={"layers": layers, "cluster": "local-cpu"})
    assert answer.status_code == 422 and "flops" in answer.json()["detail"][0]["msg"]


def test_the_shipped_learned_cost_model_can_be_named(client: httpx.Client) -> None:
    """`learned` plans with the contention-aware model shipped in costmodel/data: a different plan key.
    (``wait=60``: a worker loads each model on first use, which under load outlasted the default wait.)"""
    analytic = client.post("/v1/plans", json=plan_body(chain_graph(5, "learned-cm"), cluster="local-cpu", wait=60))
    learned = client.post("/v1/plans", json=plan_body(chain_graph(5, "learned-cm"), cluster="local-cpu", wait=60,
                                                      costmodel="learned"))
    assert analytic.status_code == 201 and learned.status_code == 201, learned.text
    assert learned.json()["id"] != analytic.json()["id"]
    assert learned.json()["plan"]["costmodel"] == "learned" and analytic.json()["plan"]["costmodel"] == "analytic"
    # Each CPU's shipped model by name; an unknown one is a 422 that lists the names.
    xeon = client.post("/v1/plans", json=plan_body(chain_graph(5, "learned-cm"), cluster="local-cpu", wait=60,
                                                   costmodel="learned-xeon"))
    epyc = client.post("/v1/plans", json=plan_body(chain_graph(5, "learned-cm"), cluster="local-cpu", wait=60,
                                                   costmodel="learned-epyc"))
    assert xeon.status_code == 201 and epyc.status_code == 201, epyc.text
    assert len({xeon.json()["id"], epyc.json()["id"], analytic.json()["id"]}) == 3
    bogus = client.post("/v1/plans", json=plan_body(chain_graph(5, "learned-cm"), cluster="local-cpu", wait=60,
                                                    costmodel="learned-bogus"))
    assert bogus.status_code == 422
    assert "'learned-xeon', 'learned-epyc'" in bogus.json()["detail"][0]["msg"]
