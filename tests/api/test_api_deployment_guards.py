"""A deployment's plan and loads, guarded from the routes that are not the deployment's: releasing or
deleting its current plan through ``/v1/plans`` is a 409 naming the deployment (nothing changes), and
``PATCH …/devices/{id}`` on a cluster with deployments serving re-evaluates them as ``POST …/loads`` does.

In process (TestClient), on a real database (SQLite and PostgreSQL), with real worker processes and
CP-SAT: the scene of ``test_api_deployments.py``, an 8-layer chain split over two identical GPUs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pipeplan.api.auth import create_token
from pipeplan.api.database import Database
from pipeplan.api.main import create_app
from pipeplan.api.settings import Settings
from tests.api.api_factories import chain_graph, cluster_spec, plan_body


@pytest.fixture(scope="module")
def client(database_url: str) -> Iterator[TestClient]:
    db = Database(database_url)
    db.migrate()
    token = create_token(db, f"guards-{uuid.uuid4().hex[:6]}")
    db.dispose()
    with TestClient(create_app(Settings(database_url=database_url, workers=1, sync_wait=30)),
                    headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def _cluster(client: TestClient) -> str:
    name = f"guard-{uuid.uuid4().hex[:8]}"
    assert client.put(f"/v1/clusters/{name}", json=cluster_spec(2)).status_code == 201
    return name


def _deploy(client: TestClient, cluster: str) -> dict[str, Any]:
    made = client.post("/v1/deployments", json={
        "model": {"graph": chain_graph(8, "a")}, "cluster": cluster, "horizon": "10m",
        "options": {"microbatches": 4}, "solver": {"time_limit": 2}, "wait": 60})
    assert made.status_code == 201, made.text
    return dict(made.json())


def _decision(client: TestClient, url: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        found = client.get(url).json()
        if found["status"] != "pending" or time.monotonic() > deadline:
            return dict(found)
        time.sleep(0.1)


def test_a_deployments_plan_cannot_be_released_or_deleted_through_plans(client: TestClient) -> None:
    name = _cluster(client)
    dep = _deploy(client, name)
    plan_url = dep["plan_url"]
    cluster_before, plan_before = client.get(f"/v1/clusters/{name}").json(), client.get(plan_url).json()
    assert plan_before["reserved"]

    for refused in (client.post(f"{plan_url}/release"), client.delete(plan_url)):
        assert refused.status_code == 409, refused.text
        body = refused.json()
        detail = body["detail"][0]
        assert detail["type"] == "conflict" and detail["loc"] == ["path", "plan_id"]
        assert f"deployment {dep['id']}" in detail["msg"] and "Stop the deployment instead" in detail["msg"]
        assert body["deployment"] == dep["url"]
    # Nothing stored changed: the plan, its reservation, the cluster's revision, the deployment.
    assert client.get(plan_url).json() == plan_before
    assert client.get(f"/v1/clusters/{name}").json() == cluster_before
    assert client.get(dep["url"]).json()["status"] == "serving"

    # A plain reserved plan on the same cluster is released as before.
    plain = client.post("/v1/plans", json=plan_body(chain_graph(4, "plain"), name, reserve=True, wait=60))
    assert plain.status_code == 201, plain.text
    released = client.post(f"{plain.json()['url']}/release")
    assert released.status_code == 200 and not released.json()["reserved"]
    assert client.delete(plain.json()["url"]).status_code == 204

    # Stopped, the deployment no longer holds its plan: the plan (released) may go.
    assert client.delete(dep["url"]).status_code == 200
    assert client.delete(plan_url).status_code == 204
    assert client.get(plan_url).status_code == 404


def test_patching_a_device_load_re_evaluates_the_deployments(client: TestClient) -> None:
    name = _cluster(client)
    dep = _deploy(client, name)
    decisions = client.get(f"/v1/clusters/{name}/decisions").json()["total"]

    patched = client.patch(f"/v1/clusters/{name}/devices/gpu1", json={"load": {"corunners": 3}})
    assert patched.status_code == 200, patched.text  # sync_wait 30 s: the decision is made by then
    view = patched.json()
    assert view["devices"][1]["base_load"]["corunners"] == 3 and view["name"] == name  # a cluster, as before
    decision = client.get(patched.headers["location"]).json()
    assert decision["trigger"] == "load" and decision["status"] == "done", decision
    assert decision["request"]["devices"] == {"gpu1": {"before": view["devices"][0]["base_load"],
                                                       "after": view["devices"][1]["base_load"]}}
    assert decision["considered"] == [dep["id"]]  # it has a stage on gpu1
    entry = next(e for e in decision["entries"] if e["deployment"] == dep["id"])
    assert entry["action"] in ("replanned", "declined") and entry["bottleneck_after"] > entry["bottleneck_before"]
    now = client.get(dep["url"]).json()
    assert now["bottleneck"] == pytest.approx(entry["bottleneck_after"])
    # The answer is the cluster after the decision: the deployment's current plan holds its load.
    held = {r["plan_id"] for d in view["devices"] for r in d["reservations"]}
    assert held == {now["plan_id"]}
    assert client.get(f"/v1/clusters/{name}/decisions").json()["total"] == decisions + 1

    # A device the cluster lacks is a 404, and writes no load and no decision.
    revision = client.get(f"/v1/clusters/{name}").json()["revision"]
    missing = client.patch(f"/v1/clusters/{name}/devices/gpu9", json={"load": {"corunners": 1}})
    assert missing.status_code == 404, missing.text
    assert client.get(f"/v1/clusters/{name}").json()["revision"] == revision
    assert client.get(f"/v1/clusters/{name}/decisions").json()["total"] == decisions + 1
    assert client.delete(dep["url"]).status_code == 200
    _decision(client, client.get(dep["url"]).json()["last_decision"])


def test_patching_a_cluster_without_deployments_only_sets_the_load(client: TestClient) -> None:
    name = _cluster(client)
    patched = client.patch(f"/v1/clusters/{name}/devices/gpu0", json={"load": {"corunners": 2, "kind": "memory"}})
    assert patched.status_code == 200 and "location" not in patched.headers
    assert patched.json()["devices"][0]["base_load"]["corunners"] == 2
    assert client.get(f"/v1/clusters/{name}/decisions").json()["total"] == 0


def test_a_patch_whose_decision_outlasts_the_wait_is_a_202_naming_it(database_url: str) -> None:
    if not database_url.startswith("sqlite"):
        pytest.skip("the answer's timing does not depend on the database; once is enough")
    db = Database(database_url)
    token = create_token(db, f"guards-{uuid.uuid4().hex[:6]}")
    db.dispose()
    with TestClient(create_app(Settings(database_url=database_url, workers=1, sync_wait=0)),
                    headers={"Authorization": f"Bearer {token}"}) as client:
        name = _cluster(client)
        dep = _deploy(client, name)
        patched = client.patch(f"/v1/clusters/{name}/devices/gpu0", json={"load": {"corunners": 2}})
        assert patched.status_code == 202, patched.text
        assert patched.json()["devices"][0]["base_load"]["corunners"] == 2  # the cluster as the load left it
        decision = _decision(client, patched.headers["location"])
        assert decision["trigger"] == "load" and decision["status"] == "done"
        assert decision["considered"] == [dep["id"]]
        assert client.delete(dep["url"]).status_code == 200
        _decision(client, client.get(dep["url"]).json()["last_decision"])
