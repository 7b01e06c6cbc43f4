"""The pipeplan planning service over HTTP (FastAPI); see docs/api.md.

Public surface::

    from api import create_app, Settings    # the ASGI app and its settings
    # pipeplan serve / pipeplan token create (api.cli), or python -m api serve

Names are imported lazily: ``pipeplan --help`` imports :mod:`api.cli`, and must not pay for FastAPI.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"create_app": "api.main", "Settings": "api.settings"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'api' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
