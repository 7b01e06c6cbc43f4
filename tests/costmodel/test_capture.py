"""Graph capture: exact FLOPs against FlopCounterMode, real DAG edges, names, and errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from pipeplan.costmodel.capture import CaptureError, capture, parse_granularity
from pipeplan.costmodel.zoo import build_model, capture_model

SMALL = ["mlp", "rescnn", "tinygpt", "inception"]
REAL = ["gpt2", "bert-base", "vit-base", "resnet-50", "convnext-tiny"]


def eager_flops(model: nn.Module, args: tuple) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(*args)
    return int(counter.get_total_flops())


@pytest.mark.parametrize("granularity", ["leaf", "block", "depth:1", "depth:2"])
@pytest.mark.parametrize("name", SMALL)
def test_small_zoo_flops_equal_flop_counter(name: str, granularity: str) -> None:
    built = build_model(name, batch_size=2)
    graph = capture(built.model, built.args, granularity=granularity, name=name)
    assert graph.total_flops == eager_flops(built.model, built.args) > 0
    graph.validate()


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL)
def test_real_architectures_flops_equal_flop_counter(name: str) -> None:
    built = build_model(name, batch_size=1, seq_len=32, image_size=64)
    expected = eager_flops(built.model, built.args)
    if name == "bert-base":  # the zoo returns the hidden states: the pooler (768×768 on [CLS]) is dead
        expected -= 2 * 768 * 768
    for granularity in ("leaf", "block"):
        graph = capture(built.model, built.args, granularity=granularity, name=name)
        assert graph.total_flops == expected > 0, granularity
        assert ("pooler.dense" in graph.meta.get("dropped_dead", [])) == (name == "bert-base"), granularity
    # block granularity groups each repeated block (12 transformer layers, 16 bottlenecks …)
    blocks = [layer for layer in graph.layers if layer.kind == "block"]
    assert len(blocks) == {"gpt2": 12, "bert-base": 12, "vit-base": 12, "resnet-50": 16,
                           "convnext-tiny": 18}[name]


def test_mlp_is_a_chain_with_exact_layer_features() -> None:
    graph = capture_model("mlp", 2)
    assert graph.is_chain
    assert [layer.name for layer in graph.layers] == [f"net.{i}" for i in range(9)]
    fc = graph["net.0"]  # Linear(256, 512) on a batch of 2, float32
    assert fc.kind == "linear" and fc.module_type == "Linear"
    assert fc.flops == 2 * 2 * 256 * 512
    assert fc.param_bytes == (512 * 256 + 512) * 4
    assert fc.bytes_read == 2 * 256 * 4 + fc.param_bytes
    assert fc.bytes_written == fc.activation_bytes == 2 * 512 * 4
    assert fc.input_shapes == [[2, 256]] and fc.output_shapes == [[2, 512]]
    assert fc.intensity == pytest.approx(fc.flops / (fc.bytes_read + fc.bytes_written))
    assert graph.edge_bytes("net.0", "net.1") == 2 * 512 * 4
    assert graph["net.1"].kind == "activation" and graph["net.1"].flops == 0
    assert graph.inputs[0].shape == [2, 256] and graph.inputs[0].layers == ["net.0"]
    assert graph.outputs[0].layers == ["net.8"]


def test_residual_skips_are_edges() -> None:
    graph = capture_model("rescnn", 2)
    # identity shortcut: the block's input goes straight to the residual add
    assert set(graph.predecessors("blocks.0:add")) == {"stem.2", "blocks.0.bn2"}
    assert graph.edge_bytes("stem.2", "blocks.0:add") == 2 * 32 * 32 * 32 * 4
    # projection shortcut: the block input feeds both conv1 and the 1x1 shortcut conv
    assert set(graph.successors("blocks.0.relu2")) == {"blocks.1.conv1", "blocks.1.shortcut.0"}
    assert not graph.is_chain


def test_inception_branches_fan_out_and_join() -> None:
    graph = capture_model("inception", 2)
    heads = {"inceptions.0.b1.0", "inceptions.0.b3.0.0", "inceptions.0.b5.0.0", "inceptions.0.bp.0"}
    assert set(graph.successors("stem.1")) == heads
    tails = {"inceptions.0.b1.1", "inceptions.0.b3.1.1", "inceptions.0.b5.1.1", "inceptions.0.bp.1.1"}
    assert set(graph.predecessors("inceptions.0:cat")) == tails
    assert graph["inceptions.0:cat"].kind == "elementwise"


def test_attention_glue_is_one_layer_with_sdpa_flops() -> None:
    graph = capture_model("tinygpt", 2)
    attn = graph["blocks.0.attn:split"]  # split → views → sdpa → transpose → reshape
    assert attn.kind == "attention" and attn.module_type == "functional"
    batch, heads, seq, head_dim = 2, 4, 64, 32
    assert attn.flops == 4 * batch * heads * seq * seq * head_dim
    assert "aten.scaled_dot_product_attention" in attn.ops
    # residual around the attention: the block input reaches the add directly
    assert "blocks.0:add_1" in graph.successors(graph.predecessors("blocks.0.ln1")[0])


def test_tied_weights_counted_once() -> None:
    built = build_model("tinygpt", 1)
    graph = capture(built.model, built.args)
    distinct = sum(p.numel() * p.element_size() for p in built.model.parameters())
    assert graph.total_param_bytes == distinct
    assert graph["tok"].param_bytes == graph["head"].param_bytes == 512 * 128 * 4


class _TwiceIndependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.emb(a) + self.emb(b)


class _TwiceChained(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.f = nn.Linear(4, 4)
        self.g = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(self.g(self.f(x)))


def test_module_called_twice() -> None:
    idx = torch.tensor([[1, 2]])
    graph = capture(_TwiceIndependent(), (idx, idx))
    assert "emb" in graph and "emb@1" not in graph
    chained = capture(_TwiceChained(), (torch.randn(3, 4),))
    assert [layer.name for layer in chained.layers] == ["f", "g", "f@1"]
    assert chained.is_chain
    assert chained.total_flops == 3 * 2 * 3 * 4 * 4


class _DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # branching on a value cannot be exported
            return F.relu(x)
        return x


def test_unexportable_model_is_refused_with_its_name() -> None:
    with pytest.raises(CaptureError, match="_DataDependent"):
        capture(_DataDependent(), (torch.randn(2, 2),))


def test_a_decoder_that_returns_its_cache_is_refused_with_the_fix() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=16)  # use_cache defaults to True
    tokens = torch.randint(0, 64, (1, 8))
    with pytest.raises(CaptureError, match=r"(?s)LlamaForCausalLM.*DynamicCache.*use_cache=False") as refused:
        capture(LlamaForCausalLM(config).eval(), (tokens,))
    assert "\n(the model returns its key/value cache" in str(refused.value)
    # the fix it names works: the same decoder captures with its cache turned off
    assert len(capture(LlamaForCausalLM(config).eval(), (tokens,), {"use_cache": False}).layers) > 5


@pytest.mark.parametrize("text", ["", "leaves", "depth:0", "depth:-1", "depth"])
def test_bad_granularity(text: str) -> None:
    with pytest.raises(CaptureError, match="granularity"):
        parse_granularity(text)


def test_granularity_parsing() -> None:
    assert parse_granularity("LEAF") == ("leaf", None)
    assert parse_granularity("depth:3") == ("depth", 3)


def test_capture_leaves_weights_untouched() -> None:
    built = build_model("rescnn", 1)
    before = {k: v.clone() for k, v in built.model.state_dict().items()}
    capture(built.model, built.args)
    after = built.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
