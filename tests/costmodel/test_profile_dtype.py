"""`pipeplan profile --dtype`: layers really run in the dtype asked for, and every row records it; older
datasets without the column read as fp32; training refuses rows of several dtypes."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from pipeplan.costmodel.dataset import COLUMNS
from pipeplan.costmodel.dataset_files import read_dataset, single_dtype, write_rows
from pipeplan.costmodel.hardware import Contention, Device
from pipeplan.costmodel.layerspecs import parse_spec
from pipeplan.costmodel.learned import LearnedCostModel
from pipeplan.costmodel.profile import (
    ProfileSettings,
    Target,
    check_dtype,
    profile,
    targets_from_models,
    targets_from_specs,
)
from pipeplan.costmodel.registry import SHIPPED_DATASET, SHIPPED_NAMES
from tests.cli_run import run

CORE = min(os.sched_getaffinity(0))
DEVICE = Device(id="cpu", type="cpu-core", memory="8GiB", peak_flops="50GFLOPS", mem_bandwidth="10GB/s")


def _recording(target: Target, seen: list[torch.dtype]) -> Target:
    """The same target, noting the dtype of every output its calls really computed."""
    def run() -> Any:
        out = target.run()
        seen.append(out.dtype)
        return out

    return Target(target.config, target.source, target.layer, run, target.dtype)


def test_a_tiny_bf16_profile_runs_in_bf16_and_records_it(tmp_path: Path) -> None:
    specs = [parse_spec("linear:m=8,k=32,n=32"), parse_spec("layernorm:m=8,c=64")]
    seen: list[torch.dtype] = []
    targets = [_recording(t, seen) for t in targets_from_specs(specs, dtype="bf16")]
    settings = ProfileSettings(levels=[Contention()], cores=(CORE,), repeats=2, window=0.002, warmup=1,
                               dtype="bf16")
    out = tmp_path / "bf16.csv"
    assert profile(targets, out, settings, DEVICE) == 2
    assert seen and set(seen) == {torch.bfloat16}  # every timed call computed in bf16
    rows = read_dataset(out)
    assert [r["config"] for r in rows] == ["linear:m=8,k=32,n=32@bf16", "layernorm:m=8,c=64@bf16"]
    assert all(r["dtype"] == "bf16" for r in rows)
    assert all(math.isnan(r["event_time_s"]) for r in rows)  # CPU rows: no CUDA-event span
    assert rows[0]["flops"] == 2 * 8 * 32 * 32  # features are the layer's, whatever the dtype


def test_fp32_profile_rows_say_fp32(tmp_path: Path) -> None:
    targets = targets_from_specs([parse_spec("relu:m=8,c=64")])
    out = tmp_path / "fp32.csv"
    profile(targets, out, ProfileSettings(levels=[Contention()], cores=(CORE,), repeats=1, window=0.002), DEVICE)
    [row] = read_dataset(out)
    assert row["dtype"] == "fp32" and row["config"] == "relu:m=8,c=64"


def test_targets_and_settings_must_agree_on_the_dtype(tmp_path: Path) -> None:
    targets = targets_from_specs([parse_spec("relu:m=8,c=64")], dtype="bf16")
    with pytest.raises(ValueError, match="targets built in bf16 for a fp32 profile"):
        profile(targets, tmp_path / "x.csv", ProfileSettings(levels=[Contention()], cores=(CORE,)), DEVICE)


def test_zoo_model_layers_are_cast_to_the_dtype() -> None:
    targets = targets_from_models(["mlp"], dtype="bf16")
    assert targets and all(t.dtype == "bf16" and t.config.endswith("@bf16") for t in targets)
    with torch.inference_mode():
        outputs = [t.run() for t in targets]
    assert {o.dtype for o in outputs if isinstance(o, torch.Tensor)} == {torch.bfloat16}
    assert all(not t.config.endswith("@fp32") for t in targets_from_models(["mlp"]))


def test_check_dtype() -> None:
    check_dtype("bf16")  # bf16 runs on CPUs
    check_dtype("fp32")
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        check_dtype("int8")


def test_cli_profiles_in_bf16_and_fp16_runs_or_is_refused_clearly(tmp_path: Path) -> None:
    out = tmp_path / "bf16.csv"
    args = ("--layers", "linear:m=8,k=32,n=32", "--levels", "idle", "--repeats", "1", "--window-ms", "2",
            "--cores", str(CORE))
    result = run("profile", "--out", str(out), "--dtype", "bf16", *args)
    assert result.returncode == 0, result.stderr
    assert [(r["config"], r["dtype"]) for r in read_dataset(out)] == [("linear:m=8,k=32,n=32@bf16", "bf16")]
    try:
        check_dtype("fp16")
        fp16_runs = True
    except ValueError:
        fp16_runs = False
    result = run("profile", "--out", str(tmp_path / "fp16.csv"), "--dtype", "fp16", *args)
    if fp16_runs:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == 2 and "cannot run fp16 layers on the CPU" in result.stderr
    assert run("profile", "--out", str(tmp_path / "x.csv"), "--dtype", "fp64", *args).returncode == 2


def test_shipped_datasets_without_the_new_columns_read_as_fp32(tmp_path: Path) -> None:
    rows = read_dataset(SHIPPED_DATASET)
    assert {r["dtype"] for r in rows} == {"fp32"} and all(math.isnan(r["event_time_s"]) for r in rows[:50])
    data = tmp_path / "again.csv"
    write_rows(data, rows[:3])  # rewritten with the columns: still fp32, the span empty
    assert [r["dtype"] for r in read_dataset(data)] == ["fp32"] * 3
    assert "dtype" in COLUMNS and "event_time_s" in COLUMNS
    bad = tmp_path / "bad.csv"
    write_rows(bad, [{**rows[0], "dtype": "fp8"}])
    with pytest.raises(ValueError, match="line 2: dtype 'fp8'"):
        read_dataset(bad)


def test_appending_to_a_dataset_written_before_the_new_columns_keeps_its_header(tmp_path: Path) -> None:
    # the Zen 5's shipped profile predates the dtype and event_time_s columns
    old = SHIPPED_NAMES["learned-epyc"].dataset
    header = old.read_text().split("\n", 1)[0].split(",")
    assert "dtype" not in header and "event_time_s" not in header
    data = tmp_path / "old.csv"
    data.write_text("\n".join(old.read_text().split("\n")[:3]) + "\n")  # its header and two rows
    targets = targets_from_specs([parse_spec("conv1d:b=1,cin=16,cout=16,k=3,s=1,g=1,l=32")])
    settings = ProfileSettings(levels=[Contention()], cores=(CORE,), repeats=2, window=0.002, warmup=1)
    assert profile(targets, data, settings, DEVICE) == 1  # profile appends row by row
    assert data.read_text().split("\n", 1)[0].split(",") == header
    rows = read_dataset(data)
    assert len(rows) == 3 and rows[2]["config"] == "conv1d:b=1,cin=16,cout=16,k=3,s=1,g=1,l=32"
    assert rows[2]["main_op"] == "aten.conv1d" and rows[2]["dtype"] == "fp32" and rows[2]["time_s"] > 0
    # a bf16 row, or one with a CUDA-event span, has nowhere to say so in that file: refused, nothing written
    before = data.read_text()
    with pytest.raises(ValueError, match="has no dtype column"):
        write_rows(data, [{**rows[0], "dtype": "bf16"}], append=True)
    with pytest.raises(ValueError, match="has no event_time_s column"):
        write_rows(data, [{**rows[0], "event_time_s": 0.001}], append=True)
    assert data.read_text() == before
    # and a bf16 profile is refused before it measures anything, by the command too
    bf16 = ProfileSettings(levels=[Contention()], cores=(CORE,), repeats=2, window=0.002, warmup=1, dtype="bf16")
    with pytest.raises(ValueError, match="written before the dtype column"):
        profile(targets_from_specs([parse_spec("relu:m=8,c=64")], dtype="bf16"), data, bf16, DEVICE)
    result = run("profile", "--out", str(data), "--append", "--dtype", "bf16", "--layers", "relu:m=8,c=64",
                 "--levels", "idle", "--cores", str(CORE))
    assert result.returncode == 2 and "written before the dtype column" in result.stderr
    assert data.read_text() == before
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a pipeplan profile dataset"):
        write_rows(tmp_path / "other.csv", rows[:1], append=True)


def test_training_refuses_rows_of_several_dtypes(tmp_path: Path) -> None:
    rows = read_dataset(SHIPPED_DATASET)[:40]
    mixed = rows[:20] + [{**r, "dtype": "bf16"} for r in rows[20:]]
    assert single_dtype(rows) == "fp32" and single_dtype([{**r, "dtype": "bf16"} for r in rows]) == "bf16"
    with pytest.raises(ValueError, match=r"bf16 and fp32.*train one model per dtype"):
        LearnedCostModel.train(mixed)
    data = tmp_path / "mixed.csv"
    write_rows(data, mixed)
    result = run("costmodel", "train", str(data), "--out", str(tmp_path / "m.zip"))
    assert result.returncode == 2 and "bf16 and fp32" in result.stderr
