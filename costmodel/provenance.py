"""Which cost model made a plan, exactly: a spec to load it with and the digest of its file.

A plan made with ``--costmodel mine.zip`` used to record only the model's kind (``learned``), so
``pipeplan run`` re-predicted with the shipped model and reported an error that was the difference
between two models, not between a prediction and a run.  Now
:func:`pipeplan.costmodel.registry.load_cost_model` stamps every model read from a file with

- ``spec``: what loads it again: the name given (``learned``, ``learned-xeon``), or the file's
  absolute path, so that a run started from another directory finds it;
- ``digest``: ``"sha256:…"`` of the file, so that a retrained or replaced file is noticed;

a plan copies both (``costmodel``, ``costmodel_digest``), and :func:`load_recorded_cost_model`
loads that very model again, or raises a ``ValueError`` saying what differs.
"""

from __future__ import annotations

import copy
import hashlib
from functools import lru_cache
from pathlib import Path

from pipeplan.costmodel.base import CostModel

__all__ = ["file_digest", "load_recorded_cost_model", "stamped"]


@lru_cache(maxsize=16)
def _digest(path: str, version: tuple[int, int, int, int]) -> str:
    del version  # part of the cache key only: a changed file is hashed again
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def file_digest(path: Path) -> str:
    """``"sha256:…"`` of a file's content, hashed once per version of the file."""
    from pipeplan.costmodel.registry import file_version

    return _digest(str(path.resolve()), file_version(path))


def stamped(model: CostModel, spec: str, path: Path) -> CostModel:
    """A shallow copy of ``model`` (loaded from ``path`` for ``spec``) carrying its spec and digest.

    A copy, because loaded models are cached and shared: ``learned`` and ``learned-xeon`` may be
    the same file, and each caller must see the spec it gave.
    """
    from pipeplan.costmodel.registry import SHIPPED_NAMES

    out = copy.copy(model)
    out.spec = spec if spec == "learned" or spec in SHIPPED_NAMES else str(path.resolve())
    out.digest = file_digest(path)
    return out


def load_recorded_cost_model(spec: str, digest: str | None) -> CostModel:
    """The cost model a plan recorded: ``spec`` whose file has ``digest``.

    ``digest`` is None for a model without a file (``analytic``) and in plans written before
    digests were recorded: then ``spec`` is all there is, and is trusted.  A shipped name
    (``learned``) that resolves to another file on this machine (another CPU) is found among the
    shipped models by its digest.  Raises ``ValueError`` naming the file and both digests when the
    exact model is not here, or when the file is missing.

    >>> load_recorded_cost_model("analytic", None).name
    'analytic'
    """
    from pipeplan.costmodel.registry import SHIPPED, load_cost_model

    try:
        model = load_cost_model(spec)
    except ValueError as exc:
        raise ValueError(f"the plan's cost model is not here: {exc}") from None
    if digest is None or model.digest == digest:
        return model
    for shipped in SHIPPED:
        if shipped.model.is_file() and file_digest(shipped.model) == digest:
            return load_cost_model(f"learned-{shipped.name}")
    raise ValueError(f"cost model {spec!r} is not the one the plan was made with: the plan recorded {digest}, "
                     f"the file now has {model.digest}; restore that file, or plan again with this one")
