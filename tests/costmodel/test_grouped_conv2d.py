"""Depthwise and grouped 2-D convolutions in the sweep, and the feature that tells them from dense ones.

Until 2026-11-30 no sweep timed a grouped 2-D convolution: MobileNets' and OCR backbones' depthwise layers
were priced from dense convolutions of their FLOPs, and PP-OCRv5's detector came out at 60% of its time,
most of the gap in depthwise 1×1 convolutions that one CPU thread runs one group at a time.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipeplan.costmodel.capture import capture_program
from pipeplan.costmodel.conv_shapes import grouped_conv_flops
from pipeplan.costmodel.dataset import _conv_reduction, layer_features
from pipeplan.costmodel.layerspecs import _size_ok, default_sweep, parse_spec
from pipeplan.costmodel.profile import targets_from_specs


def _reduction(layer) -> float:
    return 10 ** _conv_reduction(layer_features(layer)) - 1


@pytest.mark.parametrize("key, groups, reduction", [
    ("dwconv2d:b=2,c=384,k=1,s=1,hw=4,cpg=1", 384, 1),  # PP-LCNetV3's depthwise 1×1 branch
    ("dwconv2d:b=2,c=96,k=3,s=2,hw=14,cpg=1", 96, 9),  # a MobileNet's strided depthwise 3×3
    ("dwconv2d:b=1,c=128,k=3,s=1,hw=8,cpg=16", 8, 16 * 9),  # a RegNet's grouped 3×3, groups of 16
    ("dwconv2d:b=1,c=64,k=5,s=1,hw=4,cpg=1", 64, 25),  # a kernel wider than its map, over the padding
])
def test_grouped_convolutions_are_profiled_with_their_geometry(key: str, groups: int, reduction: int) -> None:
    spec = parse_spec(key)
    module, (x,) = spec.build()
    assert isinstance(module, nn.Conv2d) and module.groups == groups
    with torch.no_grad():
        assert module(x).shape[-1] == (x.shape[-1] - 1) // module.stride[0] + 1
    (target,) = targets_from_specs([spec])
    assert target.layer.kind == "conv" and "aten.conv2d" in target.layer.ops
    assert target.layer.flops == grouped_conv_flops(spec.kind, dict(spec.params))  # what the size limit counts
    assert _reduction(target.layer) == pytest.approx(reduction)


def test_a_dense_convolution_of_the_same_kernel_reads_its_channels_in_the_reduction() -> None:
    graph = capture_program(nn.Conv2d(64, 64, 3, padding=1).eval(), (torch.randn(1, 64, 8, 8),)).graph
    assert _reduction(graph.layers[0]) == pytest.approx(64 * 9)
    linear = capture_program(nn.Linear(8, 8).eval(), (torch.randn(2, 8),)).graph
    assert _reduction(linear.layers[0]) == 0  # not a convolution


def test_the_sweep_draws_depthwise_and_grouped_shapes_that_divide_their_channels() -> None:
    specs = default_sweep(per_kind=120, kinds=["dwconv2d"])
    params = [dict(s.params) for s in specs]
    assert len(specs) == 120 and all(p["c"] % p["cpg"] == 0 for p in params)
    assert sum(p["cpg"] == 1 for p in params) > len(params) / 3  # depthwise, most of all
    assert any(p["k"] == 1 and p["cpg"] == 1 and p["s"] == 1 for p in params)  # the slow path on one thread
    assert not _size_ok("dwconv2d", {"b": 1, "c": 24, "k": 3, "s": 1, "hw": 8, "cpg": 16})  # 24 ÷ 16


def test_the_zen5_model_prices_depthwise_1x1_layers_as_they_were_measured() -> None:
    """The Zen 5's profile holds depthwise 1×1 shapes, which one thread runs a group at a time (a few µs a
    channel); its model, trained with the reduction feature, prices them within a factor of 1.5 in the median,
    not at the hundredth of their time a dense convolution of their FLOPs would cost."""
    import statistics

    from pipeplan.costmodel.dataset_files import read_dataset
    from pipeplan.costmodel.learned import LearnedCostModel
    from pipeplan.costmodel.registry import SHIPPED, load_cost_model

    (zen5,) = [s for s in SHIPPED if s.name == "epyc"]
    model = load_cost_model("learned-epyc")
    assert isinstance(model, LearnedCostModel) and "log_conv_reduction" in model.fitted.numeric
    rows = [r for r in read_dataset(zen5.dataset) if r["contention"] == "idle" and r["config"].startswith("dwconv2d:")
            and ",k=1,s=1," in r["config"] and r["config"].endswith(",cpg=1")]
    assert len(rows) >= 5
    ratios = model.predict_rows(rows) / [float(r["time_s"]) for r in rows]
    assert 1 / 1.5 < statistics.median(ratios) < 1.5, sorted(ratios)
    per_channel = [float(r["time_s"]) / int(r["config"].split(",c=")[1].split(",")[0]) for r in rows]
    assert statistics.median(per_channel) > 1e-6  # a microsecond and more a group: one small convolution each
