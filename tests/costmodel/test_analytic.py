"""The roofline cost model: exact seconds for hand-made layers, contention, overheads, memory and links."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.base import CostModel, LayerMemory
from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.costmodel.hardware import Contention, Device, Link

COMPUTE_CORUNNER = Contention(corunners=1, kind="compute")
MEMORY_CORUNNER = Contention(corunners=1, kind="memory")
HALF_USED = Contention(utilization=0.5)


def layer(flops: int = 0, bytes_read: int = 0, bytes_written: int = 0, kernels: int = 1,
          param_bytes: int = 0, activation_bytes: int = 0) -> Layer:
    return Layer("x", "linear", "Linear", 0, flops=flops, bytes_read=bytes_read,
                 bytes_written=bytes_written, param_bytes=param_bytes,
                 activation_bytes=activation_bytes, kernels=kernels)


def device(**fields: Any) -> Device:
    """1 GFLOP/s and 1 GB/s: a layer's FLOPs and bytes read directly as nanoseconds."""
    spec: dict[str, Any] = {"id": "d", "memory": "1GiB", "peak_flops": 1e9, "mem_bandwidth": 1e9}
    spec.update(fields)
    return Device(**spec)


# 2 MFLOP against 2 kB: compute takes 2 ms, memory 2 us.
COMPUTE_BOUND = layer(flops=2_000_000, bytes_read=1000, bytes_written=1000)
# 1 kFLOP against 4 MB: memory takes 4 ms, compute 1 us.
MEMORY_BOUND = layer(flops=1000, bytes_read=3_000_000, bytes_written=1_000_000)


def exact(value: float) -> Any:
    return pytest.approx(value, rel=1e-12, abs=0.0)


@pytest.fixture(scope="module")
def tinygpt() -> ModelGraph:
    from pipeplan.costmodel.zoo import capture_model

    return capture_model("tinygpt", 1)


# -- the roofline -----------------------------------------------------------------------------


def test_compute_bound() -> None:
    assert RooflineModel(overhead=0.0).layer_time(COMPUTE_BOUND, device()) == exact(2e-3)


def test_memory_bound() -> None:
    assert RooflineModel(overhead=0.0).layer_time(MEMORY_BOUND, device()) == exact(4e-3)


def test_roof_is_the_max_not_the_sum() -> None:
    balanced = layer(flops=3_000_000, bytes_read=2_000_000, bytes_written=1_000_000)
    assert RooflineModel(overhead=0.0).layer_time(balanced, device()) == exact(3e-3)


def test_rates_scale_the_time() -> None:
    fast = device(peak_flops="4GFLOPS", mem_bandwidth="8GB/s")
    model = RooflineModel(overhead=0.0)
    assert model.layer_time(COMPUTE_BOUND, fast) == exact(0.5e-3)
    assert model.layer_time(MEMORY_BOUND, fast) == exact(0.5e-3)


def test_overhead_is_per_kernel() -> None:
    model = RooflineModel(overhead=1e-5)
    three = layer(flops=2_000_000, bytes_read=1000, bytes_written=1000, kernels=3)
    assert model.layer_time(three, device()) == exact(2e-3 + 3 * 1e-5)
    assert model.layer_time(layer(kernels=7), device()) == exact(7e-5)
    assert model.layer_time(layer(kernels=0), device()) == 0.0


def test_predict_is_layer_time() -> None:
    model = RooflineModel(overhead=1e-6)
    dev = device(load=COMPUTE_CORUNNER)
    assert model.predict(COMPUTE_BOUND, dev) == model.layer_time(COMPUTE_BOUND, dev)
    assert model.predict(MEMORY_BOUND, dev, MEMORY_CORUNNER) == model.layer_time(MEMORY_BOUND, dev,
                                                                                 MEMORY_CORUNNER)


def test_is_a_cost_model() -> None:
    model = RooflineModel()
    assert isinstance(model, CostModel) and model.name == "analytic"


