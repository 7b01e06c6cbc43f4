"""The command line as a user runs it: its output and exit status.

Most commands run in this process (``tests.cli_run.run``: ``pipeplan.cli.main`` with its output captured);
``--help``, a command and a user error also run as a real ``python -m pipeplan`` process, so that the
entry point itself, its output streams and its exit status stay tested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeplan.costmodel.graph import ModelGraph
from pipeplan.planner.builder import GraphBuilder
from tests.cli_run import run, run_process


@pytest.mark.slow
def test_demo_prints_graph_table_device_times_and_plans(tmp_path: Path) -> None:
    """`make demo` runs `pipeplan demo`: GPT-2 by blocks on the heterogeneous cluster, planned."""
    result = run("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # 19: the position-mask glue GPT-2 computes and never uses is dropped (dead) since capture drops dead layers
    assert "gpt2 · batch 1 · block granularity · 19 layers" in out
    for name in ("transformer.wte", "transformer.h.0", "transformer.h.11", "lm_head"):
        assert name in out
    assert "32.2 GFLOP" in out  # GPT-2 small, 128 tokens
    assert "cluster hetero-a100-t4" in out and "1×compute" in out
    assert "plan for gpt2 on hetero-a100-t4 by ilp: OPTIMAL" in out
    for method in ("uniform", "param-balanced", "time-balanced", "chain-dp"):
        assert f"│ {method}" in out
    assert (tmp_path / "demo-compare.png").stat().st_size > 10_000
    # the busy T4 is slower than the idle one, and both fit the model
    rows = {line.split("│")[1].strip(): line for line in out.splitlines()
            if line.startswith("│ gpu") and "layers" in line}
    assert set(rows) == {"gpu0", "gpu1", "gpu2", "gpu3"}
    assert "1.00×" in rows["gpu3"] and "1.00×" not in rows["gpu2"]


def test_help_lists_commands() -> None:
    result = run_process("--help")
    assert result.returncode == 0
    for command in ("models", "graph", "cluster", "costs", "demo"):
        assert command in result.stdout


def test_graph_table_and_json(tmp_path: Path) -> None:
    out = tmp_path / "mlp.json"
    result = run("graph", "mlp", "--batch", "2", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "mlp · batch 2 · leaf granularity · 9 layers, 8 edges" in result.stdout
    assert "net.8" in result.stdout and "total" in result.stdout
    graph = ModelGraph.load(out)
    assert graph.model == "mlp" and len(graph) == 9
    assert json.loads(out.read_text())["version"] == 1
    # a saved graph is a MODEL too
    again = run("costs", str(out), "--cluster", "local-cpu", "--summary")
    assert again.returncode == 0, again.stderr
    assert "cpu0" in again.stdout and "cpu1" in again.stdout


def test_cluster_list_and_show() -> None:
    listed = run("cluster", "--list")
    assert listed.returncode == 0
    for name in ("4xa100-nvlink", "8gpu-2hosts", "hetero-a100-t4", "local-cpu"):
        assert name in listed.stdout
    shown = run_process("cluster", "local-cpu", "--load", "cpu1=2xmemory")  # a real process
    assert shown.returncode == 0, shown.stderr
    assert "2×memory" in shown.stdout and "links: bandwidth / latency" in shown.stdout


@pytest.mark.parametrize("args, message", [
    (("graph", "nosuchmodel"), "unknown model 'nosuchmodel'"),
    (("graph", "mlp", "--granularity", "depth:0"), "unknown granularity"),
    (("costs", "mlp", "--cluster", "nosuchcluster"), "nosuchcluster"),
    (("cluster", "local-cpu", "--load", "cpu9=1"), "cpu9"),
    (("cluster", "local-cpu", "--load", "cpu1=lots"), "cannot read load 'lots'"),
    (("cluster", "local-cpu", "--load", "cpu1"), "DEVICE=LEVEL"),
])
def test_bad_input_is_one_clear_line_and_status_2(args: tuple[str, ...], message: str,
                                                  tmp_path: Path) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_user_error_ends_the_process_with_status_2_and_one_line() -> None:
    result = run_process("cluster", "local-cpu", "--load", "cpu1=lots")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeplan cluster: error: cannot read load 'lots'"), lines
    assert result.stdout == ""


def test_malformed_graph_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "pipeplan.graph", "version": 7}')
    result = run("graph", str(bad))
    assert result.returncode == 2
    assert "unknown graph version 7" in result.stderr and str(bad) in result.stderr


def test_plan_and_compare(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = run("plan", "rescnn", "--batch", "8", "--granularity", "block", "--cluster", "hetero-a100-t4",
                 "--load", "gpu0=2xcompute", "--comm", "serial", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "plan for rescnn on hetero-a100-t4 by ilp: OPTIMAL" in result.stdout
    doc = json.loads(out.read_text())
    assert doc["format"] == "pipeplan.plan" and doc["options"]["comm"] == "serial"
    layers = [name for stage in doc["stages"] for name in stage["layers"]]
    assert sorted(layers) == sorted(ModelGraph.from_dict(json.loads(run_graph_json(tmp_path))).nx.nodes)
    png = tmp_path / "cmp.png"
    cmp = run("compare", "mlp", "--cluster", "local-cpu", "--png", str(png))
    assert cmp.returncode == 0, cmp.stderr
    assert "ilp" in cmp.stdout and "chain-dp" in cmp.stdout and png.stat().st_size > 10_000


def run_graph_json(tmp_path: Path) -> str:
    path = tmp_path / "g.json"
    assert run("graph", "rescnn", "--batch", "8", "--granularity", "block", "--json", str(path)).returncode == 0
    return path.read_text()


def test_plan_that_cannot_fit_is_one_clear_line(tmp_path: Path) -> None:
    """Three layers of 3 GiB of weights; local-cpu's two 8 GiB devices keep 8 GiB after a 50% margin."""
    b = GraphBuilder("big")
    for i in range(3):
        b.layer(f"l{i}", flops=10**9, param_bytes=3 * 2**30, inputs={f"l{i - 1}": 1 << 20} if i else {})
    graph = tmp_path / "big.json"
    b.build().save(graph)
    result = run("plan", str(graph), "--cluster", "local-cpu", "--memory-margin", "0.5")
    assert result.returncode == 2
    assert result.stderr == ("pipeplan plan: error: big needs 9.00 GiB but the 2 devices of 'local-cpu' offer "
                             "8.00 GiB after the 50% margin: 1.00 GiB short\n")
