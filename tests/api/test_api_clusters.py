"""The cluster registry and reservations against a real server, on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid

import httpx

from tests.api.api_factories import chain_graph, cluster_spec, plan_body


def _name() -> str:
    return f"lab-{uuid.uuid4().hex[:8]}"


def test_register_read_patch_delete(client: httpx.Client) -> None:
    name = _name()
    made = client.put(f"/v1/clusters/{name}", json=cluster_spec(3))
    assert made.status_code == 201, made.text
    view = made.json()
    assert view["name"] == name and view["revision"] == 1 and not view["builtin"]
    assert [d["id"] for d in view["devices"]] == ["gpu0", "gpu1", "gpu2"]
    assert len(view["spec"]["links"]) == 3  # every pair spelled out

    patched = client.patch(f"/v1/clusters/{name}/devices/gpu1", json={"load": {"corunners": 2, "kind": "memory"}})
    assert patched.status_code == 200 and patched.json()["revision"] == 2
    assert patched.json()["devices"][1]["load"] == {"corunners": 2, "kind": "memory", "utilization": None, "duty": 1.0}
    assert client.get(f"/v1/clusters/{name}").json()["devices"][1]["base_load"]["corunners"] == 2

    replaced = client.put(f"/v1/clusters/{name}", json=cluster_spec(2, name=name))
    assert replaced.status_code == 200 and replaced.json()["revision"] == 3
    listed = client.get("/v1/clusters").json()["items"]
    assert {"name": name, "url": f"/v1/clusters/{name}", "builtin": False, "devices": 2, "revision": 3} in listed
    assert any(c["name"] == "hetero-a100-t4" and c["builtin"] for c in listed)

    assert client.patch(f"/v1/clusters/{name}/devices/gpu9", json={"load": {"corunners": 1}}).status_code == 404
    assert client.put(f"/v1/clusters/{name}", json=cluster_spec(2, name="other")).status_code == 422
    assert client.delete(f"/v1/clusters/{name}").status_code == 204
    assert client.get(f"/v1/clusters/{name}").status_code == 404
    assert client.get("/v1/clusters/hetero-a100-t4").json()["builtin"]
    assert client.patch("/v1/clusters/hetero-a100-t4/devices/gpu0", json={"load": {}}).status_code == 404


def test_a_reservation_changes_later_plans_until_released(client: httpx.Client) -> None:
    name = _name()
    assert client.put(f"/v1/clusters/{name}", json=cluster_spec(4)).status_code == 201
    graph = chain_graph(8, "reserve")
    first = client.post("/v1/plans", json=plan_body(graph, name, reserve=True))
    assert first.status_code == 201, first.text
    reserved = first.json()
    assert reserved["reserved"] and reserved["registered_cluster"] and reserved["cluster_revision"] == 1
    used = {s["device"] for s in reserved["plan"]["stages"]}
    assert used and set(reserved["loads"]) == used

    view = client.get(f"/v1/clusters/{name}").json()
    assert view["revision"] == 2
    for device in view["devices"]:
        mine = [{"plan_id": reserved["id"], "kind": reserved["loads"].get(device["id"])}]
        assert (device["reservations"] == mine) == (device["id"] in used)
        assert (device["load"]["corunners"] == 1) == (device["id"] in used)
        assert device["base_load"]["corunners"] == 0

    # The same request now sees busy devices: a new plan, slower than the first.
    later = client.post("/v1/plans", json=plan_body(graph, name))
    assert later.status_code == 201, later.text
    assert later.json()["id"] != reserved["id"] and not later.json()["reserved"]
    assert later.json()["plan"]["bottleneck"] > reserved["plan"]["bottleneck"] * 1.2

    released = client.post(f"{reserved['url']}/release")
    assert released.status_code == 200 and not released.json()["reserved"] and released.json()["released_at"]
    view = client.get(f"/v1/clusters/{name}").json()
    assert all(d["reservations"] == [] and d["load"]["corunners"] == 0 for d in view["devices"])

    # Idle again: the first plan is the stored answer, and reserving it again records its load again.
    again = client.post("/v1/plans", json=plan_body(graph, name, reserve=True))
    assert again.status_code == 200 and again.json()["id"] == reserved["id"] and again.json()["reserved"]
    assert client.delete(f"/v1/clusters/{name}").status_code == 409  # still held
    assert client.delete(reserved["url"]).status_code == 204  # deleting releases
    view = client.get(f"/v1/clusters/{name}").json()
    assert all(d["reservations"] == [] for d in view["devices"])
    assert client.delete(f"/v1/clusters/{name}").status_code == 204


def test_a_busy_device_steers_the_plan(client: httpx.Client) -> None:
    name = _name()
    client.put(f"/v1/clusters/{name}", json=cluster_spec(2))
    graph = chain_graph(6, "steer")
    idle = client.post("/v1/plans", json=plan_body(graph, name)).json()
    client.patch(f"/v1/clusters/{name}/devices/gpu0", json={"load": {"corunners": 8, "kind": "mixed"}})
    busy = client.post("/v1/plans", json=plan_body(graph, name)).json()
    assert busy["id"] != idle["id"] and busy["cluster_revision"] == 2

    def share(plan: dict, device: str) -> int:
        return sum(len(s["layers"]) for s in plan["plan"]["stages"] if s["device"] == device)

    assert share(busy, "gpu0") < share(idle, "gpu0")


def test_a_cluster_registered_again_under_its_name_is_the_new_one(client: httpx.Client) -> None:
    # Both registrations are revision 1: what the service remembers of the first must not answer for the second.
    assert client.put("/v1/clusters/reborn", json=cluster_spec(2)).status_code == 201
    assert len(client.get("/v1/clusters/reborn").json()["devices"]) == 2
    first = client.post("/v1/plans", json=plan_body(chain_graph(4, "reborn"), "reborn")).json()
    assert client.delete(first["url"]).status_code == 204
    assert client.delete("/v1/clusters/reborn").status_code == 204
    assert client.put("/v1/clusters/reborn", json=cluster_spec(3)).status_code == 201
    again = client.get("/v1/clusters/reborn").json()
    assert again["revision"] == 1 and len(again["devices"]) == 3
    second = client.post("/v1/plans", json=plan_body(chain_graph(4, "reborn"), "reborn"))
    assert second.status_code == 201 and second.json()["id"] != first["id"]  # planned on the new cluster
    assert client.delete(second.json()["url"]).status_code == 204
    assert client.delete("/v1/clusters/reborn").status_code == 204