# -- default overheads ------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "per_kernel"), [
    ({}, 5e-6),
    ({"type": "A100-80GB"}, 5e-6),
    ({"type": "cpu-core"}, 3e-6),
    ({"type": "Xeon-CPU"}, 3e-6),
    ({"cores": [0, 1]}, 3e-6),
    ({"type": "A100-80GB", "cores": []}, 3e-6),
])
def test_default_overhead_by_device_kind(fields: dict[str, Any], per_kernel: float) -> None:
    assert RooflineModel().layer_time(layer(kernels=4), device(**fields)) == exact(4 * per_kernel)


def test_cpu_and_gpu_default_overheads_differ() -> None:
    model = RooflineModel()
    cpu = model.layer_time(layer(kernels=1), device(type="cpu-core"))
    gpu = model.layer_time(layer(kernels=1), device(type="H100"))
    assert cpu != gpu and cpu == exact(3e-6) and gpu == exact(5e-6)


def test_explicit_overhead_overrides_the_default() -> None:
    assert RooflineModel(overhead=2e-6).layer_time(layer(kernels=5), device(type="cpu-core")) == exact(1e-5)


# -- contention -------------------------------------------------------------------------------


@pytest.mark.parametrize(("work", "load"), [
    (COMPUTE_BOUND, COMPUTE_CORUNNER),
    (MEMORY_BOUND, MEMORY_CORUNNER),
    (COMPUTE_BOUND, HALF_USED),
    (MEMORY_BOUND, HALF_USED),
])
def test_matching_contention_doubles_the_time(work: Layer, load: Contention) -> None:
    model = RooflineModel(overhead=0.0)
    idle = model.layer_time(work, device())
    assert model.layer_time(work, device(), load) == exact(2 * idle)
    assert model.layer_time(work, device(load=load)) == exact(2 * idle)


def test_cross_contention_slows_by_the_cross_share() -> None:
    model = RooflineModel(overhead=0.0)
    # One co-runner of the other kind takes 0.1 / 1.1 = 1/11 of the resource: 11/10 of the time.
    assert model.layer_time(MEMORY_BOUND, device(), COMPUTE_CORUNNER) == exact(4e-3 * 1.1)
    assert model.layer_time(COMPUTE_BOUND, device(), MEMORY_CORUNNER) == exact(2e-3 * 1.1)


def test_three_memory_corunners_quadruple_a_memory_bound_layer() -> None:
    load = Contention(corunners=3, kind="memory")
    assert RooflineModel(overhead=0.0).layer_time(MEMORY_BOUND, device(), load) == exact(16e-3)


def test_contention_does_not_touch_the_overhead() -> None:
    model = RooflineModel(overhead=1e-5)
    assert model.layer_time(layer(kernels=3), device(), HALF_USED) == exact(3e-5)


def test_explicit_load_overrides_the_device_load() -> None:
    model = RooflineModel(overhead=0.0)
    busy = device(load=COMPUTE_CORUNNER)
    assert model.layer_time(COMPUTE_BOUND, busy) == exact(4e-3)
    assert model.layer_time(COMPUTE_BOUND, busy, Contention()) == exact(2e-3)
    assert model.layer_time(COMPUTE_BOUND, busy, HALF_USED) == exact(4e-3)
    assert model.layer_time(COMPUTE_BOUND, device(), COMPUTE_CORUNNER) == exact(4e-3)


# -- efficiencies -----------------------------------------------------------------------------


def test_efficiencies_scale_their_roof() -> None:
    half_compute = RooflineModel(overhead=0.0, compute_efficiency=0.5)
    half_memory = RooflineModel(overhead=0.0, memory_efficiency=0.5)
    assert half_compute.layer_time(COMPUTE_BOUND, device()) == exact(4e-3)
    assert half_memory.layer_time(MEMORY_BOUND, device()) == exact(8e-3)
    assert half_compute.layer_time(MEMORY_BOUND, device()) == exact(4e-3)


