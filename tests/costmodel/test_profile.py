"""The profiler for real: co-runner processes, timing under contention, the dataset it writes."""

from __future__ import annotations

import csv
import os
import time

import pytest
import torch

from pipeplan.costmodel.corunners import CoRunnerError, CoRunners
from pipeplan.costmodel.dataset import COLUMNS, contention_from_row
from pipeplan.costmodel.dataset_files import read_dataset
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.layerspecs import DRAWN_AS, KINDS, LayerSpec, default_sweep, parse_spec
from pipeplan.costmodel.profile import ProfileSettings, measure_device, pinned, profile, targets_from_specs
from pipeplan.costmodel.timing import time_call


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a killed child that was reaped is gone; a zombie would still answer kill(0)
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split()[2] != "Z"


def test_corunners_start_work_and_stop() -> None:
    with CoRunners(Contention(corunners=2, kind="compute"), cores=[0]) as load:
        pids = load.pids
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        for pid in pids:  # pinned to the requested core
            assert os.sched_getaffinity(pid) == {0}
        time.sleep(0.3)
        for pid in pids:  # they have used CPU time (utime, in ticks)
            with open(f"/proc/{pid}/stat") as fh:
                assert int(fh.read().rsplit(")", 1)[1].split()[11]) > 0
    assert not any(os.path.exists(f"/proc/{p}") and _alive(p) for p in pids)


def test_utilization_starts_one_duty_cycled_corunner_and_idle_starts_none() -> None:
    with CoRunners(Contention(utilization=0.5), cores=[0]) as load:
        assert len(load.pids) == 1
    with CoRunners(Contention(), cores=[0]) as load:
        assert load.pids == []


def test_corunners_refuse_cores_that_do_not_exist() -> None:
    with pytest.raises(CoRunnerError, match="cores"):
        CoRunners(Contention(corunners=1), cores=[4096])


def test_sweep_covers_every_layer_type_with_distinct_buildable_shapes() -> None:
    specs = default_sweep(per_kind=4)
    assert {s.kind for s in specs} == set(KINDS) - set(DRAWN_AS)  # conv2d_large's shapes are conv2d's
    assert len({s.key for s in specs}) == len(specs)
    for spec in specs[::7]:
        module, inputs = spec.build()
        with torch.no_grad():
            assert module(*inputs).numel() > 0
    assert parse_spec(specs[0].key) == specs[0]


@pytest.mark.parametrize("key, geometry", [
    # (outputs per channel, output channels, input channels, kernel, groups, input length)
    # Whisper's strided stem: 80 mel bins → 128 channels, kernel 3, stride 2 over 64 frames
    ("conv1d:b=2,cin=80,cout=128,k=3,s=2,g=1,l=64", (32, 128, 80, 3, 1, 64)),
    # SqueezeBERT's grouped pointwise projection
    ("conv1d:b=2,cin=128,cout=512,k=1,s=1,g=4,l=64", (64, 512, 128, 1, 4, 64)),
    # a conformer's depthwise convolution: one 15-tap filter per channel
    ("dwconv1d:b=2,c=128,k=15,s=1,l=100", (100, 128, 128, 15, 128, 100)),
    # Mamba's: an even kernel, whose padding of k // 2 adds a step (33 outputs of 32)
    ("dwconv1d:b=2,c=256,k=4,s=1,l=32", (33, 256, 256, 4, 256, 32)),
    # Wav2Vec2's first: raw audio, kernel 10, stride 5 over 16 steps (4 outputs with its padding, not 16 // 5)
    ("conv1d:b=2,cin=1,cout=512,k=10,s=5,g=1,l=16", (4, 512, 1, 10, 1, 16)),
])
def test_one_dimensional_convolutions_are_profiled_with_their_geometry(key, geometry) -> None:
    from pipeplan.costmodel.conv_shapes import grouped_conv_flops
    from pipeplan.costmodel.dataset import _conv_features, layer_features

    spec = parse_spec(key)
    (target,) = targets_from_specs([spec])
    assert target.layer.kind == "conv" and "aten.conv1d" in target.layer.ops
    # the sweep's size limit counts what capture does
    assert target.layer.flops == grouped_conv_flops(spec.kind, dict(spec.params))
    features = _conv_features(layer_features(target.layer))
    read = [10 ** features[f"log_conv_{name}"] - 1
            for name in ("out_hw", "out_channels", "kernel_area", "stride_area", "in_channels")]
    # The features read a layer's parameters as its weights, bias included (every model was trained so):
    # with W weights and c_out biases, out_hw reads W / (W + c_out) of the truth, c_out the inverse.
    steps, c_out, c_in, k, groups, length = geometry
    weights = c_out * c_in // groups * k
    skew = weights / (weights + c_out)
    expected = [steps * skew, c_out / skew, (weights + c_out) / (c_out / skew * c_in), length / (steps * skew), c_in]
    assert read == pytest.approx(expected, rel=1e-6)
    assert skew >= 0.75  # 4-tap depthwise (Mamba) is the worst: a quarter off


