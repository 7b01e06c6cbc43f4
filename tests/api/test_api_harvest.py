"""Harvesting in plan requests, in process (TestClient, a real SQLite database, a real solver worker,
CP-SAT): a model that fits on no split of its cluster is a 422 without borrowing and a plan with
it, whose memory map (stored with the plan) balances what lenders lend against what borrowers
borrow; bad harvesting options are 422s naming the field; a comparison with harvesting carries the
plan that borrows beside the ILP and the baselines.

The problem is the first of ``tests/planner/test_harvest.py``: four layers of 1 GB of weights, d0
(3.5 GB) alone may run them (d1 is forbidden), so d0 borrows three layers' weights from d1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pipeplan.api.auth import create_token
from pipeplan.api.database import Database
from pipeplan.api.jobspec import JobSpec
from pipeplan.api.main import create_app
from pipeplan.api.schemas.plans import CompareCreate, ComparePublic, PlanCreate, PlanPublic
from pipeplan.api.settings import Settings

GB = 10**9
PAIR = {"name": "pair", "devices": [
    {"id": "d0", "memory": int(3.5 * GB), "peak_flops": 1e9, "mem_bandwidth": 1e15},
    {"id": "d1", "memory": 4 * GB, "peak_flops": 1e9, "mem_bandwidth": 1e15}],
    "links": [{"a": "d0", "b": "d1", "bandwidth": 1e11, "latency": 0}]}


def heavy_chain(name: str, flops: int, n: int = 4) -> dict[str, Any]:
    """``n`` layers in a line, 1 GB of weights each, handing nothing on."""
    layers = [{"name": f"l{i}", "kind": "linear", "module_type": "Linear", "order": i, "flops": flops,
               "bytes_read": 10**3, "bytes_written": 10**3, "param_bytes": GB, "activation_bytes": 0, "kernels": 1}
              for i in range(n)]
    return {"format": "pipeplan.graph", "version": 1, "model": name, "batch_size": 1, "layers": layers,
            "edges": [{"src": f"l{i}", "dst": f"l{i + 1}", "bytes": 0} for i in range(n - 1)]}


def body(name: str = "heavy", flops: int = 10**8, **extra: Any) -> dict[str, Any]:
    """A plan request for d0 alone: 100 ms of compute a layer (at 10**8 FLOPs), fetches at 100 GB/s."""
    return {"model": {"graph": heavy_chain(name, flops)}, "cluster": PAIR,
            "options": {"microbatches": 1, "memory_margin": 0.0, "forbid_devices": ["d1"]},
            "solver": {"time_limit": 10}, "wait": 60, **extra}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path_factory.mktemp('harvest') / 'pipeplan.db'}"
    db = Database(url)
    db.migrate()
    token = create_token(db, "harvester")
    db.dispose()
    with TestClient(create_app(Settings(database_url=url, workers=1)),
                    headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def test_a_model_that_fits_only_by_borrowing_gets_a_plan_with_its_memory_map(client: TestClient) -> None:
    refused = client.post("/v1/plans", json=body())
    assert refused.status_code == 422, refused.text
    assert "short" in refused.json()["detail"][0]["msg"]

    made = client.post("/v1/plans", json=body(harvest={}))
    assert made.status_code == 201, made.text
    PlanPublic.model_validate(made.json())  # the answer is what the OpenAPI schema says
    doc = made.json()["plan"]
    assert [s["device"] for s in doc["stages"]] == ["d0"] and doc["certificate"]["status"] == "OPTIMAL"
    harvest = doc["harvest"]
    assert len(harvest["loans"]) == 3  # the three memory needs; the trim sends any other loan home
    assert {(loan["lender"], loan["borrower"]) for loan in harvest["loans"]} == {("d1", "d0")}
    memory = {row["device"]: row for row in harvest["memory"]}
    assert set(memory) == {"d0", "d1"}
    # What the lender holds for others is what the borrower keeps there: three layers of 1 GB.
    assert memory["d1"]["lent"] == memory["d0"]["borrowed"] == 3 * GB
    assert memory["d0"]["lent"] == memory["d1"]["borrowed"] == 0
    for row in memory.values():
        assert row["own"] + row["lent"] + row["reserved"] + row["free"] == row["capacity"], row
    assert memory["d0"]["capacity"] == int(3.5 * GB) and memory["d1"]["own"] == 0
    assert harvest["without"] is None  # nothing fits without borrowing
    assert harvest["options"]["lenders"] is None and harvest["options"]["host_memory"] == 0

    # Stored with the plan: read back as it was answered; the same request (sizes written with
    # units or without) is the same plan.
    got = client.get(made.json()["url"])
    assert got.status_code == 200 and got.json()["plan"]["harvest"] == harvest
    again = client.post("/v1/plans", json=body(harvest={"host_memory": "0GiB", "host_bandwidth": 12e9}))
    assert again.status_code == 200 and again.json()["id"] == made.json()["id"] and again.json()["cached"]


def test_reservations_and_the_host_tier_reach_the_planner(client: TestClient) -> None:
    # 2 GB reserved on d1 leaves room for two loans there; the third goes to the host's memory.  With
    # 10 ms of compute a layer the fetches set the bottleneck: two from d1 (20 ms) and one from the
    # host (100 ms) beat one and two (210 ms).
    made = client.post("/v1/plans", json=body("tiers", 10**7, harvest={"reserved": {"d1": "2GB"}, "host_memory": "8GB",
                                                                "host_bandwidth": "10GB/s", "host_latency": "0s"}))
    assert made.status_code == 201, made.text
    harvest = made.json()["plan"]["harvest"]
    lent: dict[str, int] = {}
    for loan in harvest["loans"]:
        assert loan["borrower"] == "d0"
        lent[loan["lender"]] = lent.get(loan["lender"], 0) + loan["bytes"]
    memory = {row["device"]: row for row in harvest["memory"]}
    assert lent == {"d1": 2 * GB, "host:host0": GB}
    assert {device: memory[device]["lent"] for device in lent} == lent  # the map agrees with the loans
    assert memory["d0"]["borrowed"] == sum(lent.values())
    assert memory["d1"]["reserved"] == 2 * GB and memory["d1"]["free"] == 0
    assert memory["host:host0"]["capacity"] == 8 * GB
    for row in memory.values():
        assert row["own"] + row["lent"] + row["reserved"] + row["free"] == row["capacity"], row


def test_fetching_once_per_batch_reaches_the_planner(client: TestClient) -> None:
    # 1 ms of compute a layer (10**6 FLOPs), three layers' weights (3 GB) from d1 at 100 GB/s: 30 ms a
    # round of fetches. Fetched each microbatch that round is the bottleneck; once per batch of four
    # microbatches it is 7.5 ms a microbatch.
    def plan(fetch: str) -> dict[str, Any]:
        request = body(f"batched-{fetch}", 10**6, harvest={"fetch": fetch})
        request["options"]["microbatches"] = 4
        made = client.post("/v1/plans", json=request)
        assert made.status_code == 201, made.text
        return made.json()["plan"]

    each, once = plan("microbatch"), plan("batch")
    assert each["bottleneck"] == pytest.approx(0.030) and once["bottleneck"] == pytest.approx(0.0075)
    assert once["harvest"]["options"]["fetch"] == "batch" and each["harvest"]["options"]["fetch"] == "microbatch"
    assert [s["fetch"] for s in once["harvest"]["stages"]] == [pytest.approx(0.0075)]


@pytest.mark.parametrize(("harvest", "loc", "message"), [
    ({"fetch": "layer"}, ["body", "harvest", "fetch"], "'microbatch' or 'batch'"),
    ({"lenders": ["d1", "gpu9"]}, ["body", "harvest", "lenders", 1], "'gpu9' is not a device of the cluster"),
    ({"reserved": {"gpu9": "1GB"}}, ["body", "harvest", "reserved", "gpu9"], "not a device of the cluster"),
    ({"reserved": {"d1": "5GB"}}, ["body", "harvest", "reserved", "d1"], "more than the 4000000000 it offers"),
    ({"host_memory": -1}, ["body", "harvest", "host_memory"], "must be between 0 and"),
    ({"host_memory": "lots"}, ["body", "harvest", "host_memory"], "cannot read quantity 'lots'"),
    ({"host_bandwidth": 0}, ["body", "harvest", "host_bandwidth"], "must be between 1000 and"),
    ({"host_latency": "5 days"}, ["body", "harvest", "host_latency"], "cannot read duration"),
    ({"lenders": "d1"}, ["body", "harvest", "lenders"], "valid list"),
    ({"borrow": True}, ["body", "harvest", "borrow"], "Extra inputs are not permitted"),
])
def test_bad_harvesting_options_are_422_naming_the_field(client: TestClient, harvest: dict[str, Any],
                                                        loc: list[str | int], message: str) -> None:
    answer = client.post("/v1/plans", json=body(harvest=harvest))
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    assert detail["loc"] == loc and message in detail["msg"], detail


def test_a_comparison_with_harvesting_answers_the_borrowing_plan_when_nothing_else_fits(client: TestClient) -> None:
    from pipeplan.planner.baselines import BASELINES

    # Without borrowing the comparison is the ILP's PlanError, as before.
    refused = client.post("/v1/plans/compare", json=body("compared"))
    assert refused.status_code == 422 and "short" in refused.json()["detail"][0]["msg"], refused.text
    answer = client.post("/v1/plans/compare", json=body("compared", harvest={}))
    assert answer.status_code == 200, answer.text
    ComparePublic.model_validate(answer.json())
    comp = answer.json()["comparison"]
    # No plan keeps its weights at home: the ILP and every baseline are failures, each with its reason.
    assert comp["plans"] == []
    assert [f["method"] for f in comp["failures"]] == ["ilp", *BASELINES]
    assert comp["failures"][0]["error"] == ("compared needs 3.73 GiB but the 1 devices of 'pair' that forbid_devices "
                                            "leaves offer 3.26 GiB after the 0% margin: 0.47 GiB short")
    # Four layers of 100 ms (and 10**3 bytes each way at 10**15 B/s) on the one device: the bound and
    # the borrowing plan's bottleneck, its fetches (30 ms) hidden under its compute.
    assert comp["lower_bound"] == pytest.approx(0.40002, rel=1e-12)
    row = comp["harvest"]
    assert row["method"] == "harvest" and row["objective_vs_ilp"] is None
    assert row["plan"]["bottleneck"] == pytest.approx(0.40002, rel=1e-12)
    assert row["bottleneck_vs_bound"] == pytest.approx(1.0, rel=1e-12)
    memory = {m["device"]: m for m in row["plan"]["harvest"]["memory"]}
    assert (memory["d1"]["lent"], memory["d0"]["borrowed"], row["plan"]["harvest"]["without"]) == (3 * GB, 3 * GB, None)


def test_a_comparison_with_harvesting_puts_the_borrowing_plan_beside_the_others(client: TestClient) -> None:
    # d1 allowed: two layers a device fit at home, 200 ms a stage; borrowing gains nothing and lends nothing.
    request = body("beside", harvest={})
    request["options"]["forbid_devices"] = []
    answer = client.post("/v1/plans/compare", json=request)
    assert answer.status_code == 200, answer.text
    ComparePublic.model_validate(answer.json())
    comp = answer.json()["comparison"]
    assert comp["failures"] == [] and comp["plans"][0]["method"] == "ilp"
    ilp = comp["plans"][0]["plan"]
    assert ilp["bottleneck"] == pytest.approx(0.20001, rel=1e-12) and "harvest" not in ilp
    row = comp["harvest"]
    assert row["plan"]["bottleneck"] == ilp["bottleneck"] and row["objective_vs_ilp"] == 1.0
    assert row["plan"]["harvest"]["loans"] == [] and row["plan"]["harvest"]["without"] == ilp["bottleneck"]
    assert [m["lent"] for m in row["plan"]["harvest"]["memory"]] == [0, 0]

    # The same comparison without harvesting is another request, and reads as it always has.
    del request["harvest"]
    plain = client.post("/v1/plans/compare", json=request)
    assert plain.status_code == 200 and not plain.json()["cached"], plain.text
    assert "harvest" not in plain.json()["comparison"]
    assert [r["method"] for r in plain.json()["comparison"]["plans"]] == [r["method"] for r in comp["plans"]]
    # Options are checked as for a plan.
    bad = client.post("/v1/plans/compare", json=body("beside", harvest={"lenders": ["gpu9"]}))
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "harvest", "lenders", 0], bad.text


def test_harvesting_off_keeps_the_request_dump_and_the_job_spec_carries_it(tmp_path: Path) -> None:
    # Idempotency-Key fingerprints of requests sent before harvesting existed stay valid.
    plain = PlanCreate.model_validate(body())
    assert "harvest" not in plain.model_dump(mode="json")
    assert "harvest" not in CompareCreate.model_validate(body()).model_dump(mode="json")
    asked = PlanCreate.model_validate(body(harvest={"host_memory": "1GiB", "reserved": {"d1": 5}}))
    assert asked.model_dump(mode="json")["harvest"]["host_memory"] == 2**30
    # A queued job's spec keeps the options: a worker on another machine plans with them.
    from pipeplan.api.keys import KeyParts
    from pipeplan.api.payloads import PlanPayload, SolverLimits
    from pipeplan.costmodel.cluster import Cluster
    from pipeplan.planner.harvest import HarvestOptions
    from pipeplan.planner.problem import PlanOptions

    payload = PlanPayload(Cluster.from_dict(PAIR), "analytic", "analytic", PlanOptions(microbatches=1),
                          SolverLimits(5.0, 1, 0, 0.0), graph_text="{}",
                          harvest=HarvestOptions.of(lenders=["d1"], host_memory="1GiB", reserved={"d1": "1GB"}))
    spec = JobSpec(kind="plan", payload=payload, timeout=10.0, timeout_note="", key_parts=KeyParts("c", "m", {}, {}),
                   graph=None, digest="d", zoo_key=None, cluster="pair", registered=False, revision=None,
                   costmodel_name="analytic", request={}, reserve=False, owner=None)
    assert JobSpec.from_json(spec.to_json()) == spec
