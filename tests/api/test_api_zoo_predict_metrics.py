"""The zoo, cost predictions, health and metrics, against a real server."""

from __future__ import annotations

import httpx
import pytest

from tests.api.api_factories import chain_graph
from tests.api.api_server import Server


def test_zoo_model_is_captured_in_a_worker_once(client: httpx.Client, server: Server) -> None:
    if not server.database_url.startswith("sqlite"):
        pytest.skip("capture does not touch the database; once (on SQLite) is enough")
    models = client.get("/v1/models").json()
    assert {"mlp", "tinygpt", "gpt2"} <= {m["name"] for m in models}
    meta = {m["name"] for m in models if m["meta"]}
    assert {"llama-7b", "llama-70b", "mixtral-8x7b"} <= meta and not meta & {"mlp", "tinygpt", "gpt2"}
    body = {"model": {"name": "MLP", "batch": 2}, "cluster": "local-cpu", "options": {"microbatches": 2}}
    made = client.post("/v1/plans", json=body)
    assert made.status_code == 201, made.text
    plan = made.json()
    assert plan["model"] == "mlp" and plan["plan"]["batch_size"] == 2
    again = client.post("/v1/plans", json={**body, "model": {"name": "mlp", "batch": 2}})
    assert again.status_code == 200 and again.json()["id"] == plan["id"]
    unknown = client.post("/v1/plans", json={"model": {"name": "resnet-5000"}, "cluster": "local-cpu"})
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == ["body", "model", "name"]
    assert "tinygpt" in unknown.json()["detail"][0]["msg"]
    # A zoo option the model refuses comes back from the worker as a 422 naming the model.
    bad = client.post("/v1/plans", json={"model": {"name": "tinygpt", "seq_len": 4096}, "cluster": "local-cpu"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "model"]
    assert "256" in bad.json()["detail"][0]["msg"]


def test_predict_times_layers_on_devices(client: httpx.Client, anonymous: httpx.Client) -> None:
    layers = chain_graph(3)["layers"]
    refused = anonymous.post("/v1/costmodel/predict", json={"layers": layers, "cluster": "hetero-a100-t4"})
    assert refused.status_code == 401  # it runs a worker: a token, as for writes
    answer = client.post("/v1/costmodel/predict", json={"layers": layers, "cluster": "hetero-a100-t4"})
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["devices"] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert [r["name"] for r in result["layers"]] == ["l0", "l1", "l2"]
    assert result["totals"]["gpu0"] == pytest.approx(sum(r["seconds"]["gpu0"] for r in result["layers"]))
    assert result["totals"]["gpu2"] > result["totals"]["gpu0"]  # a T4 is slower than an A100
    busy = client.post("/v1/costmodel/predict", json={"layers": layers, "cluster": "hetero-a100-t4",
                                                          "load": {"corunners": 1, "kind": "compute"}}).json()
    assert busy["totals"]["gpu0"] > result["totals"]["gpu0"]
    bad = client.post("/v1/costmodel/predict", json={"layers": [{"name": "x"}], "cluster": "local-cpu"})
    assert bad.status_code == 422 and "missing field" in bad.json()["detail"][0]["msg"]
    neither = client.post("/v1/costmodel/predict", json={"layers": layers})
    assert neither.status_code == 422 and neither.json()["detail"][0]["loc"] == ["body", "cluster"]


def test_health_and_metrics(anonymous: httpx.Client) -> None:
    health = anonymous.get("/healthz").json()
    assert health["status"] == "ok" and health["database"] == "ok" and health["workers"]["size"] == 2
    anonymous.get("/v1/plans/does-not-exist")
    text = anonymous.get("/metrics").text
    assert 'pipeplan_http_requests_total{method="GET",route="/v1/plans/{plan_id}",status="404"}' in text
    for name in ("pipeplan_http_request_duration_seconds_bucket", "pipeplan_workers_alive 2.0",
                 "pipeplan_queue_capacity", "pipeplan_worker_restarts_total"):
        assert name in text
