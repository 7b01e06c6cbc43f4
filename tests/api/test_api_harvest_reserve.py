"""A reserved plan that borrows memory holds its lenders' memory on the cluster, in process (TestClient,
SQLite and PostgreSQL, a real solver worker, CP-SAT), until it is released or deleted.

The problem is ``tests/api/test_api_harvest.py``'s: four layers of 1 GB of weights planned on d0
(3.5 GB) alone, which keeps one layer and two staging buffers of 1 GB and borrows three layers' weights
(3 GB) from d1 (4 GB).  While that plan is reserved d1 offers 1 GB: too little for a second such plan
(or for a plan or a deployment that would put a layer on it), enough for one loan beside the host's
memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pipeplan.api.auth import create_token
from pipeplan.api.database import Database
from pipeplan.api.main import create_app
from pipeplan.api.schemas.clusters import ClusterPublic
from pipeplan.api.settings import Settings
from tests.api.test_api_harvest import GB, PAIR, body, heavy_chain


@pytest.fixture(scope="module")
def client(database_url: str) -> Iterator[TestClient]:
    db = Database(database_url)
    db.migrate()
    token = create_token(db, "lender")
    db.dispose()
    with TestClient(create_app(Settings(database_url=database_url, workers=1)),
                    headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def _register(client: TestClient) -> str:
    name = f"pair-{uuid.uuid4().hex[:8]}"  # the database is shared by the session's tests
    put = client.put(f"/v1/clusters/{name}", json={k: v for k, v in PAIR.items() if k != "name"})
    assert put.status_code == 201, put.text
    return name


def _on(cluster: str, request: dict[str, Any]) -> dict[str, Any]:
    return {**request, "cluster": cluster}


def _memory(client: TestClient, cluster: str) -> dict[str, tuple[int, list[dict[str, Any]]]]:
    """Each device's memory as plans see it, and what reserved plans hold there as lenders."""
    got = client.get(f"/v1/clusters/{cluster}")
    assert got.status_code == 200, got.text
    ClusterPublic.model_validate(got.json())
    return {d["id"]: (d["memory"], d["lent"]) for d in got.json()["devices"]}


def test_a_lenders_memory_is_held_until_the_plan_is_released_or_deleted(client: TestClient) -> None:
    cluster = _register(client)
    assert _memory(client, cluster) == {"d0": (int(3.5 * GB), []), "d1": (4 * GB, [])}
    made = client.post("/v1/plans", json=_on(cluster, body(harvest={}, reserve=True)))
    assert made.status_code == 201, made.text
    a = made.json()["id"]
    assert made.json()["reserved"] and made.json()["loads"] == {"d0": "compute"}
    # d1 holds no stage (no co-runner) but keeps 3 GB of weights for d0.
    assert _memory(client, cluster) == {"d0": (int(3.5 * GB), []), "d1": (GB, [{"plan_id": a, "bytes": 3 * GB}])}
    view = client.get(f"/v1/clusters/{cluster}").json()
    assert [d["reservations"] for d in view["devices"]] == [[{"plan_id": a, "kind": "compute"}], []]

    # A second plan of the same shape would need 3 GB of d1; 1 GB is left.
    second = _on(cluster, body("second", harvest={}))
    refused = client.post("/v1/plans", json=second)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["msg"].startswith(f"second does not fit on {cluster!r} even with harvesting")
    # Nor may a plan without harvesting put a layer there (a layer is 1 GB and 1000 bytes), and d0 holds
    # three at most.
    plain = _on(cluster, body("plain"))
    plain["options"]["forbid_devices"] = []
    refused = client.post("/v1/plans", json=plain)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["msg"].startswith(f"no plan of plain fits on {cluster!r}")

    released = client.post(f"/v1/plans/{a}/release")
    assert released.status_code == 200 and not released.json()["reserved"]
    assert _memory(client, cluster) == {"d0": (int(3.5 * GB), []), "d1": (4 * GB, [])}
    made_second = client.post("/v1/plans", json=second)
    assert made_second.status_code == 201, made_second.text
    assert sum(loan["bytes"] for loan in made_second.json()["plan"]["harvest"]["loans"]) == 3 * GB
    assert client.post("/v1/plans", json=plain).status_code == 201

    # The same request again, on the cluster as it was: the stored plan, reserved again, then deleted.
    again = client.post("/v1/plans", json=_on(cluster, body(harvest={}, reserve=True)))
    assert again.status_code == 200 and again.json()["id"] == a and again.json()["reserved"], again.text
    assert _memory(client, cluster)["d1"] == (GB, [{"plan_id": a, "bytes": 3 * GB}])
    assert client.delete(f"/v1/plans/{a}").status_code == 204
    assert _memory(client, cluster)["d1"] == (4 * GB, [])
    assert client.delete(f"/v1/clusters/{cluster}").status_code == 204  # no reservation is left behind


