"""Kernel workspace (convolutions, max pooling) and views of one storage (a MoE's chunked gate-and-up
projection) in the liveness memory of pipeplan.costmodel.memory, checked against RSS."""

from __future__ import annotations

import sys

import pytest

from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.costmodel.memory import kernel_workspace, liveness, shares_storage
from tests.memory_probe import measure_in_child

MiB = 2**20


def conv(x: list[int], y: list[int], area: int) -> Layer:
    """A float32 convolution from shape x to shape y with a kernel of ``area`` positions."""
    out = 4 * y[0] * y[1] * y[2] * y[3]
    return Layer("c", "conv", "Conv2d", 0, 0, 0, out, 4 * y[1] * x[1] * area, out, 1,
                 input_shapes=[x], output_shapes=[y], ops=["aten.conv2d"])


def test_convolution_workspace_is_its_larger_tensor() -> None:
    assert kernel_workspace(conv([64, 32, 32, 32], [64, 64, 16, 16], 9)) == 4 * 64 * 32 * 32 * 32  # input larger
    assert kernel_workspace(conv([64, 3, 32, 32], [64, 32, 32, 32], 9)) == 4 * 64 * 32 * 32 * 32  # output larger
    assert kernel_workspace(conv([64, 64, 16, 16], [64, 64, 16, 16], 1)) == 4 * 64 * 64 * 16 * 16  # 1×1, batch 64
    assert kernel_workspace(conv([8, 256, 56, 56], [8, 64, 56, 56], 1)) == 0  # 1×1, batch 8: native, no copy


def test_max_pool_workspace_is_its_int64_indices() -> None:
    pool = Layer("p", "pool", "MaxPool2d", 0, 0, 0, 4 * 64 * 120 * 32 * 32, 0, 4 * 64 * 120 * 32 * 32, 1,
                 input_shapes=[[64, 120, 32, 32]], output_shapes=[[64, 120, 32, 32]], ops=["aten.max_pool2d"])
    assert kernel_workspace(pool) == 8 * 64 * 120 * 32 * 32
    assert kernel_workspace(Layer("r", "activation", "ReLU", 0, 0, 0, 4, 0, 4, 1, input_shapes=[[1]],
                                  output_shapes=[[1]], ops=["aten.relu"])) == 0


def test_chunked_outputs_live_until_their_last_reader() -> None:
    """g writes 2 chunks of 10 bytes (one 20-byte storage); a reads one chunk, b the other later."""
    g = ModelGraph("chunks", batch_size=1)
    g.add_layer(Layer("g", "matmul", "functional", 0, 1, 0, 20, 0, 20, 1, ops=["aten._grouped_mm", "aten.chunk",
                                                                               "getitem", "getitem"]))
    g.add_layer(Layer("a", "activation", "SiLU", 1, 1, 0, 10, 0, 10, 1, ops=["aten.silu"]))
    g.add_layer(Layer("b", "elementwise", "functional", 2, 1, 0, 10, 0, 10, 1, ops=["aten.mul"]))
    g.add_edge("g", "a", 10)
    g.add_edge("g", "b", 10)
    g.add_edge("a", "b", 10)
    assert shares_storage(g.layers[0]) and not shares_storage(g.layers[1])
    # at b: the whole 20-byte storage (not only the chunk b reads), a's output and b's own
    assert liveness(g).live == [20, 30, 40]


# predicted ÷ measured before these terms (benchmarks/README.md): rescnn 0.75, inception 0.62, mixtral 0.76
PROBED = ["rescnn:64:0", "inception:64:0", "mixtral-8x7b:1:128"]  # the 1×1 exception: exact bytes above


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_conv_and_moe_peaks_match_rss_of_the_exported_program() -> None:
    rows = measure_in_child(PROBED)
    assert len(rows) == len(PROBED)
    for name, predicted, measured in rows:
        assert measured > MiB, name
        assert abs(predicted - measured) <= 0.1 * measured, (name, predicted, measured)
