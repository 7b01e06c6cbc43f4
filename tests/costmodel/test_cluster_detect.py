"""`pipeplan cluster --detect`: a spec of this machine, measured, that plan and run take at once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.cluster_detect import GpuLink, detect_cluster, gpu_pair_link, pcie_bandwidth
from tests.cli_run import run


def test_detected_cores_are_measured_and_pinned() -> None:
    cluster = detect_cluster("here", gpus=False)
    usable = sorted(os.sched_getaffinity(0))
    assert [d.id for d in cluster.devices] == [f"cpu{c}" for c in usable]
    assert [d.cores for d in cluster.devices] == [[c] for c in usable]
    first = cluster.devices[0]
    assert 1e9 < first.peak_flops < 1e13 and 1e8 < first.mem_bandwidth < 1e12  # a real core, measured
    assert all(d.peak_flops == first.peak_flops for d in cluster.devices)
    assert "measured idle" in cluster.description


def test_gpu_links_prefer_nvlink_to_a_peer_and_else_the_slower_pcie_end() -> None:
    a = GpuLink(3, 12, 4, 16, frozenset({1}))
    b = GpuLink(3, 12, 4, 16, frozenset({0}))
    c = GpuLink(None, 0, 3, 8, frozenset())
    assert gpu_pair_link(a, b, 1) == {"bandwidth": 25e9 * 12 * 0.8, "latency": 3e-6}
    assert gpu_pair_link(a, c, 2) == {"bandwidth": pcie_bandwidth(3, 8), "latency": 10e-6}
    with pytest.raises(ValueError, match="at least one lane"):
        pcie_bandwidth(4, 0)


def test_detect_plan_and_run_from_the_command_line(tmp_path: Path) -> None:
    spec = tmp_path / "here.yaml"
    result = run("cluster", "--detect", "--no-gpus", "--name", "here", "--out", str(spec))
    assert result.returncode == 0, result.stderr
    assert f"cluster written to {spec}" in result.stdout
    assert [d.id for d in load_cluster(str(spec)).devices] == [f"cpu{c}" for c in sorted(os.sched_getaffinity(0))]
    plan = tmp_path / "plan.json"
    result = run("plan", "mlp", "--batch", "4", "--cluster", str(spec), "--max-devices", "2", "--out", str(plan))
    assert result.returncode == 0, result.stderr
    result = run("run", "--plan", str(plan), "--batches", "2", "--cluster", str(spec))
    assert result.returncode == 0, result.stderr
    assert "outputs match the unsplit model" in result.stdout


def test_detect_refuses_a_spec_too() -> None:
    result = run("cluster", "local-cpu", "--detect")
    assert result.returncode == 2 and "--detect describes this machine: give no SPEC ('local-cpu')" in result.stderr
