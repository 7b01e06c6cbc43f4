"""Which cost model a request may name: ``analytic``, ``learned`` (shipped for this CPU), ``learned-NAME``
(shipped for CPU NAME), or a file the operator offers.

Other learned models are named by file name only, and only inside ``PIPEPLAN_COSTMODEL_DIR``: model
files are never unpickled (zip of JSON and skops, with an allowlist of types), but no request may
make the service read a file of its choosing.  The server only resolves a name (and hashes the
file, for the plan's key); the workers load models (a learned one takes seconds and hundreds of MB).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pipeplan.api.errors import ApiError

__all__ = ["CostModels", "ResolvedCostModel"]

_LOC = ["body", "costmodel"]


@dataclass(frozen=True)
class ResolvedCostModel:
    name: str  # as the request wrote it
    spec: str  # what pipeplan.costmodel.registry.load_cost_model takes
    identity: str  # what a plan's key depends on: the name and, for a file, its content


@lru_cache(maxsize=16)
def _hash(path: str, version: tuple[int, int, int, int]) -> str:
    del version  # part of the cache key only
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _content_hash(path: Path) -> str:
    """The file's SHA-256, read once per version of the file (not once per request)."""
    from pipeplan.costmodel.registry import file_version

    return _hash(str(path), file_version(path))


class CostModels:
    def __init__(self, directory: Path | None) -> None:
        self.directory = directory.resolve() if directory is not None else None

    def resolve(self, name: str) -> ResolvedCostModel:
        if name == "analytic":
            return ResolvedCostModel(name, "analytic", "analytic")
        from pipeplan.costmodel.registry import SHIPPED_NAMES, resolve_model_path

        shipped = ", ".join(repr(n) for n in ["learned", *SHIPPED_NAMES])
        if name == "learned" or name in SHIPPED_NAMES:  # before the offered files: these names are reserved
            path = resolve_model_path(name)
            return ResolvedCostModel(name, name, f"{name}@{_content_hash(path)}")
        if self.directory is None:
            raise ApiError(422, f"cost model {name!r}: this service offers only 'analytic' and the shipped "
                           f"models {shipped} (no PIPEPLAN_COSTMODEL_DIR is set)", _LOC)
        path = (self.directory / name).resolve()
        if path.parent != self.directory or not path.is_file():
            offered = sorted(p.name for p in self.directory.iterdir() if p.is_file())
            raise ApiError(422, f"cost model {name!r}: not 'analytic', one of {shipped} or one of the offered "
                           f"model files ({', '.join(offered) or 'none'})", _LOC)
        return ResolvedCostModel(name, str(path), f"{name}@{_content_hash(path)}")
