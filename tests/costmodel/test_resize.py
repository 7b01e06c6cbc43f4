"""Resizing (``F.interpolate``, ``nn.Upsample``: ``aten.upsample_*``): captured as layers of their own
and swept as a layer type, so a cost model prices a decoder's upsampling by what it is."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeplan.costmodel.capture import capture
from pipeplan.costmodel.dataset import main_op
from pipeplan.costmodel.gpu_sweep import gpu_sweep
from pipeplan.costmodel.layerspecs import RESIZE_MODES, _size_ok, default_sweep, parse_spec, resize_ok
from pipeplan.costmodel.profile import targets_from_specs


class FusionStage(nn.Module):
    """A depth decoder's fusion step, cut down (DPT, GLPN, Depth Anything): a convolution, its output
    upsampled 2× by ``F.interpolate`` and added to the skip connection, then projected."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(width, width, 3, padding=1)
        self.out = nn.Conv2d(width, width, 1)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        up = F.interpolate(self.conv(x), scale_factor=2, mode="bilinear", align_corners=True)
        return self.out(up + skip)


def test_a_resize_after_a_convolution_is_a_layer_of_its_own() -> None:
    x, skip = torch.randn(2, 8, 8, 8), torch.randn(2, 8, 16, 16)
    graph = capture(FusionStage().eval(), (x, skip))
    conv = next(la for la in graph.layers if la.name == "conv")
    # zero-FLOP-looking glue with one producer joins it, but a resize starts a layer of its own: inside
    # the convolution it would be priced at the convolution's rate
    assert "aten.upsample_bilinear2d" not in conv.ops
    (resize,) = [la for la in graph.layers if la.kind == "resize"]
    assert resize.ops[0] == "aten.upsample_bilinear2d" and main_op(resize) == "aten.upsample_bilinear2d"
    # it starts from the tensor it resizes and writes the 4× larger one; the add is not part of it
    assert resize.input_shapes == [[2, 8, 8, 8]] and resize.bytes_written == 2 * 8 * 16 * 16 * 4
    assert "aten.add" not in resize.ops and graph.nx.has_edge("conv", resize.name)


class UpsampleModuleThenGlue(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.Upsample(scale_factor=4, mode="nearest")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.up(self.conv(x)) * 2.0).flatten(2).transpose(1, 2).contiguous()


def test_an_upsample_module_is_a_resize_layer_that_glue_does_not_join() -> None:
    graph = capture(UpsampleModuleThenGlue().eval(), (torch.randn(2, 3, 8, 8),))
    up = next(la for la in graph.layers if la.name == "up")
    assert up.kind == "resize" and up.ops == ["aten.upsample_nearest2d"] and up.flops == 0
    (glue,) = [la for la in graph.layers if la.name not in ("conv", "up")]
    assert glue.ops[0] == "aten.mul" and graph.nx.has_edge("up", glue.name)


class PositionBias(nn.Module):
    """BEiT's relative position bias, cut down: a small table resized to the window, then gathered
    into a bias many times its size.  A leaf module: one layer, whose work is the gather."""

    def __init__(self, heads: int = 2, window: int = 6) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(1, heads, 7, 7))
        side = 2 * window - 1
        self.side = side
        self.register_buffer("index", torch.randint(0, side * side, (window * window, window * window)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        table = F.interpolate(self.table, size=(self.side, self.side), mode="bilinear", align_corners=False)
        bias = table.flatten(2)[:, :, self.index]  # heads × N × N
        return x + bias


def test_a_resize_inside_a_module_of_another_kind_does_not_name_its_work() -> None:
    graph = capture(PositionBias().eval(), (torch.randn(2, 2, 36, 36),))
    (bias,) = [la for la in graph.layers if "aten.upsample_bilinear2d" in la.ops]
    # the module stays one layer, and the operator it is priced by is the gather, not the resize: a
    # swept resize of the same bytes runs at a few GB/s, the gather of a cached table far faster
    assert bias.kind != "resize" and main_op(bias) != "aten.upsample_bilinear2d"
    assert main_op(bias) == next(op for op in bias.ops if op.startswith("aten.index"))


def test_the_sweep_draws_resizes_that_change_the_size() -> None:
    specs = [s for s in default_sweep(per_kind=16) if s.kind == "resize"]
    assert len(specs) == 16 and len({s.key for s in specs}) == 16
    for spec in specs:
        p = dict(spec.params)
        module, (x,) = spec.build()
        with torch.no_grad():
            out = module(x)
        assert tuple(out.shape) == (p["b"], p["c"], p["o"], p["o"]) and p["o"] != p["hw"]
        assert module.mode == RESIZE_MODES[p["mode"]][0]


@pytest.mark.parametrize("key, op", [
    ("resize:b=2,c=32,hw=16,o=64,mode=1", "aten.upsample_bilinear2d"),  # a depth head's 4× bilinear
    ("resize:b=2,c=64,hw=8,o=16,mode=0", "aten.upsample_nearest2d"),  # a feature pyramid's 2× nearest
    ("resize:b=1,c=3,hw=64,o=32,mode=3", "aten.upsample_bicubic2d"),  # an image shrunk to a model's size
])
def test_a_swept_resize_has_the_features_a_captured_one_has(key: str, op: str) -> None:
    spec = parse_spec(key)
    (target,) = targets_from_specs([spec])
    p = dict(spec.params)
    assert (target.layer.kind, main_op(target.layer), target.layer.flops) == ("resize", op, 0)
    assert target.layer.input_shapes == [[p["b"], p["c"], p["hw"], p["hw"]]]
    assert target.layer.bytes_written == 4 * p["b"] * p["c"] * p["o"] ** 2


@pytest.mark.parametrize("key", [
    "resize:b=1,c=8,hw=16,o=16,mode=1",  # no change of size
    "resize:b=1,c=8,hw=4,o=128,mode=1",  # 32× on a side
    "resize:b=1,c=8,hw=128,o=16,mode=0",  # 8× smaller
])
def test_resizes_outside_the_sweeps_rules_are_not_drawn(key: str) -> None:
    p = dict(parse_spec(key).params)
    assert not resize_ok(p) and not _size_ok("resize", p)


def test_gpu_resizes_bound_their_output() -> None:
    specs = gpu_sweep(per_kind=24, kinds=("resize",))
    assert len(specs) == 24
    for spec in specs:
        p = dict(spec.params)
        assert resize_ok(p) and 4 * p["b"] * p["c"] * max(p["hw"], p["o"]) ** 2 <= 8 * 2**30


def test_a_pipeline_cut_on_either_side_of_a_resize_gives_the_unsplit_output() -> None:
    from pipeplan.costmodel.capture import capture_program
    from pipeplan.executor import split_program

    model, x, skip = FusionStage().eval(), torch.randn(2, 8, 8, 8), torch.randn(2, 8, 16, 16)
    cp = capture_program(model, (x, skip))
    names = [la.name for la in cp.graph.layers]
    at = next(i for i, la in enumerate(cp.graph.layers) if la.kind == "resize")
    stages = split_program(cp, [names[:at], names[at:at + 1], names[at + 1:]])  # the resize alone in stage 1
    values: tuple[torch.Tensor, ...] = (x, skip)
    with torch.no_grad():
        for stage in stages:
            values = stage.module(*values)
        torch.testing.assert_close(values[0], model(x, skip), rtol=0, atol=0)
