"""Canonical JSON and the digests that make identical requests recognisable.

Two requests are identical when they plan the same graph (by content), on the same cluster state
(devices, links, current loads), with the same cost model and options; their keys are then equal.

>>> digest_of({"b": 1, "a": [1.0, 2]}) == digest_of({"a": [1.0, 2], "b": 1})
True
>>> finite({"x": float("inf"), "y": [float("nan"), 2.0]})
{'x': None, 'y': [None, 2.0]}
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, NamedTuple

__all__ = ["KeyParts", "canonical", "digest_of", "digest_text", "finite", "request_key", "zoo_key"]

KEY_VERSION = 1  # bump when what a key covers changes, so old plans are not served for new meanings


def finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None: JSON has no inf or NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def canonical(doc: Any) -> str:
    """Compact JSON with sorted keys: equal documents give equal text."""
    # ASCII only: a lone surrogate in a client's string stays escaped, so the text always encodes.
    return json.dumps(finite(doc), sort_keys=True, separators=(",", ":"))


def digest_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def digest_of(doc: Any) -> str:
    return digest_text(canonical(doc))


def zoo_key(name: str, batch: int, granularity: str, seq_len: int | None, image_size: int | None,
            kv_context: int | None = None) -> str:
    """The key of a zoo capture: the same name and sizes (and KV context) always give the same graph
    (seeded).  ``kv_context`` counts only when set, so the keys of captures without one stay as they were."""
    doc = {"v": KEY_VERSION, "zoo": name.strip().lower(), "batch": batch, "granularity": granularity,
           "seq_len": seq_len, "image_size": image_size}
    if kv_context is not None:
        doc["kv_context"] = kv_context
    return digest_of(doc)


class KeyParts(NamedTuple):
    """What a request's key covers besides its kind and its graph, in :func:`request_key`'s order."""

    cluster: str  # the digest of the cluster's state
    costmodel: str  # the cost model's identity (a learned model's file digest)
    options: dict[str, Any]  # the plan options as the request schema dumps them
    solver: dict[str, Any]  # the solver's limits (pipeplan.api.payloads.SolverLimits.key)


def request_key(kind: str, graph: str, cluster: str, costmodel: str, options: dict[str, Any],
                solver: dict[str, Any]) -> str:
    """The key of a plan or compare request, from digests of its graph and cluster state."""
    return digest_of({"v": KEY_VERSION, "kind": kind, "graph": graph, "cluster": cluster,
                      "costmodel": costmodel, "options": options, "solver": solver})
