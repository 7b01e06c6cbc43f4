"""Models reachable by name: small in-project ones, and real architectures from ``transformers``.

Public surface::

    from costmodel.zoo import list_models, get_model, ZooModel, ZooError   # the catalogue: no torch
    from costmodel.zoo import build_model, capture_model, BuiltModel        # building: imports torch

Names are imported lazily, so listing the zoo or checking a name does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BuiltModel", "ZooError", "ZooModel", "build_model", "capture_model", "get_model", "list_models"]

_EXPORTS = {
    "ZooError": "costmodel.zoo.catalogue",
    "ZooModel": "costmodel.zoo.catalogue",
    "get_model": "costmodel.zoo.catalogue",
    "list_models": "costmodel.zoo.catalogue",
    "BuiltModel": "costmodel.zoo.build",
    "build_model": "costmodel.zoo.build",
    "capture_model": "costmodel.zoo.build",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
