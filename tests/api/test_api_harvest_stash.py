"""``harvest.stash`` in plan requests, in process (TestClient, a real SQLite database, a real solver
worker, CP-SAT): the problem of ``tests/planner/test_harvest_stash.py``, where only a stash makes
the layer-major batch fit, answered with the stash in the plan's memory map; a stash without
``fetch: "batch"`` or not a boolean is a 422 naming the field.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from pipeplan.api.schemas.plans import PlanPublic
from pipeplan.planner.builder import GraphBuilder
from tests.api.test_api_harvest import client  # noqa: F401  (the fixture)

GB = 10**9
CUT = GB // 8
PAIR = {"name": "stash-pair", "devices": [
    {"id": "d0", "memory": int(3.75 * GB), "peak_flops": 1e9, "mem_bandwidth": 1e15},
    {"id": "d1", "memory": int(3.5 * GB), "peak_flops": 1e9, "mem_bandwidth": 1e15}],
    "links": [{"a": "d0", "b": "d1", "bandwidth": 1e10, "latency": 0}]}


def body(harvest: dict[str, Any] | None) -> dict[str, Any]:
    b = GraphBuilder("stash-chain")
    for i in range(4):
        b.layer(f"l{i}", flops=10**7, param_bytes=GB, activation_bytes=CUT, inputs={f"l{i - 1}": CUT} if i else {})
    request: dict[str, Any] = {
        "model": {"graph": b.build().to_dict()}, "cluster": PAIR,
        "options": {"microbatches": 4, "memory_margin": 0.0, "in_flight": 1, "forbid_devices": ["d1"]},
        "solver": {"time_limit": 20}, "wait": 60}
    if harvest is not None:
        request["harvest"] = harvest
    return request


def test_a_stash_makes_the_batch_fit_and_shows_in_the_memory_map(client: TestClient) -> None:  # noqa: F811
    refused = client.post("/v1/plans", json=body({"fetch": "batch"}))
    assert refused.status_code == 422, refused.text
    assert "stash=True lets a lender hold all but one" in refused.json()["detail"][0]["msg"]
    made = client.post("/v1/plans", json=body({"fetch": "batch", "stash": True}))
    assert made.status_code == 201, made.text
    PlanPublic.model_validate(made.json())
    doc = made.json()["plan"]
    assert doc["bottleneck"] == pytest.approx(0.13125) and doc["certificate"]["status"] == "OPTIMAL"
    harvest = doc["harvest"]
    assert harvest["options"]["stash"] is True
    assert [(s["borrower"], s["lender"], s["bytes"]) for s in harvest["stashes"]] == [("d0", "d1", 3 * CUT)]
    memory = {row["device"]: row for row in harvest["memory"]}
    assert memory["d1"]["lent_stash"] == memory["d0"]["borrowed_stash"] == 3 * CUT
    assert memory["d1"]["lent"] == memory["d0"]["borrowed"] == 3 * GB + 3 * CUT
    fetched = client.get(f"/v1/plans/{made.json()['id']}")
    assert fetched.status_code == 200 and fetched.json()["plan"]["harvest"]["stashes"] == harvest["stashes"]


@pytest.mark.parametrize(("harvest", "message"), [
    ({"stash": True}, "stash needs fetch 'batch'"),
    ({"fetch": "microbatch", "stash": True}, "stash needs fetch 'batch'"),
    ({"fetch": "batch", "stash": "perhaps"}, "valid boolean"),
])
def test_a_bad_stash_is_422_naming_the_field(client: TestClient, harvest: dict[str, Any],  # noqa: F811
                                             message: str) -> None:
    answer = client.post("/v1/plans", json=body(harvest))
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    assert detail["loc"] == ["body", "harvest", "stash"] and message in detail["msg"], detail
