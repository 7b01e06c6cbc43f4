"""Upsampling layers in the sweep: resizing (F.interpolate) and transposed convolutions, 1-D and 2-D,
drawn as real decoders have them and captured with the features a model's own layers get."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeplan.costmodel.capture import capture
from pipeplan.costmodel.dataset import main_op
from pipeplan.costmodel.gpu_sweep import gpu_sweep
from pipeplan.costmodel.layer_geometry import convtranspose_steps, draw_flops, draw_ok, largest_tensor, resize_mode
from pipeplan.costmodel.layerspecs import _size_ok, default_sweep, parse_spec
from pipeplan.costmodel.profile import targets_from_specs

KINDS = ("resize", "convtranspose1d", "convtranspose2d")


def test_the_sweep_draws_each_upsampling_kind_at_the_size_it_says() -> None:
    specs = [s for s in default_sweep(per_kind=10) if s.kind in KINDS]
    assert sorted({s.kind for s in specs}) == sorted(KINDS) and len(specs) == 30
    for spec, target in zip(specs, targets_from_specs(specs), strict=True):
        p = dict(spec.params)
        module, (x,) = spec.build()
        with torch.no_grad():
            out = module(x)
        if spec.kind == "resize":
            assert tuple(out.shape) == (p["b"], p["c"], p["o"], p["o"])
            mode, _ = resize_mode(p)
            assert main_op(target.layer) == f"aten.upsample_{mode}2d" and target.layer.flops == 0
        else:
            side = convtranspose_steps(p)
            assert tuple(out.shape[2:]) == ((side,) if spec.kind == "convtranspose1d" else (side, side))
            assert main_op(target.layer) == f"aten.conv_transpose{spec.kind[-2:]}"
            # the sweep's FLOP bound counts what capture counts
            assert target.layer.kind == "conv" and target.layer.flops == draw_flops(spec.kind, p)
        assert out.numel() <= largest_tensor(spec.kind, p)


def test_hifigans_upsampler_is_a_4x_transposed_convolution() -> None:
    spec = parse_spec("convtranspose1d:b=2,cin=64,cout=32,k=8,s=4,l=32")
    module, (x,) = spec.build()
    assert tuple(module(x).shape) == (2, 32, 128)
    reference = nn.ConvTranspose1d(64, 32, 8, stride=4, padding=2)  # SpeechT5HifiGan's first upsampler
    assert module.padding == reference.padding


@pytest.mark.parametrize("key", [
    "convtranspose2d:b=1,cin=16,cout=16,k=2,s=4,hw=8",  # a stride past the kernel leaves holes
    "convtranspose1d:b=1,cin=16,cout=16,k=4,s=8,l=64",
    "resize:b=1,c=16,hw=32,o=32,mode=1",  # a resize to its own size is no resize
])
def test_upsampling_layers_that_are_not_real_are_not_drawn(key) -> None:
    spec = parse_spec(key)
    assert not draw_ok(spec.kind, dict(spec.params)) and not _size_ok(spec.kind, dict(spec.params))


def test_a_models_bilinear_resize_has_the_kind_and_operator_of_the_swept_one() -> None:
    class Decoder(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)

    (layer,) = capture(Decoder(), (torch.randn(2, 8, 16, 16),)).layers
    (target,) = targets_from_specs([parse_spec("resize:b=2,c=8,hw=16,o=32,mode=1")])
    for attribute in ("kind", "flops", "bytes_read", "bytes_written", "input_shapes", "output_shapes"):
        assert getattr(layer, attribute) == getattr(target.layer, attribute), attribute
    assert main_op(layer) == main_op(target.layer) == "aten.upsample_bilinear2d"


def test_gpu_upsampling_draws_bound_their_largest_tensor() -> None:
    for spec in gpu_sweep(per_kind=24, kinds=KINDS):
        p = dict(spec.params)
        assert draw_ok(spec.kind, p) and 4 * largest_tensor(spec.kind, p) <= 8 * 2**30
