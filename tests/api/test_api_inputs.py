"""Any input, no 5xx: text that cannot be stored, zoo sizes that cannot be allocated, writes that are
atomic with their checks.  Against a real server process, on SQLite and on PostgreSQL.

Lone surrogates reach the service as JSON escapes (``"\\ud800"``); ``json.dumps`` writes them so.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.api.api_factories import chain_graph, cluster_spec, plan_body

LONE = "\ud800"


def _send(client: httpx.Client, method: str, url: str, body: Any) -> httpx.Response:
    return client.request(method, url, content=json.dumps(body).encode(), headers={"content-type": "application/json"})


def _refused(response: httpx.Response, loc: list[str | int]) -> None:
    assert response.status_code == 422, response.text
    item = response.json()["detail"][0]
    assert item["loc"] == loc and "surrogate" in item["msg"] and item["type"] == "string_unicode"


def _graph_with(where: str) -> dict[str, Any]:
    graph = chain_graph(4, "surrogates")
    if where == "edge":
        graph["edges"][1]["dst"] = LONE
    elif where == "layer":
        graph["layers"][2]["name"] = f"l{LONE}"
    else:
        graph["model"] = f"m{LONE}"
    return graph


@pytest.mark.parametrize(("where", "loc"), [("edge", ["edges", 1, "dst"]), ("layer", ["layers", 2, "name"]),
                                            ("model", ["model"])])
def test_lone_surrogates_in_a_graph_are_422(client: httpx.Client, where: str, loc: list[str | int]) -> None:
    for path in ("/v1/plans", "/v1/plans/compare"):
        _refused(_send(client, "POST", path, plan_body(_graph_with(where))), ["body", "model", "graph", *loc])


def test_lone_surrogates_in_clusters_are_422_and_never_stored(client: httpx.Client) -> None:
    described = {**cluster_spec(2), "description": f"lab {LONE}"}
    _refused(_send(client, "PUT", "/v1/clusters/surrogate-desc", described), ["body", "description"])
    assert client.get("/v1/clusters/surrogate-desc").status_code == 404  # nothing stored

    linked = {**cluster_spec(2), "links": [{"a": LONE, "b": "gpu1", "bandwidth": "1GB/s", "latency": "1us"}]}
    _refused(_send(client, "PUT", "/v1/clusters/surrogate-link", linked), ["body", "links", 0, "a"])
    assert client.get("/v1/clusters/surrogate-link").status_code == 404

    inline = {**cluster_spec(2, name="inline"), "devices": [{**cluster_spec(1)["devices"][0], "id": LONE}]}
    _refused(_send(client, "POST", "/v1/plans", plan_body(cluster=inline)), ["body", "cluster", "devices", 0, "id"])
    _refused(_send(client, "PATCH", "/v1/clusters/hetero-a100-t4/devices/gpu0", {"load": {"kind": LONE}}),
             ["body", "load", "kind"])
    with_nul = _send(client, "PUT", "/v1/clusters/nul-desc", {**cluster_spec(2), "description": "a\x00b"})
    assert with_nul.status_code == 422 and with_nul.json()["detail"][0]["loc"] == ["body", "description"]
    assert "NUL" in with_nul.json()["detail"][0]["msg"]


def test_a_refused_replacement_leaves_the_stored_cluster_as_it_was(client: httpx.Client) -> None:
    first = client.put("/v1/clusters/atomic", json={**cluster_spec(2), "description": "v1"})
    assert first.status_code in (200, 201), first.text
    _refused(_send(client, "PUT", "/v1/clusters/atomic", {**cluster_spec(3), "description": LONE}),
             ["body", "description"])
    now = client.get("/v1/clusters/atomic")
    assert now.status_code == 200 and now.json()["revision"] == first.json()["revision"]
    assert now.json()["spec"]["description"] == "v1" and len(now.json()["devices"]) == 2
    assert client.delete("/v1/clusters/atomic").status_code == 204


def test_surrogates_elsewhere_are_422(client: httpx.Client) -> None:
    _refused(_send(client, "POST", "/v1/plans", {"model": {"name": LONE}, "cluster": "hetero-a100-t4"}),
             ["body", "model", "name"])
    layer = {**chain_graph(1)["layers"][0], "name": LONE}
    _refused(_send(client, "POST", "/v1/costmodel/predict", {"layers": [layer], "cluster": "hetero-a100-t4"}),
             ["body", "layers", 0, "name"])
    keyed = _send(client, "POST", "/v1/plans", {**plan_body(), "options": {LONE: 1}})
    assert keyed.status_code == 422 and keyed.json()["detail"][0]["loc"][:2] == ["body", "options"]


def test_zoo_sizes_are_checked_before_anything_is_built(client: httpx.Client) -> None:
    body = {"model": {"name": "rescnn", "batch": 65536, "image_size": 8192}, "cluster": "hetero-a100-t4"}
    huge = client.post("/v1/plans", json=body)
    assert huge.status_code == 422, huge.text
    item = huge.json()["detail"][0]
    assert item["loc"] == ["body", "model"] and item["type"] == "too_large"
    assert "PIPEPLAN_MAX_CAPTURE_BYTES" in item["msg"] and "rescnn" in item["msg"]
    tokens = client.post("/v1/plans/compare", json={"model": {"name": "gpt2", "batch": 4096, "seq_len": 65536},
                                                    "cluster": "hetero-a100-t4"})
    assert tokens.status_code == 422 and "seq_len" in tokens.json()["detail"][0]["msg"]
    assert client.get("/healthz").status_code == 200  # the workers were never asked
