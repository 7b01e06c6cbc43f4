"""Constraints, the transfer rule and a zoo decoder's KV context in plan requests, over HTTP against a
real server process, on SQLite and on PostgreSQL."""

from __future__ import annotations

import httpx
import pytest

from pipeplan.api.schemas.plans import PlanOptionsIn
from tests.api.api_factories import chain_graph, plan_body
from tests.api.api_server import Server


def test_a_plan_keeps_the_constraints_of_its_request(client: httpx.Client) -> None:
    options = {"pins": [{"layers": "l0", "device": "T4"}], "forbid_devices": ["gpu3"],
               "keep_together": [["l4", "l5"]], "transfer": "per-edge", "max_devices": 3}
    made = client.post("/v1/plans", json=plan_body(chain_graph(6, "rules"), options=options))
    assert made.status_code == 201, made.text
    doc = made.json()["plan"]
    owner = {layer: stage["device"] for stage in doc["stages"] for layer in stage["layers"]}
    assert owner["l0"] == "gpu2" and owner["l4"] == owner["l5"] and "gpu3" not in owner.values()
    assert len(doc["stages"]) <= 3
    assert doc["options"]["pins"] == [["l0", "T4"]] and doc["options"]["transfer"] == "per-edge"
    free = client.post("/v1/plans", json=plan_body(chain_graph(6, "rules")))
    assert free.status_code == 201 and free.json()["id"] != made.json()["id"]


def test_constraints_at_their_defaults_keep_the_request_key() -> None:
    # Plans stored before the constraints existed are found by keys made from the options' dump.
    assert PlanOptionsIn(pins=[], transfer="per-device").model_dump() == PlanOptionsIn().model_dump()
    assert "pins" not in PlanOptionsIn().model_dump()
    assert PlanOptionsIn(forbid_devices=["gpu1"]).model_dump()["forbid_devices"] == ["gpu1"]


@pytest.mark.parametrize("options, message", [
    ({"pins": [{"layers": "blocks.*", "device": "gpu0"}]}, "no layer of 'bad-rules' is named or matches 'blocks.*'"),
    ({"pins": [{"layers": "l0", "device": "gpu1"}], "forbid_devices": ["A100-80GB-PCIe"]},
     "pin l0=gpu1 leaves layer 'l0' no device: forbid_devices rules out gpu0, gpu1"),
])
def test_constraints_that_cannot_hold_are_a_422_naming_them(client: httpx.Client, options: dict[str, object],
                                                            message: str) -> None:
    answer = client.post("/v1/plans", json=plan_body(chain_graph(4, "bad-rules"), options=options))
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    assert message in detail["msg"] and detail["loc"] == ["body", "options"]


def test_a_kv_context_for_a_model_without_key_value_projections_is_a_422(client: httpx.Client) -> None:
    # a capture in a worker process on a busy machine may pass the default wait: wait for the answer
    body = {"model": {"name": "tinygpt", "kv_context": 64}, "cluster": "hetero-a100-t4", "wait": 110}
    answer = client.post("/v1/plans", json=body)
    assert answer.status_code == 422, answer.text
    assert "no key/value projections" in answer.json()["detail"][0]["msg"]


@pytest.mark.slow
def test_a_zoo_decoders_kv_cache_is_counted_in_its_stages_memory(client: httpx.Client, server: Server) -> None:
    if not server.database_url.startswith("sqlite"):
        pytest.skip("capture and memory do not touch the database; once (on SQLite) is enough (20 s each)")
    # Llama-2 7B on the meta device, by blocks: 32 layers × (K + V) × 4096 × 2 bytes per token and
    # sequence; 64 tokens of context for each of the 4 microbatches in flight.
    model = {"name": "llama-7b", "granularity": "block", "seq_len": 16}
    sizes = {}
    for context in (None, 64):
        body = {"model": {**model, "kv_context": context}, "cluster": "hetero-a100-t4",
                "options": {"max_devices": 1, "pins": [{"layers": "*", "device": "gpu0"}]},
                "solver": {"time_limit": 5}, "wait": 110}
        answer = client.post("/v1/plans", json=body)
        assert answer.status_code == 201, answer.text
        sizes[context] = answer.json()["plan"]["peak_memory"]
    assert sizes[64] - sizes[None] == 32 * 2 * 4096 * 2 * 64 * 4
