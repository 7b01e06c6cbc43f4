"""Building zoo models (seeded random weights, an example input) and capturing them as graphs.

>>> built = build_model("mlp", batch_size=4)
>>> tuple(built.args[0].shape)
(4, 256)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pipeplan.costmodel.capture import capture
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.zoo.catalogue import ZooError, get_model
from pipeplan.costmodel.zoo.hf import build_hf
from pipeplan.costmodel.zoo.llm import LLM_MODELS, build_llm, kv_bytes_per_token
from pipeplan.costmodel.zoo.small import MLP, InceptionNet, ResCNN, TinyGPT

__all__ = ["BuiltModel", "build_model", "capture_model"]


@dataclass(frozen=True)
class BuiltModel:
    name: str
    model: nn.Module
    args: tuple[Any, ...]


# The small models' classes; their input kinds and descriptions are in the catalogue.
_SMALL: dict[str, Callable[[], nn.Module]] = {"mlp": MLP, "rescnn": ResCNN, "tinygpt": TinyGPT,
                                              "inception": InceptionNet}



def build_model(name: str, batch_size: int = 1, *, seq_len: int | None = None,
                image_size: int | None = None, seed: int = 0) -> BuiltModel:
    """Build a zoo model with seeded random weights and an example input batch.

    ``seq_len`` (token models, default 128 for transformers, 1024 for the LLMs, 512 for bert-large
    and 64 for tinygpt) and ``image_size`` (image models, default 224 for transformers and 32 for
    small CNNs) shape the example input; the same name, sizes and seed always give the same weights
    and input.  The models of :mod:`pipeplan.costmodel.zoo.llm` (``llama-70b``, ``mixtral-8x7b`` …) are
    built on the meta device: they capture and plan, but hold no weights and cannot run.
    """
    entry = get_model(name)
    if batch_size < 1:
        raise ZooError(f"batch size must be at least 1, got {batch_size}")
    for label, value in (("seq_len", seq_len), ("image_size", image_size)):
        if value is not None and value < 1:
            raise ZooError(f"{label} must be at least 1, got {value}")
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    if entry.name in LLM_MODELS:
        llm, llm_args = build_llm(entry.name, batch_size, seq_len, image_size or 224)
        return BuiltModel(entry.name, llm, llm_args)
    if entry.family == "transformers":
        hf_model, hf_args = build_hf(entry.name, batch_size, seq_len or 128, image_size or 224, generator)
        return BuiltModel(entry.name, hf_model, hf_args)
    model = _SMALL[entry.name]().eval()
    if entry.inputs == "features":
        args: tuple[Any, ...] = (torch.randn(batch_size, 256, generator=generator),)
    elif entry.inputs == "image":
        size = image_size or 32
        args = (torch.randn(batch_size, 3, size, size, generator=generator),)
    else:
        seq = seq_len or 64
        if seq > 256:
            raise ZooError(f"tinygpt supports seq_len up to 256, got {seq}")
        args = (torch.randint(0, 512, (batch_size, seq), generator=generator),)
    return BuiltModel(entry.name, model, args)


def capture_model(name: str, batch_size: int = 1, *, granularity: str = "leaf",
                  seq_len: int | None = None, image_size: int | None = None,
                  seed: int = 0, kv_context: int | None = None) -> ModelGraph:
    """Build a zoo model and capture it as a :class:`ModelGraph`.

    ``kv_context`` (decoders): serve with a KV cache of that many tokens per sequence; recorded in
    ``meta`` with each layer's key and value bytes per token, for the planner's memory
    (:mod:`pipeplan.costmodel.memory`).
    """
    if kv_context is not None and kv_context < 1:
        raise ZooError(f"kv_context must be at least 1 token, got {kv_context}")
    built = build_model(name, batch_size, seq_len=seq_len, image_size=image_size, seed=seed)
    graph = capture(built.model, built.args, granularity=granularity, name=built.name)
    graph.meta.update({"zoo": built.name, "seed": seed, "seq_len": seq_len,
                       "image_size": image_size})
    if kv_context is not None:
        # What pipeplan.costmodel.memory needs to count a KV cache of kv_context tokens at any granularity.
        per_token = kv_bytes_per_token(built.model, [layer.name for layer in graph.layers])
        if not per_token:
            raise ZooError(f"{built.name} has no key/value projections to cache: kv_context applies to decoders")
        graph.meta.update({"kv_context": kv_context, "kv_bytes_per_token": per_token})
    return graph
