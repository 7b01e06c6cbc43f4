"""Find a cost model by name: what the CLI's ``--costmodel`` and the service's ``costmodel`` field take.

- ``"analytic"``: the roofline model (no data needed);
- ``"learned"``: the contention-aware model shipped with pipeplan, trained on a profile of a 2-core
  x86 CPU VM (``costmodel/data/``; how it was made is in ``costmodel/data/README.md``);
- anything else: the path of a model file written by ``pipeplan costmodel train``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from costmodel.base import CostModel

__all__ = ["SHIPPED_DATASET", "SHIPPED_MODEL", "load_cost_model", "resolve_model_path"]

_DATA = Path(__file__).parent / "data"
SHIPPED_MODEL = _DATA / "learned-cpu.zip"
SHIPPED_DATASET = _DATA / "profile-cpu.csv"


def resolve_model_path(spec: str) -> Path:
    """The file a learned-model spec names (``"learned"`` is the shipped one)."""
    path = SHIPPED_MODEL if spec == "learned" else Path(spec)
    if not path.is_file():
        raise ValueError(f"cost model {spec!r}: no such model file (use 'analytic', 'learned' or the path "
                         "of a file written by `pipeplan costmodel train`)")
    return path


@lru_cache(maxsize=8)
def _load_learned(path: str, mtime: float) -> CostModel:
    from costmodel.learned import LearnedCostModel

    del mtime  # part of the cache key only: a retrained file is read again
    return LearnedCostModel.load(path)


def load_cost_model(spec: str = "analytic") -> CostModel:
    """The cost model named by ``spec``; raises ``ValueError`` naming the problem otherwise.

    >>> load_cost_model("analytic").name
    'analytic'
    """
    from costmodel.analytic import RooflineModel

    if spec == "analytic":
        return RooflineModel()
    path = resolve_model_path(spec)
    return _load_learned(str(path.resolve()), path.stat().st_mtime)
