"""Cost models for pipeplan: layer graphs of PyTorch models and the time and memory of each layer.

Public surface::

    from costmodel import capture, capture_model, ModelGraph, Layer, Device, Contention
    from costmodel import CostModel, RooflineModel, LearnedCostModel, load_cost_model, CoRunners

``costmodel`` knows nothing of the planner, the executor or the service.  Names are imported
lazily so that light users (a cluster spec, the CLI's ``--help``) do not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RooflineModel": "costmodel.analytic",
    "CostModel": "costmodel.base",
    "LayerMemory": "costmodel.base",
    "CaptureError": "costmodel.capture",
    "CoRunners": "costmodel.corunners",
    "LearnedCostModel": "costmodel.learned",
    "load_cost_model": "costmodel.registry",
    "capture": "costmodel.capture",
    "register_flop_formula": "costmodel.capture_ops",
    "parse_granularity": "costmodel.capture",
    "GraphError": "costmodel.graph",
    "Layer": "costmodel.graph",
    "ModelGraph": "costmodel.graph",
    "TensorInfo": "costmodel.graph",
    "Contention": "costmodel.hardware",
    "Device": "costmodel.hardware",
    "ZooError": "costmodel.zoo.catalogue",
    "build_model": "costmodel.zoo.build",
    "capture_model": "costmodel.zoo.build",
    "list_models": "costmodel.zoo.catalogue",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'costmodel' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
