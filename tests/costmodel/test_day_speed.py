"""The day's speed of whole models: tuning-set entries timed now against this CPU's in-model rows."""

from __future__ import annotations

import math

import pytest

from pipeplan.costmodel.dataset_files import read_dataset
from pipeplan.costmodel.day_speed import day_speed, entry_sums, main, measure_day_speed
from pipeplan.costmodel.registry import SHIPPED

IN_MODEL = SHIPPED[0].in_model  # the model-167 Xeon's: inmodel-cpu-xeon.csv


def _shipped_sums() -> dict[str, float]:
    return entry_sums(read_dataset(IN_MODEL))


def test_every_shipped_model_names_the_in_model_file_beside_its_profile() -> None:
    for shipped in SHIPPED:
        assert shipped.in_model.name == shipped.dataset.name.replace("profile-", "inmodel-")
        assert shipped.in_model.exists(), shipped.in_model


def test_an_entry_taking_half_again_as_long_reads_one_and_a_half() -> None:
    then = _shipped_sums()
    speed = day_speed({"opt-b2-s64-w256": 1.5 * then["opt-b2-s64-w256"],
                       "resnet-b2-i128-w16": 0.5 * then["resnet-b2-i128-w16"],
                       "llama-b2-s64-w256": then["llama-b2-s64-w256"]}, IN_MODEL)
    assert speed.ratios == pytest.approx({"opt-b2-s64-w256": 1.5, "resnet-b2-i128-w16": 0.5, "llama-b2-s64-w256": 1.0})
    assert speed.ratio == pytest.approx(1.0)  # the median: one slow spell on one entry does not make the day
    assert speed.describe().startswith("1.00× the time of inmodel-cpu-xeon.csv's rows (opt-b2-s64-w256 1.50,")


def test_sums_are_per_entry_over_its_layers_and_skip_sweep_rows() -> None:
    rows = [{"source": "in-model:opt-b1", "time_s": "0.25"}, {"source": "in-model:opt-b1", "time_s": 0.5},
            {"source": "sweep", "time_s": 9.0}, {"source": "in-model:resnet-b2", "time_s": 1e-3}]
    assert entry_sums(rows) == {"opt-b1": 0.75, "resnet-b2": 1e-3}


def test_an_entry_the_file_lacks_and_an_unknown_entry_are_named(tmp_path, capsys) -> None:
    with pytest.raises(ValueError, match=r"inmodel-cpu-xeon\.csv: no in-model rows of mystery-b1"):
        day_speed({"mystery-b1": 1.0}, IN_MODEL)
    assert main(["--entries", "opt-b2-s64-w256,nope", "--seconds", "0.05"]) == 2
    assert "not entries of the tuning set: nope" in capsys.readouterr().err
    assert main(["--in-model", str(tmp_path / "absent.csv"), "--entries", "opt-b2-s16-w64", "--seconds", "0.05"]) == 2
    assert "absent.csv" in capsys.readouterr().err
    graph = tmp_path / "graph.csv"
    graph.write_text("name,flops\nx,1\n")
    with pytest.raises(ValueError, match=r"graph\.csv: not a pipeplan profile dataset"):
        day_speed({"opt-b2-s16-w64": 1.0}, graph)


def test_a_real_entry_timed_now_is_compared_with_its_rows() -> None:
    # the tiny OPT (16 tokens): a real capture and in-model profile on core 0, a fraction of a second
    speed = measure_day_speed(IN_MODEL, ["opt-b2-s16-w64"], seconds=0.05)
    (ratio,) = speed.ratios.values()
    assert list(speed.ratios) == ["opt-b2-s16-w64"] and math.isfinite(ratio) and 0.1 < ratio < 10
