"""The pipeplan planning service over HTTP (FastAPI); see docs/api.md.

Public surface::

    from pipeplan.api import create_app, Settings    # the ASGI app and its settings
    # pipeplan serve / pipeplan token create (pipeplan.api.cli), or python -m pipeplan.api serve

Names are imported lazily: ``pipeplan --help`` imports :mod:`pipeplan.api.cli`, and must not pay for FastAPI.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"create_app": "pipeplan.api.main", "Settings": "pipeplan.api.settings"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


# The folder is installed as pipeplan.api; imported under another name it would be a second copy.
if __name__ != "pipeplan.api":
    raise ImportError(f"import pipeplan.api, not {__name__}: pipeplan's packages live under one namespace")
