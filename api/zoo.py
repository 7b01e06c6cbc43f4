"""The model zoo as the service knows it: the torch-free catalogue (:mod:`pipeplan.costmodel.zoo.catalogue`),
read in the server process, which never imports torch (building a model is the workers' job)."""

from __future__ import annotations

from typing import Any

from pipeplan.api.errors import ApiError

__all__ = ["ZooCatalog", "activation_bytes"]

# Upper bounds on the widths of the zoo's models (costmodel/zoo), for sizing a capture from its input
# shape alone: image models keep at most 64 channels at full resolution (ResCNN's stem has 32, the
# HF vision models patchify or stride first); token models at most a 4096-wide MLP hidden state and
# 16 heads of seq_len × seq_len attention scores (GPT-2 and BERT: 3072 and 12); feature models 1024.
_IMAGE_CHANNELS = 64
_TOKEN_WIDTH = 4096
_TOKEN_HEADS = 16
_FEATURE_WIDTH = 1024
_FLOAT = 4  # bytes: the zoo captures in float32


def activation_bytes(entry: dict[str, Any], batch: int, seq_len: int | None, image_size: int | None) -> tuple[int, str]:
    """An upper bound on the largest activation a capture of zoo model ``entry`` allocates, from its
    input sizes alone (nothing is built), and the formula that gives it.

    >>> activation_bytes({"inputs": "image", "family": "builtin"}, 2, None, 64)
    (2097152, 'batch × image_size² × 64 channels × 4 bytes')
    >>> activation_bytes({"inputs": "tokens", "family": "transformers", "meta": True}, 64, 32768, None)
    (0, 'built on the meta device: a capture allocates no activations')
    """
    if entry.get("meta"):  # LLM-scale models: shapes only, whatever the width
        return 0, "built on the meta device: a capture allocates no activations"
    builtin = entry.get("family") == "builtin"
    if entry.get("inputs") == "image":
        side = image_size or (32 if builtin else 224)
        return (batch * side * side * _IMAGE_CHANNELS * _FLOAT,
                f"batch × image_size² × {_IMAGE_CHANNELS} channels × 4 bytes")
    if entry.get("inputs") == "tokens":
        seq = seq_len or (64 if builtin else 128)
        return (batch * max(seq * _TOKEN_WIDTH, _TOKEN_HEADS * seq * seq) * _FLOAT,
                f"batch × max(seq_len × {_TOKEN_WIDTH}, {_TOKEN_HEADS} heads × seq_len²) × 4 bytes")
    return batch * _FEATURE_WIDTH * _FLOAT, f"batch × {_FEATURE_WIDTH} features × 4 bytes"


class ZooCatalog:
    """The zoo's entries as the service lists them."""

    def __init__(self) -> None:
        from pipeplan.costmodel.zoo.catalogue import list_models

        self._models = [{"name": m.name, "family": m.family, "inputs": m.inputs, "description": m.description,
                         "meta": m.meta} for m in list_models()]

    async def models(self) -> list[dict[str, Any]]:
        return [dict(m) for m in self._models]

    async def canonical_name(self, name: str, batch: int = 1, seq_len: int | None = None,
                             image_size: int | None = None, max_bytes: int | None = None) -> str:
        """The zoo's spelling of ``name`` (case-insensitive); a 422 listing the names otherwise, or
        naming the limit when a capture at these sizes would allocate more than ``max_bytes``."""
        models = await self.models()
        wanted = name.strip().lower()
        for m in models:
            if m["name"] == wanted:
                size, formula = activation_bytes(m, batch, seq_len, image_size)
                if max_bytes is not None and size > max_bytes:
                    raise ApiError(422, f"model {m['name']!r} at batch {batch}, seq_len {seq_len}, image_size "
                                   f"{image_size} needs activations of about {size} bytes ({formula}), over this "
                                   f"service's limit of {max_bytes} bytes (PIPEPLAN_MAX_CAPTURE_BYTES); ask for a "
                                   "smaller batch or input size", ["body", "model"], "too_large")
                return str(m["name"])
        raise ApiError(422, f"unknown model {name!r}: the zoo has {', '.join(m['name'] for m in models)} "
                       "(or send a graph document as model.graph)", ["body", "model", "name"])
