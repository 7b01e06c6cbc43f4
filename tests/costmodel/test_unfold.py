"""Patch rearrangement (nn.Unfold / nn.Fold, ``aten.im2col`` / ``aten.col2im``): captured as layers of
their own, and swept as a layer type, so a cost model prices them by what they are."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeplan.costmodel.capture import capture
from pipeplan.costmodel.dataset import main_op
from pipeplan.costmodel.gpu_sweep import gpu_sweep
from pipeplan.costmodel.layerspecs import _size_ok, default_sweep, parse_spec, unfold_blocks, unfold_ok
from pipeplan.costmodel.profile import targets_from_specs


class TokenWindows(nn.Module):
    """ConvBERT's span-based dynamic convolution, cut down: a projection whose output is unfolded into
    9-token windows (``F.unfold`` with a 9×1 kernel over a B×C×T×1 view), then weighted per window."""

    def __init__(self, width: int = 16, window: int = 9) -> None:
        super().__init__()
        self.window = window
        self.proj = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        h = self.proj(x).transpose(1, 2).contiguous().unsqueeze(-1)
        windows = F.unfold(h, [self.window, 1], padding=[self.window // 2, 0])  # B × C·9 × T
        windows = windows.reshape(b, c, self.window, t).mean(dim=2).transpose(1, 2)
        return self.out(windows)


def test_unfold_glue_after_a_linear_is_a_layer_of_its_own() -> None:
    model, x = TokenWindows().eval(), torch.randn(2, 12, 16)
    graph = capture(model, (x,))
    proj = next(la for la in graph.layers if la.name == "proj")
    # Zero-FLOP glue with one producer joins it, but an unfold starts a layer of its own: priced as part
    # of the linear layer, it would cost what a matmul's reshape costs
    assert proj.ops[0] == "aten.linear" and "aten.im2col" not in proj.ops
    (unfold,) = [la for la in graph.layers if "aten.im2col" in la.ops]
    assert unfold.kind == "unfold" and unfold.module_type == "functional" and unfold.ops[0] == "aten.im2col"
    assert main_op(unfold) == "aten.im2col" and unfold.flops == 0
    # it starts from the tensor it unfolds (the sweep's features are those of that tensor), and writes
    # the B × C·9 × T patch matrix
    assert unfold.input_shapes == [[2, 16, 12, 1]] and unfold.bytes_written == 2 * 16 * 9 * 12 * 4
    assert graph.nx.has_edge("proj", unfold.name)


class PatchesOfAResizedImage(nn.Module):
    """DepthPro's patch cutting, cut down: the image is resized, cut into overlapping patches, projected."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3 * 8 * 8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        resized = F.interpolate(x, size=(24, 24), mode="bilinear", align_corners=False)
        return self.proj(F.unfold(resized, 8, stride=4).transpose(1, 2))


def test_glue_computed_from_the_inputs_does_not_merge_into_an_unfold() -> None:
    graph = capture(PatchesOfAResizedImage().eval(), (torch.randn(2, 3, 32, 32),))
    (unfold,) = [la for la in graph.layers if "aten.im2col" in la.ops]
    assert "aten.upsample_bilinear2d" not in unfold.ops and unfold.input_shapes == [[2, 3, 24, 24]]
    resize = next(la for la in graph.layers if "aten.upsample_bilinear2d" in la.ops)
    assert graph.nx.has_edge(resize.name, unfold.name) and resize.name != "proj"


