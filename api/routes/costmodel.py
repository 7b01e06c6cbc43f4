"""``/v1/costmodel/predict``: a cost model's time for each layer on each device, under load."""

from __future__ import annotations

import math
from typing import Any

from fastapi import APIRouter

from api.deps import Reader, ServicesDep, errors
from api.errors import ApiError, user_label
from api.registry import state_of
from api.resolve import check_sizes
from api.schemas.misc import PredictRequest, PredictResponse
from costmodel.graph import GRAPH_FORMAT, GRAPH_VERSION, ModelGraph
from costmodel.hardware import Device

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


def _layers(raw: Any, limit: int) -> ModelGraph:
    loc = ["body", "layers"]
    if isinstance(raw, list) and len(raw) > limit:
        raise ApiError(413, f"{len(raw)} layers; this service takes at most {limit}", loc, "too_large")
    doc = {"format": GRAPH_FORMAT, "version": GRAPH_VERSION, "model": "predict", "batch_size": 1,
           "layers": raw, "edges": []}
    try:
        graph = ModelGraph.from_dict(doc)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ApiError(422, str(exc), loc) from None
    check_sizes(graph, ["body"])
    return graph


def _seconds(value: float) -> float | None:
    return value if math.isfinite(value) else None


@router.post("/predict", dependencies=[Reader], response_model=PredictResponse, responses=errors(401, 413, 422))
def predict(body: PredictRequest, services: ServicesDep) -> dict[str, Any]:
    """Each layer's predicted forward time on each device (and its memory), as the planner sees it."""
    resolved = services.costmodels.resolve(body.costmodel)
    model = services.costmodels.load(resolved)
    graph = _layers(body.layers, services.settings.max_graph_layers)
    devices = _devices(body, services)
    rows, totals = [], dict.fromkeys((d.id for d in devices), 0.0)
    try:
        for layer in graph.layers:
            seconds = {d.id: model.layer_time(layer, d, body.load) for d in devices}
            for d, t in seconds.items():
                totals[d] += t
            memory = model.layer_memory(layer)
            rows.append({"name": layer.name, "seconds": {d: _seconds(t) for d, t in seconds.items()},
                         "params": memory.params, "activations": memory.activations, "workspace": memory.workspace})
    except (ValueError, ArithmeticError) as exc:
        raise ApiError(422, f"cost model {body.costmodel!r}: {exc}", ["body"]) from None
    return {"costmodel": resolved.name, "devices": list(totals), "layers": rows,
            "totals": {d: _seconds(t) for d, t in totals.items()}}
