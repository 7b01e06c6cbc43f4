"""Whose fault an error is: a request's mistake is a 4xx naming it, the service's own failure a 500 that
tells the client nothing of its internals; and request keys that stored plans are found by."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any

import httpx
import numpy as np
import pytest

from pipeplan.api.database import Database
from pipeplan.api.errors import job_failure
from pipeplan.api.payloads import PredictPayload
from pipeplan.api.pool import Outcome, Task, WorkerPool
from pipeplan.api.tables import PlanRow
from pipeplan.api.worker import failure_of
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.hardware import Device
from pipeplan.errors import UserError
from tests.api.api_factories import chain_graph, cluster_spec, plan_body
from tests.api.api_server import Server


def _layer(name: str, order: int, flops: int) -> dict[str, Any]:
    return {"name": name, "kind": "linear", "module_type": "Linear", "order": order, "flops": flops,
            "bytes_read": 4096, "bytes_written": 4096, "param_bytes": 2048, "activation_bytes": 4096, "kernels": 1}


# A request as a client sent it before the worker's payloads were typed, and the key its plan was
# stored under then (computed by the service at commit fa46d30): a stored plan is found by this key.
_KEYED = {
    "model": {"graph": {"format": "pipeplan.graph", "version": 1, "model": "keyed", "batch_size": 2,
                        "layers": [_layer("a", 0, 10**9), _layer("b", 1, 2 * 10**9), _layer("c", 2, 10**9)],
                        "edges": [{"src": "a", "dst": "b", "bytes": 4096}, {"src": "b", "dst": "c", "bytes": 4096}]}},
    "cluster": {"name": "keyed-pair", "devices": [
        {"id": "gpu0", "type": "A100", "memory": "80GiB", "peak_flops": "312TFLOPS", "mem_bandwidth": "2039GB/s"},
        {"id": "gpu1", "type": "T4", "memory": "16GiB", "peak_flops": "65TFLOPS", "mem_bandwidth": "320GB/s"}],
        "topology": {"intra_host": {"bandwidth": "25GB/s", "latency": "10us"}}},
    "costmodel": "analytic",
    "options": {"microbatches": 2, "objective": "latency", "min_throughput": 10.0,
                "pins": [{"layers": "a", "device": "gpu0"}]},
    "solver": {"time_limit": 5, "seed": 3, "threads": 1},
}
_KEYED_KEY = "25b68a6924e90a62c6202a63ba1f70ea6486dba9632bad18adfebff333968c54"


def test_a_known_request_keeps_its_key(client: httpx.Client, server: Server) -> None:
    made = client.post("/v1/plans", json=_KEYED)
    assert made.status_code in (200, 201), made.text
    db = Database(server.database_url)
    try:
        with db.read() as session:
            row = session.get(PlanRow, made.json()["id"])
            assert row is not None and row.key == _KEYED_KEY
    finally:
        db.dispose()
    again = client.post("/v1/plans", json=_KEYED)
    assert again.status_code == 200 and again.json()["id"] == made.json()["id"] and again.json()["cached"]


def test_a_graph_with_a_cycle_is_a_422_naming_it(client: httpx.Client) -> None:
    graph = chain_graph(3, "looped")
    graph["edges"].append({"src": "l2", "dst": "l0", "bytes": 10})
    answer = client.post("/v1/plans", json=plan_body(graph))
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    assert "graph has a cycle" in detail["msg"] and detail["loc"] == ["body", "model", "graph"]


def test_a_model_that_fits_nowhere_is_a_422_from_the_planner(client: httpx.Client) -> None:
    # the planner's own PlanError, raised in a worker process: the request's fault, with its message
    graph = chain_graph(2, "too-big")
    for layer in graph["layers"]:
        layer["param_bytes"] = 60 * 2**30
    answer = client.post("/v1/plans", json=plan_body(graph, cluster_spec(1, name="one")))
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    assert detail["type"] == "PlanError" and "short" in detail["msg"] and detail["loc"] == ["body", "options"]


def test_a_throughput_floor_too_low_to_bind_plans_as_asked(client: httpx.Client) -> None:
    # 1e-300 samples/s scales past a float in the ILP: the planner itself caps it now, and the plan
    # records the options as they were asked
    options = {"objective": "latency", "min_throughput": 1e-300}
    answer = client.post("/v1/plans", json=plan_body(chain_graph(4, "low-floor"), options=options))
    assert answer.status_code == 201, answer.text
    plan = answer.json()["plan"]
    assert plan["options"]["min_throughput"] == 1e-300 and plan["certificate"]["status"] == "OPTIMAL"


def test_an_internal_value_error_in_a_worker_is_a_500_that_leaks_nothing(caplog: pytest.LogCaptureFixture) -> None:
    # A real worker process given a task its kind does not take (the server's bug, not the client's)
    # raises a bare ValueError there: the outcome is not the user's fault, and says only its class.
    device = Device(id="d", memory="1GiB", peak_flops=1e12, mem_bandwidth=1e11)
    payload = PredictPayload(layers=[], devices=(device,), load=None, costmodel="analytic", costmodel_name="analytic")
    done: Future[Outcome] = Future()
    pool = WorkerPool(1, 1)
    pool.start()
    try:
        pool.submit(Task("mismatched", "plan", payload, 60.0, on_done=lambda _t, o: done.set_result(o)))
        outcome = done.result(90)
    finally:
        pool.close()
    assert not outcome.ok and not outcome.user_error and outcome.error_type == "ValueError"
    assert outcome.error == "internal error (ValueError); the service logged it with task mismatched"
    answer = job_failure(outcome, "job j1", extra={"job": "/v1/jobs/j1"})
    assert answer.status_code == 500 and "PredictPayload" not in str(answer.detail)


def test_numpy_s_value_error_is_the_service_s_fault_and_a_plan_error_the_client_s(
        caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError) as numpy_error:
        np.ones(2) + np.ones(3)
    with caplog.at_level(logging.ERROR, logger="pipeplan.api.worker"):
        internal = failure_of(numpy_error.value, "t7", "plan")
    assert not internal.user_error and "broadcast" not in (internal.error or "")
    assert "broadcast" in caplog.text  # the traceback is in the log, for the operator
    assert job_failure(internal, "job t7").status_code == 500

    with pytest.raises(UserError) as user_error:
        ModelGraph.from_dict({"format": "pipeplan.graph", "version": 1, "model": "m", "batch_size": 0,
                              "layers": [], "edges": []})
    mistake = failure_of(user_error.value, "t8", "plan")
    assert mistake.user_error and mistake.error_type == "GraphError" and "batch_size" in (mistake.error or "")
    answer = job_failure(mistake, "job t8")
    assert answer.status_code == 422 and answer.loc == ["body", "model", "graph"]