class UnfoldModuleThenGlue(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.unfold = nn.Unfold(4, stride=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.unfold(self.conv(x)) * 2.0).permute(0, 2, 1).contiguous()


def test_an_unfold_module_is_an_unfold_layer_that_glue_does_not_join() -> None:
    graph = capture(UnfoldModuleThenGlue().eval(), (torch.randn(2, 3, 16, 16),))
    unfold = next(la for la in graph.layers if la.name == "unfold")
    assert unfold.kind == "unfold" and unfold.ops == ["aten.im2col"]
    assert unfold.bytes_written == 2 * 8 * 16 * 16 * 4  # non-overlapping patches: each pixel once
    (glue,) = [la for la in graph.layers if la.name not in ("conv", "unfold")]
    assert glue.ops[0] == "aten.mul" and graph.nx.has_edge("unfold", glue.name)


def test_the_sweep_draws_unfolds_and_folds_that_are_real_and_says_their_size() -> None:
    specs = [s for s in default_sweep(per_kind=12) if s.kind in ("unfold", "fold")]
    assert {s.kind for s in specs} == {"unfold", "fold"} and len(specs) == 24
    for spec in specs:
        p = dict(spec.params)
        module, (x,) = spec.build()
        with torch.no_grad():
            out = module(x)
        patches = (p["b"], p["c"] * p["kh"] * p["kw"], unfold_blocks(p))
        assert tuple((out if spec.kind == "unfold" else x).shape) == patches
        if spec.kind == "fold":
            assert tuple(out.shape) == (p["b"], p["c"], p["h"], p["w"])


@pytest.mark.parametrize("key, op", [
    ("unfold:b=2,c=64,h=64,w=1,kh=9,kw=1,s=1", "aten.im2col"),  # ConvBERT's token windows
    ("fold:b=2,c=64,h=16,w=16,kh=2,kw=2,s=2", "aten.col2im"),  # MobileViT folding 2×2 patches back
])
def test_a_swept_unfold_has_the_features_a_captured_one_has(key, op) -> None:
    spec = parse_spec(key)
    (target,) = targets_from_specs([spec])
    p = dict(spec.params)
    patch_bytes = 4 * p["b"] * p["c"] * p["kh"] * p["kw"] * unfold_blocks(p)
    assert (target.layer.kind, main_op(target.layer), target.layer.flops) == ("unfold", op, 0)
    image_bytes = 4 * p["b"] * p["c"] * p["h"] * p["w"]
    moved = (image_bytes, patch_bytes) if op == "aten.im2col" else (patch_bytes, image_bytes)
    assert (target.layer.bytes_read, target.layer.bytes_written) == moved


@pytest.mark.parametrize("key", [
    "unfold:b=1,c=8,h=8,w=8,kh=15,kw=1,s=1",  # a kernel taller than the image
    "unfold:b=1,c=8,h=64,w=64,kh=2,kw=2,s=4",  # a stride past the kernel leaves pixels out
    "fold:b=1,c=8,h=64,w=1,kh=3,kw=3,s=1",  # a kernel wider than a token sequence
])
def test_unfolds_outside_the_sweeps_grid_rules_are_not_drawn(key) -> None:
    spec = parse_spec(key)
    assert not unfold_ok(spec.kind, dict(spec.params)) and not _size_ok(spec.kind, dict(spec.params))
    assert unfold_ok("linear", {"m": 1, "k": 1, "n": 1})


def test_gpu_unfolds_bound_their_patch_matrix() -> None:
    for spec in gpu_sweep(per_kind=24, kinds=("unfold", "fold")):
        p = dict(spec.params)
        assert unfold_ok(spec.kind, p) and 4 * p["b"] * p["c"] * p["kh"] * p["kw"] * unfold_blocks(p) <= 8 * 2**30


def test_a_pipeline_cut_on_either_side_of_an_unfold_gives_the_unsplit_output() -> None:
    from pipeplan.costmodel.capture import capture_program
    from pipeplan.executor import split_program

    model, x = TokenWindows().eval(), torch.randn(2, 12, 16)
    cp = capture_program(model, (x,))
    names = [la.name for la in cp.graph.layers]
    at = next(i for i, la in enumerate(cp.graph.layers) if la.kind == "unfold")
    stages = split_program(cp, [names[:at], names[at:at + 1], names[at + 1:]])  # the unfold alone in stage 1
    values: tuple[torch.Tensor, ...] = (x,)
    with torch.no_grad():
        for stage in stages:
            values = stage.module(*values)
        torch.testing.assert_close(values[0], model(x), rtol=0, atol=0)
