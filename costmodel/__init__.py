"""Cost models for pipeplan: layer graphs of PyTorch models and the time and memory of each layer.

Public surface::

    from pipeplan.costmodel import capture, capture_model, ModelGraph, Layer, Device, Contention
    from pipeplan.costmodel import CostModel, RooflineModel, LearnedCostModel, load_cost_model, CoRunners
    from pipeplan.costmodel import Cluster, Link, load_cluster    # the hardware model every package reads

``costmodel`` knows nothing of the planner, the executor or the service.  Names are imported
lazily so that light users (a cluster spec, the CLI's ``--help``) do not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RooflineModel": "pipeplan.costmodel.analytic",
    "CostModel": "pipeplan.costmodel.base",
    "LayerMemory": "pipeplan.costmodel.base",
    "CaptureError": "pipeplan.costmodel.capture",
    "CoRunners": "pipeplan.costmodel.corunners",
    "LearnedCostModel": "pipeplan.costmodel.learned",
    "load_cost_model": "pipeplan.costmodel.registry",
    "capture": "pipeplan.costmodel.capture",
    "register_flop_formula": "pipeplan.costmodel.capture.ops",
    "parse_granularity": "pipeplan.costmodel.capture",
    "GraphError": "pipeplan.costmodel.graph",
    "Layer": "pipeplan.costmodel.graph",
    "ModelGraph": "pipeplan.costmodel.graph",
    "TensorInfo": "pipeplan.costmodel.graph",
    "Cluster": "pipeplan.costmodel.cluster",
    "ClusterError": "pipeplan.costmodel.cluster",
    "builtin_clusters": "pipeplan.costmodel.cluster",
    "load_cluster": "pipeplan.costmodel.cluster",
    "Contention": "pipeplan.costmodel.hardware",
    "Device": "pipeplan.costmodel.hardware",
    "Link": "pipeplan.costmodel.hardware",
    "ZooError": "pipeplan.costmodel.zoo.catalogue",
    "build_model": "pipeplan.costmodel.zoo.build",
    "capture_model": "pipeplan.costmodel.zoo.build",
    "list_models": "pipeplan.costmodel.zoo.catalogue",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


# The folder is installed as pipeplan.costmodel; imported under another name it would be a second copy.
if __name__ != "pipeplan.costmodel":
    raise ImportError(f"import pipeplan.costmodel, not {__name__}: pipeplan's packages live under one namespace")
