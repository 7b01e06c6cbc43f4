"""`pipeplan profile` and `pipeplan costmodel …` as a user runs them, and `--costmodel` on the planner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeplan.costmodel.dataset import COLUMNS
from pipeplan.costmodel.dataset_files import read_dataset, replace_rows, write_rows
from pipeplan.costmodel.registry import SHIPPED_DATASET, SHIPPED_NAMES
from pipeplan.costmodel.source import capture_source
from tests.cli_run import run


def test_profile_measures_the_layers_asked_for_under_each_level(tmp_path: Path) -> None:
    out = tmp_path / "data.csv"
    args = ("profile", "--out", str(out), "--layers", "linear:m=8,k=64,n=64,gelu", "--per-kind", "1",
            "--levels", "idle,1xmemory", "--repeats", "2", "--window-ms", "2", "--loaded-window-ms", "4")
    result = run(*args)
    assert result.returncode == 0, result.stderr
    assert "4 measurements written" in result.stderr
    # the device's speed was measured after each level, and the run says whether it held
    assert "after idle: " in result.stderr and "after 1×memory: " in result.stderr
    assert any(verdict in result.stderr for verdict in ("held within 15% of the run's median",
                                                        "more than 15% off the run's median"))
    rows = read_dataset(out)
    assert sorted({r["contention"] for r in rows}) == ["1×memory", "idle"]
    assert rows[0]["config"] == "linear:m=8,k=64,n=64" and rows[1]["config"].startswith("gelu:")
    again = run(*args)  # never overwrites a dataset silently
    assert again.returncode == 2 and "--append" in again.stderr
    assert len(read_dataset(out)) == 4


def test_profile_rejects_unknown_layers_and_levels(tmp_path: Path) -> None:
    bad = run("profile", "--out", str(tmp_path / "x.csv"), "--layers", "transformer")
    assert bad.returncode == 2 and "--layers 'transformer'" in bad.stderr
    bad = run("profile", "--out", str(tmp_path / "x.csv"), "--levels", "lots")
    assert bad.returncode == 2 and "cannot read load 'lots'" in bad.stderr
    bad = run("profile", "--out", str(tmp_path / "x.csv"), "--drift-tolerance", "1.5")
    assert bad.returncode == 2 and "drift tolerance must be a fraction between 0 and 1, got 1.5" in bad.stderr
    assert not (tmp_path / "x.csv").exists()


def test_train_then_report_writes_a_model_tables_and_pictures(tmp_path: Path) -> None:
    # A small dataset keeps the test quick (the Gaussian processes' fit is cubic in the rows): three
    # layer kinds, each configuration under three loads; 152 configurations, so 38 are held out.
    kinds, levels = ("linear:", "layernorm:", "relu:"), {"idle", "2×compute", "1×memory"}
    rows = [r for r in read_dataset(SHIPPED_DATASET) if r["config"].startswith(kinds) and r["contention"] in levels]
    data = tmp_path / "sweep.csv"
    write_rows(data, rows)
    model = tmp_path / "m.zip"
    trained = run("costmodel", "train", str(data), "--out", str(model))
    assert trained.returncode == 0, trained.stderr
    out = " ".join(trained.stdout.split())  # rich wraps long lines
    assert "main: held-out MAPE" in out and "linear: held-out MAPE" in out
    assert "(90% interval" in out and "warning" not in out  # enough held-out configurations to judge
    report = run("costmodel", "report", str(model), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"Trained on {len(rows)} measurements" in text and "By contention level" in text
    for png in ("importances.png", "predicted_vs_measured.png", "error_by_contention.png"):
        assert (tmp_path / "report" / png).stat().st_size > 10_000
    refused = run("costmodel", "report", str(data))
    assert refused.returncode == 2 and "not a pipeplan cost-model file" in refused.stderr


def test_the_learned_model_moves_work_off_a_loaded_core(tmp_path: Path) -> None:
    """Two compute co-runners on cpu0: the learned model sees it, so cpu0 gets the smaller share of the work.

    Work, not time: a balanced plan gives each stage about the same time whatever the loads, so the share of
    the FLOPs a device runs is what moves (a time share passed or failed by a rounding of the split)."""
    flops = {layer.name: layer.flops for layer in capture_source("mlp", 64).layers}

    def work_share_of_cpu0(*load: str) -> float:
        out = tmp_path / "plan.json"
        result = run("plan", "mlp", "--batch", "64", "--cluster", "local-cpu", "--costmodel", "learned",
                     "--time-limit", "5", "--out", str(out), *load)
        assert result.returncode == 0, result.stderr
        plan = json.loads(out.read_text())
        assert plan["costmodel"] == "learned"
        on_cpu0 = [name for s in plan["stages"] if s["device"] == "cpu0" for name in s["layers"]]
        return sum(flops[name] for name in on_cpu0) / sum(flops.values())

    idle, loaded = work_share_of_cpu0(), work_share_of_cpu0("--load", "cpu0=2xcompute")
    assert loaded < idle


def test_an_unknown_cost_model_is_a_clear_error() -> None:
    result = run("costs", "mlp", "--cluster", "local-cpu", "--costmodel", "nonsense.zip")
    assert result.returncode == 2 and "cost model 'nonsense.zip'" in result.stderr


def test_train_on_a_tiny_profile_warns_that_it_cannot_judge_and_shows_coverage(tmp_path: Path) -> None:
    rows = read_dataset(SHIPPED_DATASET)
    few = sorted({r["config"] for r in rows if r["config"].startswith("linear:")})[:6]
    few += sorted({r["config"] for r in rows if r["config"].startswith("layernorm:")})[:2]
    data = tmp_path / "tiny.csv"
    write_rows(data, [r for r in rows if r["config"] in few])
    trained = run("costmodel", "train", str(data), "--out", str(tmp_path / "m.zip"))
    assert trained.returncode == 0, trained.stderr
    out = " ".join(trained.stdout.split())  # rich wraps long lines
    assert "warning: only 2 layer configurations held out (at least 20 are needed)" in out
    assert "coverage by layer kind" in out and "90% interval" not in out  # too few to bootstrap
    assert "no held-out rows for layernorm" in out and "no rows at all for conv, matmul, attention" in out
    report = run("costmodel", "report", str(tmp_path / "m.zip"))
    assert report.returncode == 0 and "only 2 layer configurations" in " ".join(report.stdout.split())


def test_profile_replace_times_layers_again_in_place_of_their_earlier_rows(tmp_path: Path) -> None:
    # the Zen 5's shipped profile predates the dtype and event_time_s columns: its header must survive
    lines = SHIPPED_NAMES["learned-epyc"].dataset.read_text().splitlines()
    again = "layernorm:m=1,c=256"
    stale = [line for line in lines if line.startswith(f'"{again}",')]  # a config with commas is quoted
    kept = [line for line in lines[1:200] if not line.startswith(f'"{again}",')]
    assert len(stale) == 7 and kept
    data = tmp_path / "old.csv"
    data.write_text("\n".join([lines[0], *kept, *stale]) + "\n")
    args = ("profile", "--out", str(data), "--layers", again, "--levels", "idle,1xmemory", "--repeats", "2",
            "--window-ms", "2", "--loaded-window-ms", "4")
    both = run(*args, "--replace", "--append")
    assert both.returncode == 2 and "pass one of them" in both.stderr
    result = run(*args, "--replace")
    assert result.returncode == 0, result.stderr
    assert "2 measurements written" in result.stderr and "in place of 7 earlier ones" in result.stderr
    text = data.read_text().splitlines()
    assert text[0] == lines[0] and text[1:len(kept) + 1] == kept  # every other row as it was
    rows = read_dataset(data)
    fresh = [r for r in rows if r["config"] == again]
    assert [r["contention"] for r in fresh] == ["idle", "1×memory"] and all(r["time_s"] > 0 for r in fresh)
    assert len(rows) == len(kept) + 2 and sorted(p.name for p in tmp_path.iterdir()) == ["old.csv"]


def test_replace_rows_refuses_a_row_the_file_cannot_hold_and_leaves_it_unchanged(tmp_path: Path) -> None:
    rows = read_dataset(SHIPPED_DATASET)[:3]
    data = tmp_path / "data.csv"
    write_rows(data, rows)
    assert replace_rows(data, [{**rows[0], "time_s": 1.5}]) == (1, 1)
    assert [r["time_s"] for r in read_dataset(data)][-1] == 1.5 and len(read_dataset(data)) == 3
    # by source: a model profiled again drops its every earlier row, a layer renamed since included
    assert {r["source"] for r in rows} == {"sweep"}
    assert replace_rows(data, [{**rows[0], "config": "renamed"}], by=("source",)) == (3, 1)
    assert [r["config"] for r in read_dataset(data)] == ["renamed"]
    old = tmp_path / "old.csv"  # a header without the dtype column, as the Zen 5's
    old.write_text(",".join(c for c in COLUMNS if c != "dtype") + "\n")
    before = old.read_text()
    with pytest.raises(ValueError, match="has no dtype column"):
        replace_rows(old, [{**rows[0], "dtype": "bf16"}])
    assert old.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "old.csv"]
    # rows read back as text (a csv.DictReader of a profile) hold a default as "0": storable without its column
    text = {k: "" if v != v else str(v) for k, v in rows[0].items()}
    old.write_text(",".join(c for c in COLUMNS if c not in ("dtype", "channels_last")) + "\n")
    assert replace_rows(old, [text]) == (0, 1) and read_dataset(old)[0]["config"] == rows[0]["config"]
