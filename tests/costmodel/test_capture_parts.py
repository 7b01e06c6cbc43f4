"""A block-granularity capture keeps each block's leaf layers (``Layer.parts``), and the learned
model prices a block as the sum of its parts."""

from __future__ import annotations

import pytest

from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.hardware import Device
from pipeplan.costmodel.registry import load_cost_model
from pipeplan.costmodel.zoo import capture_model

CORE = Device(id="c", type="cpu-core", peak_flops=1.6e11, mem_bandwidth=1.4e10, memory=2**33, cores=[0])


@pytest.fixture(scope="module")
def graphs() -> tuple[ModelGraph, ModelGraph]:
    return capture_model("tinygpt", 2, granularity="leaf"), capture_model("tinygpt", 2, granularity="block")


def test_every_leaf_layer_is_a_part_of_exactly_one_block_layer(graphs: tuple[ModelGraph, ModelGraph]) -> None:
    leaf, block = graphs
    owned = [p.name for la in block.layers for p in (la.parts or [la])]
    assert sorted(owned) == sorted(la.name for la in leaf.layers)
    first = block["blocks.0"]
    assert [p.name for p in first.parts][:2] == ["blocks.0.ln1", "blocks.0.attn.qkv"]
    assert sum(p.flops for p in first.parts) == first.flops
    assert not any(p.parts for la in block.layers for p in la.parts)
    assert all(not la.parts for la in leaf.layers)


def test_parts_round_trip_through_json_and_leaf_graphs_write_none(graphs: tuple[ModelGraph, ModelGraph]) -> None:
    leaf, block = graphs
    assert ModelGraph.from_json(block.to_json()) == block
    assert "parts" not in leaf.to_json()
    doc = block.to_dict()
    doc["layers"][1]["parts"] = "blocks.0.ln1"
    with pytest.raises(Exception, match="parts must be a list"):
        ModelGraph.from_dict(doc)


def test_learned_prices_a_block_as_the_sum_of_its_leaf_layers(graphs: tuple[ModelGraph, ModelGraph]) -> None:
    leaf, block = graphs
    model = load_cost_model("learned")
    by_leaf = dict(zip((la.name for la in leaf.layers), model.layer_times(leaf.layers, CORE), strict=True))
    for layer, seconds in zip(block.layers, model.layer_times(block.layers, CORE), strict=True):
        assert seconds == pytest.approx(sum(by_leaf[p.name] for p in (layer.parts or [layer])), rel=1e-9)