@pytest.mark.parametrize("key", [
    "conv1d:b=1,cin=16,cout=16,k=3,s=5,g=1,l=64",  # a stride wider than the kernel skips inputs
    "conv1d:b=1,cin=16,cout=16,k=15,s=1,g=1,l=8",  # a kernel longer than the input
    "conv1d:b=1,cin=1,cout=16,k=3,s=1,g=4,l=64",  # groups that do not divide the channels
    "dwconv1d:b=1,c=64,k=31,s=1,l=16",
])
def test_one_dimensional_convolutions_that_are_not_real_layers_are_not_drawn(key) -> None:
    from pipeplan.costmodel.conv_shapes import grouped_conv_ok
    from pipeplan.costmodel.layerspecs import _size_ok

    spec = parse_spec(key)
    assert not grouped_conv_ok(spec.kind, dict(spec.params)) and not _size_ok(spec.kind, dict(spec.params))
    assert grouped_conv_ok("linear", {"m": 1, "k": 1, "n": 1})  # other kinds are not its business


@pytest.mark.parametrize("bad, message", [("linear:m=4", "needs"), ("warp:x=1", "unknown layer type"),
                                          ("linear:m=four", "cannot read")])
def test_bad_layer_specs_are_named(bad: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_spec(bad)


def test_tiny_profile_writes_a_tidy_dataset(tmp_path) -> None:
    settings = ProfileSettings(levels=[Contention(), Contention(corunners=1, kind="memory")],
                               repeats=3, window=0.005, loaded_window=0.01, warmup=1)
    targets = targets_from_specs([LayerSpec("linear", {"m": 16, "k": 64, "n": 64}),
                                  parse_spec("layernorm:m=64,c=256")])
    out = tmp_path / "data.csv"
    assert profile(targets, out, settings) == 4
    with out.open() as fh:
        assert tuple(csv.DictReader(fh).fieldnames or ()) == COLUMNS
    rows = read_dataset(out)
    assert [(r["config"], r["contention"]) for r in rows] == [
        ("linear:m=16,k=64,n=64", "idle"), ("layernorm:m=64,c=256", "idle"),
        ("linear:m=16,k=64,n=64", "1×memory"), ("layernorm:m=64,c=256", "1×memory")]
    for row in rows:
        assert row["time_min_s"] <= row["time_s"] <= row["time_max_s"] and row["time_s"] > 0
        assert row["layer_kind"] in ("linear", "layernorm") and row["threads"] == 1 and row["cores"] == "0"
        assert row["peak_flops"] > 1e8 and row["mem_bandwidth"] > 1e8
    assert rows[0]["flops"] == 2 * 16 * 64 * 64
    assert contention_from_row(rows[3]) == Contention(corunners=1, kind="memory")


def test_contention_really_slows_a_memory_bound_layer() -> None:
    """Two memory-bound co-runners on the layer's core: the layer takes clearly longer."""
    relu = torch.nn.ReLU()
    x = torch.randn(2048, 2048)  # 16 MiB in, 16 MiB out: streaming, memory-bound
    with pinned([0], 1):
        idle = time_call(lambda: relu(x), window=0.05, repeats=5)[0]
        with CoRunners(Contention(corunners=2, kind="memory"), cores=[0]):
            loaded = time_call(lambda: relu(x), window=0.05, repeats=5)[0]
    assert loaded > 1.3 * idle, (idle, loaded)


def test_pinned_restores_affinity_and_threads() -> None:
    before = (os.sched_getaffinity(0), torch.get_num_threads())
    with pinned([0], 1):
        assert os.sched_getaffinity(0) == {0} and torch.get_num_threads() == 1
    assert (os.sched_getaffinity(0), torch.get_num_threads()) == before


def test_measured_device_figures_are_plausible_for_a_cpu_core() -> None:
    dev = measure_device(ProfileSettings(cores=[0]))
    assert 1e9 < dev.peak_flops < 1e12 and 1e9 < dev.mem_bandwidth < 1e12
    assert dev.type == "cpu-core" and dev.cores == [0]


def test_a_dataset_with_missing_columns_or_bad_times_is_refused(tmp_path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("config,time_s\nx,1\n")
    with pytest.raises(ValueError, match="missing columns"):
        read_dataset(bad)
    with pytest.raises(ValueError, match="cannot read dataset"):
        read_dataset(tmp_path / "absent.csv")


def test_freed_memory_is_retained_on_glibc() -> None:
    import platform

    from pipeplan.costmodel.profile import retain_freed_memory

    expected = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert retain_freed_memory() is expected
    assert retain_freed_memory() is expected  # once per process, same answer
