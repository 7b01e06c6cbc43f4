"""What the GPU model launches for real captured layers (the shipped leaf graphs of the H100
measurements): views launch nothing, hidden copies are found, depthwise convolutions and RGB
stems get the units they really run on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeplan.costmodel.gpu import GpuCostModel, GpuParams, containers
from pipeplan.costmodel.gpu_cache import L2_BYTES, l2_resident
from pipeplan.costmodel.gpu_kernels import (
    Launches,
    grouped_conv,
    host_classes,
    launches,
    strided_into,
    tensor_core_ready,
)
from pipeplan.costmodel.gpu_measurements import graphs
from pipeplan.costmodel.gpu_specs import gpu_device, recognise
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Device


def _layer(key: str, name: str) -> Layer:
    return next(la for la in graphs()[key].layers if la.name == name)


def _before(key: str, name: str) -> Layer:
    layers = graphs()[key].layers
    return layers[[la.name for la in layers].index(name) - 1]


def test_views_getitem_and_inference_dropout_launch_nothing() -> None:
    # c_attn: view, addmm, view, split, 3 × getitem, 3 × (view, transpose): one kernel, 9 dispatcher calls
    c_attn = _layer("gpt2@8", "transformer.h.0.attn.c_attn")
    assert launches(c_attn) == Launches(kernels=1, dispatches=9, copy_bytes=0)
    drop = _layer("gpt2@8", "transformer.h.0.attn.resid_dropout")
    assert drop.kernels == 1 and launches(drop) == Launches(kernels=0, dispatches=1, copy_bytes=0)


def test_a_reshape_of_a_transposed_tensor_is_a_copy() -> None:
    glue = _layer("bert-base@8", "encoder.layer.0.attention.self:scaled_dot_product_attention")
    out = 4 * 8 * 128 * 768  # the (8, 128, 768) fp32 attention output, read and written once
    assert glue.kernels == 1 and launches(glue) == Launches(kernels=2, dispatches=2, copy_bytes=2 * out)


def test_a_permuted_input_to_a_layer_norm_is_copied_but_a_sibling_is_not() -> None:
    ln = _layer("convnext-tiny@32", "convnext.encoder.stages.0.layers.0.layernorm")
    dwconv = _before("convnext-tiny@32", ln.name)
    assert dwconv.ops == ["aten.conv2d", "aten.permute"] and strided_into(dwconv, ln)
    assert launches(ln, True) == Launches(kernels=2, dispatches=0, copy_bytes=2 * 4 * 32 * 56 * 56 * 96)
    # the key projection follows the query's transposed output, but does not read it
    key = _layer("bert-base@8", "encoder.layer.0.attention.self.key")
    assert not strided_into(_before("bert-base@8", key.name), key)


def test_depthwise_convolutions_are_found_and_bound_by_l1_loads() -> None:
    dwconv = _layer("convnext-tiny@32", "convnext.encoder.stages.0.layers.0.dwconv")
    assert grouped_conv(dwconv)
    assert not any(grouped_conv(la) for key in ("resnet-50@32", "inception@32", "rescnn@64", "vit-base@8")
                   for la in graphs()[key].layers)
    h100 = gpu_device("NVIDIA H100 80GB HBM3")
    spec = recognise(h100.type)
    assert spec is not None and spec.l1_bandwidth == pytest.approx(132 * 128 * 1.98e9)
    bare = GpuCostModel(GpuParams(kernel_time=0.0))
    # 2·49 FLOPs per output, an input and a weight (4 bytes each) loaded per multiply-add
    assert bare.device_time(dwconv, h100) == pytest.approx(dwconv.flops * 4 / spec.l1_bandwidth)


def test_rgb_stems_miss_the_tensor_cores() -> None:
    stem = _layer("resnet-50@32", "resnet.embedder.embedder.convolution")
    body = _layer("resnet-50@32", "resnet.encoder.stages.0.layers.0.layer.1.convolution")
    assert not tensor_core_ready(stem, "tf32") and tensor_core_ready(body, "tf32")
    h100 = gpu_device("NVIDIA H100 80GB HBM3")
    bare = GpuCostModel(GpuParams(kernel_time=0.0, flops_half=0.0, eff_conv=1.0))
    # 3 input channels: the fp32 CUDA-core peak, though torch allows TF32 for convolutions
    assert bare.device_time(stem, h100) == pytest.approx(stem.flops / 67e12)
    assert bare.device_time(body, h100) == pytest.approx(max(body.flops / 494.7e12,
                                                             (body.bytes_read + body.bytes_written) / (3.35e12 * 0.7)))


def test_containers_entered_around_a_layer() -> None:
    assert containers("transformer.h.0.attn.c_attn") == {"transformer", "transformer.h.0", "transformer.h.0.attn"}
    assert containers("blocks.1.attn:split_1") == {"blocks.1", "blocks.1.attn"}
    assert containers("net.0") == set() and containers("arange") == set()
    model = GpuCostModel(GpuParams(host_module=0.0, host_kernel=0.0, host_gemm=0.0, host_norm=0.0, host_view=0.0,
                                   host_container=1e-5))
    h100 = gpu_device("NVIDIA H100 80GB HBM3")
    layers = [_layer("tinygpt@8", n) for n in ("blocks.0.ln1", "blocks.0.attn.qkv", "blocks.0.attn.proj")]
    # blocks.0 entered before ln1, blocks.0.attn before qkv; proj enters nothing new
    assert [h for h, _ in model.costs(layers, h100)] == pytest.approx([1e-5, 1e-5, 0.0])


def test_library_launches_are_told_from_plain_kernels() -> None:
    conv = _layer("resnet-50@32", "resnet.encoder.stages.0.layers.0.layer.1.convolution")
    bn = _layer("resnet-50@32", "resnet.encoder.stages.0.layers.0.layer.1.normalization")
    c_attn = _layer("gpt2@8", "transformer.h.0.attn.c_attn")
    act = _layer("gpt2@8", "transformer.h.0.mlp.act")
    sdpa = _layer("gpt2@8", "transformer.h.0.attn:scaled_dot_product_attention")
    assert host_classes(conv) == {"gemm": 0, "conv": 1, "norm": 0, "attention": 0}
    assert host_classes(bn)["norm"] == 1 and host_classes(c_attn)["gemm"] == 1
    assert host_classes(sdpa)["attention"] == 1 and not any(host_classes(act).values())
    zero = dict(host_module=0.0, host_kernel=0.0, host_gemm=0.0, host_conv=0.0, host_norm=0.0, host_attention=0.0,
                host_view=0.0)
    # c_attn: one addmm (a cuBLAS launch) and 9 dispatcher-only operators; GELU: 8 plain kernels
    model = GpuCostModel(GpuParams(**{**zero, "host_gemm": 3e-5, "host_view": 1e-6, "host_kernel": 1e-5}))
    assert model.host_time(c_attn) == pytest.approx(3e-5 + 9e-6)
    assert model.host_time(act) == pytest.approx(8e-5 + 0)  # NewGELUActivation: host_module is 0 here
    assert GpuCostModel(GpuParams(**{**zero, "host_conv": 2e-5})).host_time(conv) == pytest.approx(2e-5)


def test_activations_that_fit_in_l2_are_read_from_it() -> None:
    h100 = gpu_device("NVIDIA H100 80GB HBM3")
    small = _layer("gpt2@8", "transformer.h.0.mlp.act")  # (8, 128, 3072) fp32: 12.6 MB in, 12.6 MB out
    large = _layer("gpt2@32", "transformer.h.0.mlp.act")  # 50 MB in, 50 MB out: more than the 50 MiB L2
    assert l2_resident(small, L2_BYTES["H100-SXM"], 4) and not l2_resident(large, L2_BYTES["H100-SXM"], 4)
    assert l2_resident(large, L2_BYTES["H100-SXM"], 2)  # in bf16 it fits
    base = GpuParams(kernel_time_streaming=0.0)
    fast = GpuCostModel(replace(base, l2_speedup=2.0))
    assert fast.device_time(small, h100) == pytest.approx(GpuCostModel(base).device_time(small, h100) / 2)
    assert fast.device_time(large, h100) == pytest.approx(GpuCostModel(base).device_time(large, h100))
    unknown = Device(id="g", type="Voodoo2", memory="12GiB", peak_flops=1e13, mem_bandwidth=1e12)
    assert fast.device_time(small, unknown) == pytest.approx(GpuCostModel(base).device_time(small, unknown))
