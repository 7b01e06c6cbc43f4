"""Where each stage computes and how tensors travel, decided before any process starts.

The GPU logic runs here without a GPU: the number of CUDA devices is injected into
:func:`pipeplan.executor.options.resolve`, and the transport follows from the placement alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import PlanMismatchError, RunOptions
from pipeplan.executor.options import resolve
from pipeplan.planner.plan import Plan
from tests.executor_helpers import plan_with_cuts

_GPU = "memory: 80GiB, peak_flops: 100TFLOPS, mem_bandwidth: 2TB/s"


def _spec(path: Path, devices: list[str]) -> Path:
    lines = ["name: mixed", "devices:", *(f"  - {{{d}}}" for d in devices),
             "topology:", "  intra_host: {bandwidth: 10GB/s, latency: 10us}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def _plan(cluster: Path) -> Plan:
    """mlp cut in three; plan_with_cuts names the devices cpu0, cpu1, cpu2 — the specs below do too."""
    return plan_with_cuts(capture_model("mlp", 2), cluster, ["net.2", "net.4"])


def _gpu(k: int, extra: str = "") -> str:
    return f"id: cpu{k}, type: H100, host: h0, {_GPU}{', ' + extra if extra else ''}"


def test_distinct_gpus_talk_over_nccl(tmp_path: Path) -> None:
    spec = _spec(tmp_path / "c.yaml", [_gpu(0), _gpu(1), _gpu(2)])
    setup = resolve(_plan(spec), RunOptions(cluster=str(spec)), gpus=4)
    assert [s.gpu for s in setup.stages] == [0, 1, 2]
    assert [s.torch_device for s in setup.stages] == ["cuda:0", "cuda:1", "cuda:2"]
    assert setup.backend == "nccl" and not setup.staged and setup.notes == ()


def test_stages_sharing_a_gpu_go_through_host_memory(tmp_path: Path) -> None:
    spec = _spec(tmp_path / "c.yaml", [_gpu(0, "gpu: 0"), _gpu(1, "gpu: 0"), _gpu(2, "gpu: 1")])
    setup = resolve(_plan(spec), RunOptions(cluster=str(spec)), gpus=2)
    assert [s.gpu for s in setup.stages] == [0, 0, 1]
    assert setup.backend == "gloo" and setup.staged


def test_cpu_cores_and_gpus_mix_in_one_pipeline(tmp_path: Path) -> None:
    cpu = "id: cpu0, type: cpu-core, host: h0, memory: 8GiB, peak_flops: 50GFLOPS, mem_bandwidth: 10GB/s, cores: [0]"
    spec = _spec(tmp_path / "c.yaml", [cpu, _gpu(1), _gpu(2)])
    setup = resolve(_plan(spec), RunOptions(cluster=str(spec)), gpus=2)
    assert [s.gpu for s in setup.stages] == [None, 0, 1]
    assert [s.cores for s in setup.stages] == [(0,), None, None]
    assert setup.backend == "gloo" and setup.staged and setup.device_type == "cuda"


def test_a_gpu_plan_is_refused_on_a_machine_without_gpus(tmp_path: Path) -> None:
    spec = _spec(tmp_path / "c.yaml", [_gpu(0), _gpu(1), _gpu(2)])
    with pytest.raises(PlanMismatchError, match=r"stage 0 on cpu0 \(H100\), stage 1 on cpu1 \(H100\), stage 2 "
                       r"on cpu2 \(H100\) on GPUs, but this machine has no CUDA device: .* pass --device cpu"):
        resolve(_plan(spec), RunOptions(cluster=str(spec)), gpus=0)


def test_run_elsewhere_on_request_and_the_report_says_so(tmp_path: Path) -> None:
    spec = _spec(tmp_path / "c.yaml", [_gpu(0), _gpu(1), _gpu(2)])
    setup = resolve(_plan(spec), RunOptions(cluster=str(spec), device="cpu"), gpus=0)
    assert [s.gpu for s in setup.stages] == [None, None, None] and setup.backend == "gloo"
    assert len(setup.notes) == 1
    assert "stage 0 on cpu0, stage 1 on cpu1, stage 2 on cpu2 on GPU devices; --device cpu ran them on CPU" \
           in setup.notes[0]


def test_more_gpus_than_the_machine_has_is_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path / "c.yaml", [_gpu(0), _gpu(1), _gpu(2, "gpu: 5")])
    with pytest.raises(PlanMismatchError, match=r"stage 1 on cpu1 would use GPU 1, stage 2 on cpu2 would use "
                       r"GPU 5, but this machine has 1 GPU \(0–0\): give the devices a 'gpu:' index"):
        resolve(_plan(spec), RunOptions(cluster=str(spec)), gpus=1)


def test_a_device_cannot_be_cores_and_a_gpu(tmp_path: Path) -> None:
    from pipeplan.costmodel.cluster import ClusterError, load_cluster

    spec = _spec(tmp_path / "c.yaml", [_gpu(0, "gpu: 0, cores: [0]"), _gpu(1), _gpu(2)])
    with pytest.raises(ClusterError, match=r"device 'cpu0': give either 'cores' .* or 'gpu' .*, not both"):
        load_cluster(str(spec))