@pytest.mark.parametrize("label", ["compute_efficiency", "memory_efficiency"])
@pytest.mark.parametrize("value", [0.0, -0.5, 1.01, 2.0])
def test_bad_efficiency_is_refused(label: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"^{label} must be in \(0, 1\], got {value}$"):
        RooflineModel(**{label: value})


def test_negative_overhead_is_refused() -> None:
    with pytest.raises(ValueError, match="overhead must be non-negative seconds, got -1e-06"):
        RooflineModel(overhead=-1e-6)


def test_efficiency_of_one_is_allowed() -> None:
    model = RooflineModel(compute_efficiency=1.0, memory_efficiency=1.0)
    assert (model.compute_efficiency, model.memory_efficiency) == (1.0, 1.0)


# -- memory and links -------------------------------------------------------------------------


def test_layer_memory() -> None:
    fc = layer(bytes_written=3000, param_bytes=800, activation_bytes=1000)
    mem = RooflineModel().layer_memory(fc)
    assert mem == LayerMemory(params=800, activations=1000, workspace=2000)
    assert mem.total == 3800


def test_workspace_is_never_negative() -> None:
    mem = RooflineModel().layer_memory(layer(bytes_written=500, param_bytes=8, activation_bytes=1000))
    assert mem == LayerMemory(params=8, activations=1000, workspace=0)
    assert mem.total == 1008


@pytest.mark.parametrize("nbytes", [0, 0.0, -10])
def test_link_time_of_nothing_is_zero(nbytes: float) -> None:
    assert RooflineModel().link_time(nbytes, Link(bandwidth=1e9, latency=1e-5)) == 0.0


@pytest.mark.parametrize(("nbytes", "seconds"), [(1, 1e-5 + 1e-9), (1_000_000, 1e-5 + 1e-3),
                                                 (25e9, 1e-5 + 25.0)])
def test_link_time_is_latency_plus_transfer(nbytes: float, seconds: float) -> None:
    assert RooflineModel().link_time(nbytes, Link(bandwidth=1e9, latency=1e-5)) == exact(seconds)


def test_link_time_without_latency() -> None:
    assert RooflineModel().link_time(12.5e9, Link(bandwidth=12.5e9, latency=0.0)) == 1.0


# -- a captured model -------------------------------------------------------------------------


A100 = {"id": "gpu0", "type": "A100-80GB", "memory": "80GiB", "peak_flops": "312TFLOPS",
        "mem_bandwidth": "2039GB/s"}


@pytest.mark.parametrize("load", [Contention(), COMPUTE_CORUNNER, Contention.parse("3xmemory"), HALF_USED])
def test_every_real_layer_takes_positive_finite_time(tinygpt: ModelGraph, load: Contention) -> None:
    model = RooflineModel()
    dev = Device(**A100, load=load)
    for lay in tinygpt.layers:
        t = model.layer_time(lay, dev)
        assert t > 0 and math.isfinite(t), lay.name
        assert t >= model.layer_time(lay, dev, Contention()), lay.name


def test_twice_as_fast_device_halves_the_model(tinygpt: ModelGraph) -> None:
    model = RooflineModel(overhead=0.0)
    slow = Device(**A100)
    fast = Device(**{**A100, "peak_flops": 2 * slow.peak_flops, "mem_bandwidth": 2 * slow.mem_bandwidth})
    slow_total = sum(model.layer_time(lay, slow) for lay in tinygpt.layers)
    fast_total = sum(model.layer_time(lay, fast) for lay in tinygpt.layers)
    assert slow_total > 0
    assert fast_total == slow_total / 2


def test_overhead_adds_kernels_times_overhead(tinygpt: ModelGraph) -> None:
    dev = Device(**A100)
    bare = sum(RooflineModel(overhead=0.0).layer_time(lay, dev) for lay in tinygpt.layers)
    with_overhead = sum(RooflineModel().layer_time(lay, dev) for lay in tinygpt.layers)
    kernels = sum(lay.kernels for lay in tinygpt.layers)
    assert with_overhead == pytest.approx(bare + kernels * 5e-6, rel=1e-12)
