"""A KV context given when capturing a decoder (``--kv-context``) is counted in each stage's memory."""

from __future__ import annotations

import pytest

from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.source import capture_source
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.simulate import evaluate
from tests.cli_run import run


def _stage_memory(graph: ModelGraph) -> int:
    problem = Problem(graph, load_cluster("local-cpu"), options=PlanOptions(microbatches=4))
    return evaluate(problem, {layer.name: "cpu0" for layer in graph.layers}).stages[0].memory


def test_a_kv_cache_adds_context_x_batch_x_microbatches_x_key_value_bytes() -> None:
    # llama_gqa: 2 layers, 2 key/value heads of 8 dims, fp32: (16 + 16) x 4 B = 128 B per layer per token.
    per_token = 2 * 128
    graph = capture_source("tests.tiny_models:llama_gqa", 2, kv_context=4096)
    assert graph.meta["kv_context"] == 4096 and sum(graph.meta["kv_bytes_per_token"].values()) == per_token
    plain = capture_source("tests.tiny_models:llama_gqa", 2)
    assert "kv_context" not in plain.meta and "kv_bytes_per_token" not in plain.meta
    assert _stage_memory(graph) - _stage_memory(plain) == 4096 * 2 * 4 * per_token


def test_a_kv_context_for_a_model_without_key_value_projections_is_refused() -> None:
    with pytest.raises(ValueError, match="tinygpt has no k_proj/v_proj projections"):
        capture_source("tinygpt", 1, kv_context=64)
    with pytest.raises(ValueError, match="at least 1 token, got 0"):
        capture_source("tests.tiny_models:llama_gqa", 2, kv_context=0)
    result = run("plan", "tinygpt", "--cluster", "local-cpu", "--kv-context", "64")
    assert result.returncode == 2 and "no k_proj/v_proj projections to cache" in result.stderr
