"""What the model zoo holds, without importing torch: names, input kinds and descriptions.

Listing the zoo (``pipeplan models``, ``GET /v1/models``, checking a name) must not pay for torch
or ``transformers``; building a model does (:mod:`pipeplan.costmodel.zoo.build`).  Every model the zoo can
build has exactly one entry here.

>>> sorted(m.name for m in list_models() if m.family == "builtin")
['inception', 'mlp', 'rescnn', 'tinygpt']
>>> get_model("GPT2").inputs, get_model("llama-70b").meta
('tokens', True)
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeplan.errors import UserError

__all__ = ["ZooError", "ZooModel", "get_model", "list_models"]


class ZooError(UserError, ValueError):
    """Unknown model name or bad build options."""


@dataclass(frozen=True)
class ZooModel:
    name: str
    family: str  # "builtin" or "transformers" (the large ones built on the meta device: see zoo.llm)
    inputs: str  # "features", "image", "tokens"
    description: str
    meta: bool = False  # built on the meta device: shapes only, a capture allocates no activations


def _builtin(name: str, inputs: str, description: str) -> ZooModel:
    return ZooModel(name, "builtin", inputs, description)


def _hf(name: str, inputs: str, description: str) -> ZooModel:
    return ZooModel(name, "transformers", inputs, description)


def _meta(name: str, inputs: str, description: str) -> ZooModel:
    return ZooModel(name, "transformers", inputs, description, meta=True)


# Small models first (pipeplan.costmodel.zoo.small), then transformers architectures at their published
# sizes with random weights (zoo.hf), then LLM-scale ones on the meta device (zoo.llm).
_CATALOGUE: tuple[ZooModel, ...] = (
    _builtin("mlp", "features", "5-layer MLP, 256 features in (a chain)"),
    _builtin("rescnn", "image", "residual CNN, 4 basic blocks, 32×32 images (skips)"),
    _builtin("tinygpt", "tokens", "GPT-style decoder, 4 blocks, d=128 (attention, residuals)"),
    _builtin("inception", "image", "Inception-style CNN, 3 four-branch modules (branches)"),
    _hf("gpt2", "tokens", "GPT-2 small (124M), LM head"),
    _hf("bert-base", "tokens", "BERT base (110M), encoder"),
    _hf("vit-base", "image", "ViT-B/16 (86M), 224×224"),
    _hf("resnet-50", "image", "ResNet-50 (25.6M)"),
    _hf("convnext-tiny", "image", "ConvNeXt-T (28.6M)"),
    _meta("llama-7b", "tokens", "Llama-2 7B (6.7B), 32 layers, MHA, bf16, meta device"),
    _meta("llama-13b", "tokens", "Llama-2 13B (13.0B), 40 layers, MHA, bf16, meta device"),
    _meta("llama-70b", "tokens", "Llama-2 70B (69B), 80 layers, GQA 64/8 heads, bf16, meta device"),
    _meta("llama3-8b", "tokens", "Llama-3 8B (8.0B), 32 layers, GQA 32/8 heads, bf16, meta device"),
    _meta("mixtral-8x7b", "tokens", "Mixtral 8x7B (46.7B), MoE 8 experts top-2, GQA 32/8, bf16, meta device"),
    _meta("bert-large", "tokens", "BERT large (335M), 24-layer encoder, fp16, meta device"),
    _meta("vit-huge", "image", "ViT-H/14 (632M), 32-layer encoder, fp16, meta device"),
)


def list_models() -> list[ZooModel]:
    """Every model the zoo can build, small ones first."""
    return list(_CATALOGUE)


def get_model(name: str) -> ZooModel:
    """Look a model up by name, case-insensitively; unknown names list the valid ones."""
    wanted = name.strip().lower()
    for model in _CATALOGUE:
        if model.name == wanted:
            return model
    raise ZooError(f"unknown model {name!r}: choose one of {', '.join(m.name for m in _CATALOGUE)}")