def test_a_loan_from_the_host_is_not_held_and_the_last_byte_of_a_lender_is_kept(client: TestClient) -> None:
    cluster = _register(client)
    a = client.post("/v1/plans", json=_on(cluster, body(harvest={}, reserve=True)))
    assert a.status_code == 201, a.text
    # With 10 ms of compute a layer the fetches set the bottleneck: d1's last GB (10 ms at 100 GB/s)
    # and two from the host (200 ms at 10 GB/s) beat three from the host (300 ms).
    host = {"host_memory": "8GB", "host_bandwidth": "10GB/s", "host_latency": "0s"}
    b = client.post("/v1/plans", json=_on(cluster, body("tiers", 10**7, harvest=host, reserve=True)))
    assert b.status_code == 201, b.text
    lent: dict[str, int] = {}
    for loan in b.json()["plan"]["harvest"]["loans"]:
        lent[loan["lender"]] = lent.get(loan["lender"], 0) + loan["bytes"]
    assert lent == {"d1": GB, "host:host0": 2 * GB}
    assert b.json()["plan"]["bottleneck"] == pytest.approx(0.21)
    # The host's memory is no device's: only d1's share is held.  Every byte of d1 is lent out; a device
    # keeps one byte, its memory being positive, so that nothing fits there.
    ids = (a.json()["id"], b.json()["id"])
    assert _memory(client, cluster) == {
        "d0": (int(3.5 * GB), []), "d1": (1, [{"plan_id": ids[0], "bytes": 3 * GB}, {"plan_id": ids[1], "bytes": GB}])}
    for plan in ids:
        assert client.delete(f"/v1/plans/{plan}").status_code == 204
    assert _memory(client, cluster)["d1"] == (4 * GB, [])


def test_a_deployment_is_placed_against_the_memory_lenders_hold(client: TestClient) -> None:
    cluster = _register(client)
    a = client.post("/v1/plans", json=_on(cluster, body(harvest={}, reserve=True)))
    assert a.status_code == 201, a.text
    # Four layers of 1 GB over d0 and d1, which offer 3.5 GB and, while a is reserved, 1 GB.
    deployment = {"model": {"graph": heavy_chain("deployed", 10**8)}, "cluster": cluster, "horizon": "10m",
                  "options": {"microbatches": 1, "memory_margin": 0.0}, "solver": {"time_limit": 5}, "wait": 30}
    refused = client.post("/v1/deployments", json=deployment)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["msg"].startswith(f"no plan of deployed fits on {cluster!r}")
    assert client.post(f"/v1/plans/{a.json()['id']}/release").status_code == 200
    placed = client.post("/v1/deployments", json=deployment)
    assert placed.status_code == 201 and placed.json()["status"] == "serving", placed.text
    assert placed.json()["bottleneck"] == pytest.approx(0.20001, rel=1e-12)  # two layers a device
    assert client.delete(placed.json()["url"]).status_code == 200
