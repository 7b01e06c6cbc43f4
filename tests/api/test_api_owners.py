"""Tokens with owners and scopes: writes limited to what the token's owner made (unless admin),
scopes checked before the body, revocation at once; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.api.api_factories import chain_graph, cluster_spec, plan_body, wide_graph
from tests.api.api_server import Server, cli, create_token


@pytest.fixture(scope="module")
def people(server: Server) -> dict[str, str]:
    """Tokens of two owners, a read-only one and an admin."""
    url = server.database_url
    return {"ana": create_token(url, "ana"), "bo": create_token(url, "bo"),
            "reader": create_token(url, "reader", scopes="read"),
            "root": create_token(url, "root", owner="ops", scopes="admin")}


@pytest.fixture
def as_(server: Server, people: dict[str, str]) -> Iterator[dict[str, httpx.Client]]:
    clients = {who: server.client(token) for who, token in people.items()}
    yield clients
    for c in clients.values():
        c.close()


def test_a_read_token_reads_and_predicts_but_cannot_write(as_: dict[str, httpx.Client]) -> None:
    reader = as_["reader"]
    refused = reader.post("/v1/plans", content=b"{broken", headers={"content-type": "application/json"})
    assert refused.status_code == 403, refused.text  # the scope is checked before the body is read
    item = refused.json()["detail"][0]
    assert item["type"] == "forbidden" and item["loc"] == ["header", "Authorization"] and "'plan' scope" in item["msg"]
    assert 'insufficient_scope' in refused.headers["www-authenticate"]
    assert reader.put("/v1/clusters/read-only", json=cluster_spec(2)).status_code == 403
    assert reader.get("/v1/plans").status_code == 200
    predicted = reader.post("/v1/costmodel/predict", json={"layers": chain_graph(2)["layers"], "cluster": "local-cpu"})
    assert predicted.status_code == 200, predicted.text


def test_only_the_owner_or_an_admin_changes_a_plan(as_: dict[str, httpx.Client]) -> None:
    made = as_["ana"].post("/v1/plans", json=plan_body(chain_graph(4, "owned"), reserve=False))
    assert made.status_code == 201 and made.json()["owner"] == "ana"
    url = made.json()["url"]
    for attempt in (as_["bo"].delete(url), as_["bo"].post(f"{url}/release")):
        assert attempt.status_code == 403
        assert attempt.json()["detail"][0]["msg"] == (f"plan {made.json()['id']} belongs to 'ana'; only its owner "
                                                      "or an admin token may change it")
    assert as_["bo"].get(url).status_code == 200  # reading is not changing
    assert as_["ana"].post(f"{url}/release").status_code == 200
    assert as_["root"].delete(url).status_code == 204  # an admin may
    again = as_["bo"].post("/v1/plans", json=plan_body(chain_graph(4, "owned")))
    assert again.status_code == 201 and again.json()["owner"] == "bo"
    assert as_["bo"].delete(again.json()["url"]).status_code == 204


def test_only_the_owner_or_an_admin_changes_a_cluster(as_: dict[str, httpx.Client]) -> None:
    assert as_["ana"].put("/v1/clusters/anas", json=cluster_spec(2)).status_code == 201
    load = {"load": {"corunners": 1, "kind": "compute"}}
    for attempt in (as_["bo"].put("/v1/clusters/anas", json=cluster_spec(3)),
                    as_["bo"].patch("/v1/clusters/anas/devices/gpu0", json=load),
                    as_["bo"].delete("/v1/clusters/anas")):
        assert attempt.status_code == 403 and attempt.json()["detail"][0]["loc"] == ["path", "name"]
    assert len(as_["bo"].get("/v1/clusters/anas").json()["devices"]) == 2  # nothing changed
    assert as_["root"].patch("/v1/clusters/anas/devices/gpu0", json=load).status_code == 200
    assert as_["ana"].put("/v1/clusters/anas", json=cluster_spec(3)).status_code == 200
    assert as_["ana"].delete("/v1/clusters/anas").status_code == 204
    assert as_["bo"].put("/v1/clusters/anas", json=cluster_spec(2)).status_code == 201  # free again: bo's now
    assert as_["bo"].delete("/v1/clusters/anas").status_code == 204


def test_only_the_owner_or_an_admin_cancels_a_job(as_: dict[str, httpx.Client]) -> None:
    body = plan_body(wide_graph(seed=7, name="owned-job"), "8gpu-2hosts", wait=0, solver={"time_limit": 20})
    job = as_["ana"].post("/v1/plans", json=body)
    assert job.status_code == 202 and job.json()["owner"] == "ana"
    assert as_["bo"].post(f"{job.json()['url']}/cancel").status_code == 403
    cancelled = as_["ana"].post(f"{job.json()['url']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"


def test_a_revoked_token_is_refused_at_once(server: Server) -> None:
    url = server.database_url
    token = create_token(url, "short-lived")
    with server.client(token) as c:
        assert c.post("/v1/plans", json=plan_body(chain_graph(3, "revoked"))).status_code == 201
        done = cli(url, "token", "revoke", "short-lived", module="pipeplan.api")
        assert done.returncode == 0 and "revoked token" in done.stdout, done.stderr
        refused = c.post("/v1/plans", json=plan_body(chain_graph(3, "revoked")))
        assert refused.status_code == 401 and "revoked" in refused.json()["detail"][0]["msg"]
    if not url.startswith("sqlite"):
        return  # the commands are the same on both databases; once is enough
    listed = cli(url, "token", "list", "--json", module="pipeplan.api")
    assert listed.returncode == 0, listed.stderr
    mine = [t for t in json.loads(listed.stdout) if t["name"] == "short-lived"]
    assert len(mine) == 1 and mine[0]["revoked_at"] is not None and mine[0]["scopes"] == ["read", "plan"]
    again = cli(url, "token", "revoke", "short-lived", module="pipeplan.api")
    assert again.returncode == 2 and "no unrevoked token" in again.stderr
