"""The GPU profiler's pure logic on CPU: which timer is used, the GPU sweep's shapes, dtypes; and the
NVML reader's error where there is no GPU."""

from __future__ import annotations

import time

import pytest
import torch

from pipeplan.costmodel.gpu_sweep import GPU_GRIDS, gpu_sweep
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.layerspecs import default_sweep
from pipeplan.costmodel.nvml import GpuLoad, NvmlError, read_load
from pipeplan.costmodel.profile import ProfileSettings, cast, targets_from_specs
from pipeplan.costmodel.timing import time_call, wall_clock_samples


def test_wall_clock_includes_the_synchronise() -> None:
    calls: list[str] = []

    def run() -> None:
        calls.append("run")

    def sync() -> None:  # a device that finishes the call's work 5 ms after the launch returns
        calls.append("sync")
        time.sleep(0.005)

    samples = wall_clock_samples(run, sync, 3)
    assert calls == ["sync", "run", "sync"] * 3
    assert len(samples) == 3 and min(samples) >= 0.005


def test_cpu_path_still_times_windows() -> None:
    median, low, high, calls = time_call(lambda: torch.ones(64).sum(), window=0.005, repeats=3, warmup=1)
    assert 0 < low <= median <= high and calls > 1


def test_gpu_sweep_covers_gpu_shapes() -> None:
    assert min(GPU_GRIDS["linear"]["m"]) == 128 and max(GPU_GRIDS["linear"]["m"]) == 32768
    assert min(GPU_GRIDS["linear"]["k"]) == 512 and max(GPU_GRIDS["linear"]["k"]) == 8192
    assert {1, 64} <= set(GPU_GRIDS["conv2d"]["b"]) and 224 in GPU_GRIDS["conv2d"]["hw"]
    specs = gpu_sweep(per_kind=24)
    assert len(specs) == 24 * len(GPU_GRIDS) and len({s.key for s in specs}) == len(specs)
    rgb = [dict(s.params) for s in specs if s.kind == "conv2d" and dict(s.params)["cin"] == 3]
    assert all(p["hw"] >= 224 for p in rgb)  # images at real sizes
    linear = [dict(s.params) for s in specs if s.kind == "linear"]
    assert all(2 * p["m"] * p["k"] * p["n"] <= 5e12 for p in linear)
    # far larger than the CPU sweep's
    cpu_m = [dict(s.params)["m"] for s in default_sweep(per_kind=24, kinds=("linear",))]
    assert sorted(p["m"] for p in linear)[len(linear) // 2] > max(cpu_m)
    assert gpu_sweep(per_kind=24) == specs  # reproducible
    with pytest.raises(ValueError, match="unknown layer type 'lstm'"):
        gpu_sweep(kinds=("lstm",))


def test_dtypes() -> None:
    assert ProfileSettings(dtype="bf16").dtype == "bf16"
    with pytest.raises(ValueError, match="unknown dtype 'fp64'"):
        ProfileSettings(dtype="fp64")
    assert cast(torch.ones(2), "fp16").dtype == torch.float16
    assert cast(torch.ones(2, dtype=torch.long), "bf16").dtype == torch.long
    [target] = targets_from_specs(gpu_sweep(per_kind=1, kinds=("linear",))[:1], dtype="bf16")
    assert target.config.endswith("@bf16")
    assert target.run.func.weight.dtype == torch.bfloat16  # type: ignore[attr-defined]


def test_nvml_reports_clearly_that_it_cannot_read_a_gpu_here() -> None:
    with pytest.raises(NvmlError, match=r"nvidia-ml-py|no NVIDIA GPU"):
        read_load(0)


def test_gpu_load_as_contention() -> None:
    import os

    others = GpuLoad(0, "NVIDIA H100 80GB HBM3", 0.62, 10 * 2**30, 80 * 2**30, (os.getpid() + 1,), own=False)
    assert others.contention() == Contention(utilization=0.62)
    alone = GpuLoad(0, "NVIDIA H100 80GB HBM3", 0.9, 2**30, 80 * 2**30, (os.getpid(),), own=True)
    assert alone.contention() == Contention()
    full = GpuLoad(0, "x", 1.0, 0, 1, (os.getpid() + 1,), own=False)
    assert full.contention().utilization == 0.99


def test_gpu_rows_keep_the_cuda_event_span_and_cpu_rows_leave_it_empty(tmp_path) -> None:
    import math

    from pipeplan.costmodel.dataset_files import read_dataset, write_rows
    from pipeplan.costmodel.registry import SHIPPED_DATASET
    from pipeplan.costmodel.timing import GpuTiming, timing_columns

    gpu = timing_columns(GpuTiming(median=2e-3, low=1.5e-3, high=3e-3, event_median=1.2e-3, calls=20), repeats=5)
    assert gpu == {"time_s": 2e-3, "time_min_s": 1.5e-3, "time_max_s": 3e-3, "spread": 0.75, "repeats": 20,
                   "iterations": 1, "event_time_s": 1.2e-3}
    cpu = timing_columns((2e-3, 1e-3, 4e-3, 37), repeats=5)
    assert cpu["event_time_s"] is None and cpu["iterations"] == 37 and cpu["repeats"] == 5
    base = read_dataset(SHIPPED_DATASET)[0]
    out = tmp_path / "rows.csv"
    write_rows(out, [{**base, **gpu}, {**base, **cpu}])
    with out.open() as fh:
        assert fh.read().splitlines()[2].count(",,") >= 1  # the CPU row's span is an empty cell
    gpu_row, cpu_row = read_dataset(out)
    assert gpu_row["event_time_s"] == 1.2e-3 and gpu_row["time_s"] == 2e-3
    assert math.isnan(cpu_row["event_time_s"])
