"""LLM-scale zoo models (pipeplan.costmodel.zoo.llm): built on the meta device, captured, planned."""

from __future__ import annotations

import pytest
import torch

from pipeplan.costmodel.capture import capture
from pipeplan.costmodel.zoo import ZooError, build_model, capture_model, get_model, list_models
from pipeplan.costmodel.zoo.llm import LLM_MODELS, build_llm, kv_bytes_per_token

pytest.importorskip("transformers")

# Parameter counts of the released checkpoints (their model cards / config.json).
PUBLISHED = {"llama-7b": 6_738_415_616, "llama-13b": 13_015_864_320, "llama-70b": 68_976_648_192,
             "llama3-8b": 8_030_261_248, "mixtral-8x7b": 46_702_792_704, "bert-large": 335_141_888,
             "vit-huge": 632_045_800}


def test_listed_by_name() -> None:
    names = [m.name for m in list_models()]
    assert set(PUBLISHED) <= set(names) and set(LLM_MODELS) == set(PUBLISHED)
    assert get_model("Llama-70B").family == "transformers"
    assert get_model("vit-huge").inputs == "image"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_sizes_on_meta_device(name: str) -> None:
    built = build_model(name, 2, seq_len=16)
    params = list(built.model.parameters())
    assert sum(p.numel() for p in params) == PUBLISHED[name]
    assert all(p.is_meta for p in params) and built.args[0].is_meta  # nothing materialised
    assert {p.dtype for p in params} == {LLM_MODELS[name].dtype}


def test_default_sequence_and_bad_layers() -> None:
    assert tuple(build_model("llama-7b", 3).args[0].shape) == (3, 1024)
    with pytest.raises(ValueError, match="num_layers must be at least 1"):
        build_llm("llama-7b", 1, 8, num_layers=0)
    with pytest.raises(ZooError, match="kv_context must be at least 1"):
        capture_model("llama-7b", 1, kv_context=0)


def test_capture_counts_meta_weights_and_flops_exactly() -> None:
    model, args = build_llm("llama-70b", 2, 32, num_layers=2)
    graph = capture(model, args, name="llama-70b")
    numel = sum(t.numel() for t in [*model.parameters(), *model.buffers()])  # buffers: rotary frequencies
    assert graph.total_param_bytes == 2 * numel  # bf16; meta storages told apart (all data_ptr 0)
    tokens = 2 * 32
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert sum(layer.flops for layer in graph.layers if layer.module_type == "Linear") == 2 * tokens * linear
    k_proj = graph["model.layers.0.self_attn.k_proj"]
    assert k_proj.param_bytes == 8192 * 1024 * 2  # grouped-query attention: 8 KV heads of 128


def test_mixture_of_experts_counts_routed_experts_only() -> None:
    model, args = build_llm("mixtral-8x7b", 1, 16, num_layers=1)
    graph = capture(model, args, name="mixtral-8x7b")
    experts = [layer for layer in graph.layers if ".mlp.experts" in layer.name]
    # 2 of 8 experts per token, each three 4096 × 14336 matmuls; all 8 experts' weights held.
    assert sum(layer.flops for layer in experts) == 2 * 16 * 2 * 3 * 4096 * 14336
    assert sum(layer.param_bytes for layer in experts) == 8 * 3 * 4096 * 14336 * 2
    assert graph["model.layers.0.mlp.gate"].flops == 2 * 16 * 4096 * 8


def test_kv_bytes_per_token_by_owning_layer() -> None:
    model, args = build_llm("llama-70b", 1, 8, num_layers=2)
    block = capture(model, args, granularity="block")
    assert kv_bytes_per_token(model, [layer.name for layer in block.layers]) == {
        "model.layers.0": 2 * 1024 * 2, "model.layers.1": 2 * 1024 * 2}
    assert kv_bytes_per_token(*build_llm("bert-large", 1, 8, num_layers=1)[:1], ["encoder"]) == {}


@pytest.mark.slow
def test_13b_fits_the_heterogeneous_cluster_it_was_refused_on() -> None:
    from pipeplan.costmodel.cluster import load_cluster
    from pipeplan.planner.problem import Problem

    graph = capture_model("llama-13b", 4, seq_len=1024)
    problem = Problem(graph, load_cluster("hetero-a100-t4"))
    problem.check_fits()  # used to say 205.8 GiB against 171 GiB
    need = problem.memory(list(range(problem.n_layers)))
    assert graph.total_param_bytes <= need < graph.total_param_bytes + 2.5 * 2**30  # was 205.8 GiB
