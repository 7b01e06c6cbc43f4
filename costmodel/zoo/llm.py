"""Models too large to build for real, built on the meta device from their published configurations.

A 70B-parameter decoder is 140 GB of bf16 weights; planning it needs none of them.  Each model here
is constructed under ``torch.device("meta")``: every parameter has a shape and a dtype but no
storage, so building Llama-2-70B takes a second and a few MB, and ``torch.export`` traces it with
fake tensors as it traces any model.  Such a model cannot *run* (its outputs have no values); it
exists to be captured, planned and compared.

Configurations are written out here (the published hyper-parameters; nothing is downloaded):

- Llama-2 7B and 13B (multi-head attention) and 70B (grouped-query attention, 8 KV heads) —
  Touvron et al., "Llama 2", 2023, table 1 and the released ``config.json`` files;
- Llama-3 8B (grouped-query attention, 8 KV heads, 128k vocabulary);
- Mixtral 8x7B (8 experts, 2 routed per token, grouped-query attention) — Jiang et al., 2024;
- BERT-large (Devlin et al., 2019) and ViT-H/14 (Dosovitskiy et al., 2021) as large encoders.

``num_layers`` builds the same architecture with fewer blocks, for tests that must run the model
for real (``device="cpu"``) or capture it quickly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from pipeplan.costmodel.zoo.catalogue import get_model
from pipeplan.costmodel.zoo.hf import _first_output

__all__ = ["LLM_MODELS", "LLMSpec", "build_llm"]


@dataclass(frozen=True)
class LLMSpec:
    config: str  # transformers config class
    model: str  # transformers model class (input kind and description: the catalogue's)
    hyper: dict[str, Any] = field(default_factory=dict)  # config keywords: the published architecture
    dtype: torch.dtype = torch.bfloat16  # what the model is served in
    layers_key: str = "num_hidden_layers"


_LLAMA2 = {"vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5}

LLM_MODELS: dict[str, LLMSpec] = {
    "llama-7b": LLMSpec("LlamaConfig", "LlamaForCausalLM",
                        {**_LLAMA2, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                         "num_attention_heads": 32, "num_key_value_heads": 32}),
    "llama-13b": LLMSpec("LlamaConfig", "LlamaForCausalLM",
                         {**_LLAMA2, "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40,
                          "num_attention_heads": 40, "num_key_value_heads": 40}),
    "llama-70b": LLMSpec("LlamaConfig", "LlamaForCausalLM",
                         {**_LLAMA2, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                          "num_attention_heads": 64, "num_key_value_heads": 8}),
    "llama3-8b": LLMSpec("LlamaConfig", "LlamaForCausalLM",
                         {"vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
                          "rope_theta": 500000.0, "hidden_size": 4096, "intermediate_size": 14336,
                          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8}),
    "mixtral-8x7b": LLMSpec("MixtralConfig", "MixtralForCausalLM",
                            {"vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
                             "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                             "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8,
                             "num_experts_per_tok": 2, "rope_theta": 1e6}),
    "bert-large": LLMSpec("BertConfig", "BertModel",
                          {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                           "intermediate_size": 4096}, torch.float16),
    "vit-huge": LLMSpec("ViTConfig", "ViTForImageClassification",
                        {"hidden_size": 1280, "num_hidden_layers": 32, "num_attention_heads": 16,
                         "intermediate_size": 5120, "patch_size": 14, "num_labels": 1000}, torch.float16),
}

# Defaults for the example input: LLMs are planned for prompts, not 128-token snippets.
DEFAULT_SEQ_LEN = {"bert-large": 512}
_DECODER_SEQ_LEN = 1024


def default_seq_len(name: str) -> int:
    return DEFAULT_SEQ_LEN.get(name, _DECODER_SEQ_LEN)


def build_llm(name: str, batch_size: int, seq_len: int | None = None, image_size: int = 224, *,
              device: str = "meta", num_layers: int | None = None,
              dtype: torch.dtype | None = None) -> tuple[nn.Module, tuple[Any, ...]]:
    """Build zoo model ``name`` and an example input, on ``device`` (meta: nothing materialised).

    >>> model, (ids,) = build_llm("llama-70b", 2, 16)
    >>> ids.device.type, tuple(ids.shape), sum(p.numel() for p in model.parameters()) // 10**9
    ('meta', (2, 16), 68)
    """
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(f"model {name!r} needs the 'transformers' package: pip install 'pipeplan[models]'") from exc
    spec = LLM_MODELS[name]
    hyper = dict(spec.hyper)
    if num_layers is not None:
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        hyper[spec.layers_key] = num_layers
    inputs = get_model(name).inputs
    if inputs == "image":
        hyper["image_size"] = image_size
    config = getattr(transformers, spec.config)(**hyper)
    # Whole-sequence inference (a prompt's prefill): no KV cache object in the traced graph.  The
    # cache a server keeps is counted by pipeplan.costmodel.memory from the K and V projections instead.
    config.use_cache = False
    torch_dtype = dtype or spec.dtype
    with torch.device(device):
        model = getattr(transformers, spec.model)(config)
    model.to(torch_dtype).eval()
    seq = seq_len or default_seq_len(name)
    if inputs == "tokens":
        # Token ids do not change FLOPs or bytes; zeros are valid ids for every vocabulary.
        x = torch.zeros(batch_size, seq, dtype=torch.long, device=device)
    else:
        x = torch.zeros(batch_size, 3, image_size, image_size, dtype=torch_dtype, device=device)
    return _first_output(model), (x,)


def kv_bytes_per_token(model: nn.Module, graph_layers: list[str]) -> dict[str, int]:
    """Bytes of keys and values cached per token per sequence, by the graph layer that computes them.

    Every ``k_proj``/``v_proj`` Linear of a decoder writes one row of ``out_features`` per token; at
    block or depth granularity the row belongs to the layer whose name is the longest prefix of the
    projection's module path (``model.layers.3`` holds ``model.layers.3.self_attn.k_proj``).
    Encoders have none: an empty dict.
    """
    names = set(graph_layers)
    found: dict[str, int] = {}
    for path, module in model.named_modules():
        if not (isinstance(module, nn.Linear) and path.rsplit(".", 1)[-1] in ("k_proj", "v_proj")):
            continue
        owner, parts = None, path.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in names:
                owner = ".".join(parts[:end])
                break
        if owner is not None:
            found[owner] = found.get(owner, 0) + module.out_features * module.weight.element_size()
    return found
