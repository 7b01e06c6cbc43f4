"""Models reachable by name: small in-project ones, and real architectures from ``transformers``.

Public surface::

    from pipeplan.costmodel.zoo import list_models, get_model, ZooModel, ZooError   # the catalogue: no torch
    from pipeplan.costmodel.zoo import build_model, capture_model, BuiltModel        # building: imports torch

Names are imported lazily, so listing the zoo or checking a name does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BuiltModel", "ZooError", "ZooModel", "build_model", "capture_model", "get_model", "list_models"]

_EXPORTS = {
    "ZooError": "pipeplan.costmodel.zoo.catalogue",
    "ZooModel": "pipeplan.costmodel.zoo.catalogue",
    "get_model": "pipeplan.costmodel.zoo.catalogue",
    "list_models": "pipeplan.costmodel.zoo.catalogue",
    "BuiltModel": "pipeplan.costmodel.zoo.build",
    "build_model": "pipeplan.costmodel.zoo.build",
    "capture_model": "pipeplan.costmodel.zoo.build",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
