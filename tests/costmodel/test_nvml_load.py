"""A GPU's live load from NVML: the contention rule on readings given as data (this process's own share
taken out), matching readings to CUDA devices, and cluster detection where there is no GPU or NVML."""

from __future__ import annotations

import os

import pytest

from pipeplan.costmodel.cluster_detect import detect_cluster, match_loads, recorded_loads
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.nvml import GpuLoad, NvmlError, own_share, read_loads

ME, OTHER, THIRD = os.getpid(), os.getpid() + 1, os.getpid() + 2
GIB = 2**30


def _load(util: float, procs: tuple[int, ...], own_util: float | None = None, uuid: str = "",
          index: int = 0) -> GpuLoad:
    return GpuLoad(index, "NVIDIA H100 80GB HBM3", util, 20 * GIB, 80 * GIB, procs, ME in procs, own_util, uuid)


def test_others_alone_take_the_whole_utilisation() -> None:
    assert _load(0.62, (OTHER,)).contention() == Contention(utilization=0.62)
    assert _load(1.0, (OTHER, THIRD)).contention() == Contention(utilization=0.99)  # below 1, as Contention needs


def test_this_process_alone_or_nothing_running_is_idle() -> None:
    assert _load(0.9, (ME,), own_util=0.9).contention() == Contention()
    assert _load(0.9, (ME,)).contention() == Contention()
    assert _load(0.0, (OTHER,)).contention() == Contention()


def test_this_process_share_is_taken_out_when_nvml_gives_it() -> None:
    assert _load(0.8, (ME, OTHER), own_util=0.3).contention().utilization == pytest.approx(0.5)
    assert _load(0.8, (ME, OTHER), own_util=0.0).contention().utilization == pytest.approx(0.8)
    assert _load(0.3, (ME, OTHER), own_util=0.5).contention() == Contention()  # samples disagree: never below 0


def test_without_per_process_samples_the_utilisation_is_split_evenly() -> None:
    assert _load(0.8, (ME, OTHER)).contention().utilization == pytest.approx(0.4)
    assert _load(0.9, (ME, OTHER, THIRD)).contention().utilization == pytest.approx(0.6)


def test_own_share_from_per_process_samples() -> None:
    assert own_share([(ME, 0.2), (OTHER, 0.7), (ME, 0.4)], ME) == pytest.approx(0.3)
    assert own_share([(OTHER, 0.7)], ME) == 0.0
    assert own_share([], ME) is None


def test_readings_match_cuda_devices_by_uuid_else_by_index() -> None:
    a, b = _load(0.1, (), uuid="GPU-aaaa", index=0), _load(0.2, (), uuid="GPU-bbbb", index=1)
    assert match_loads(["bbbb", "aaaa"], [a, b]) == [b, a]  # torch leaves out NVML's "GPU-" prefix
    assert match_loads(["cccc"], [a, b]) == [None]
    assert match_loads(["", ""], [a, b]) == [a, b]
    assert match_loads(["aaaa", "bbbb", "x"], [_load(0.1, ()), _load(0.2, ())])[2] is None


def test_recorded_loads_and_their_notes() -> None:
    loads, notes = recorded_loads([_load(0.8, (ME, OTHER), own_util=0.3), None])
    assert loads[0].utilization == pytest.approx(0.5) and loads[1] == Contention()
    assert len(notes) == 1
    assert notes[0] == ("gpu0 when detected (NVML): 80% busy, this process 30%, 1 other process(es), "
                        "20.0 of 80 GiB in use: load 50% used")


def test_nvml_is_not_readable_here() -> None:
    with pytest.raises(NvmlError, match=r"nvidia-ml-py|no NVIDIA GPU"):
        read_loads()


def test_detection_without_a_gpu_records_no_load() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    cluster = detect_cluster("here", cores=[min(os.sched_getaffinity(0))], measure=False)
    assert [d.id for d in cluster.devices] == [f"cpu{min(os.sched_getaffinity(0))}"]
    assert all(d.load == Contention() for d in cluster.devices)
    assert "NVML" not in cluster.description and "GPU loads" not in cluster.description
