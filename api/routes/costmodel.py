"""``/v1/costmodel/predict``: a cost model's time for each layer on each device, under load.

The server checks what is cheap to check (sizes, the cluster, the cost model's name); the layers are
parsed and timed by a worker of the predict pool (``PIPEPLAN_PREDICT_WORKERS``), apart from the
solvers: a flood of predictions cannot slow the server's other answers, and a learned model is
loaded in that worker, never in the server.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from pipeplan.api.deps import Predictor, ServicesDep, errors
from pipeplan.api.errors import ApiError, job_failure, user_label
from pipeplan.api.payloads import PredictPayload
from pipeplan.api.pool import Outcome, QueueFull, Task
from pipeplan.api.registry import state_of
from pipeplan.api.schemas.misc import PredictRequest, PredictResponse
from pipeplan.api.store import new_id
from pipeplan.costmodel.hardware import Device

router = APIRouter(prefix="/v1/costmodel", tags=["costmodel"])


def _devices(body: PredictRequest, services: ServicesDep) -> list[Device]:
    if (body.cluster is None) == (body.devices is None):
        raise ApiError(422, "give either a cluster or a list of devices", ["body", "cluster"])
    if body.devices is not None:
        devices = body.devices
        loc: list[str | int] = ["body", "devices"]
    elif isinstance(body.cluster, str):
        with services.db.read() as session:
            devices = services.registry.get(session, body.cluster, ["body", "cluster"]).effective.devices
        loc = ["body", "cluster"]
    else:
        assert body.cluster is not None
        spec = body.cluster.model_dump(mode="json", exclude_none=True)
        user_label(spec["name"], ["body", "cluster", "name"], 128)
        devices = state_of(services.registry.validate(spec, ["body", "cluster"])).effective.devices
        loc = ["body", "cluster"]
    if not devices or len(devices) > services.settings.max_devices:
        raise ApiError(422, f"give 1 to {services.settings.max_devices} devices, got {len(devices)}", loc)
    ids = [d.id for d in devices]
    if len(set(ids)) != len(ids):
        raise ApiError(422, f"device ids repeat: {', '.join(sorted({i for i in ids if ids.count(i) > 1}))}", loc)
    return list(devices)


@router.post("/predict", dependencies=[Predictor], response_model=PredictResponse,
             responses=errors(401, 403, 413, 422, 503))
async def predict(body: PredictRequest, services: ServicesDep) -> dict[str, Any]:
    """Each layer's predicted forward time on each device (and its memory), as the planner sees it."""
    limit = services.settings.max_graph_layers
    if isinstance(body.layers, list) and len(body.layers) > limit:
        raise ApiError(413, f"{len(body.layers)} layers; this service takes at most {limit}", ["body", "layers"],
                       "too_large")
    resolved = await run_in_threadpool(services.costmodels.resolve, body.costmodel)
    devices = await run_in_threadpool(_devices, body, services)
    payload = PredictPayload(layers=body.layers, devices=tuple(devices), load=body.load, costmodel=resolved.spec,
                             costmodel_name=resolved.name)
    outcome = await _run(services, Task(new_id(), "predict", payload, services.settings.predict_timeout))
    if outcome.ok:
        result: dict[str, Any] = outcome.value
        return result
    raise job_failure(outcome, "the prediction", retry_after=services.settings.retry_after)


async def _run(services: ServicesDep, task: Task) -> Outcome:
    """``task``'s outcome from the predict pool; a 503 when its queue is full."""
    future: Future[Outcome] = Future()
    task.on_done = lambda _task, outcome: future.set_result(outcome)
    try:
        services.predictors.submit(task)
    except QueueFull as exc:
        raise ApiError(503, f"cost predictions are busy: {exc}; retry later", [], "busy",
                       headers={"Retry-After": str(services.settings.retry_after)}) from None
    try:
        return await asyncio.shield(asyncio.wrap_future(future))
    except asyncio.CancelledError:  # the client left: no one wants the answer
        services.predictors.cancel(task.id, "the client disconnected")
        raise
