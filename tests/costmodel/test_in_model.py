"""The in-model correction: layers timed inside real passes correct the per-layer sweep's predictions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from pipeplan.costmodel.capture import capture_program
from pipeplan.costmodel.dataset_files import read_dataset
from pipeplan.costmodel.hardware import Device
from pipeplan.costmodel.in_model import BOUNDS, InModelCorrection, family, family_cross_validation, whole_model_errors
from pipeplan.costmodel.learned import LearnedCostModel
from pipeplan.costmodel.tuning_set import Entry, in_model_rows

DATA = Path(__file__).resolve().parents[2] / "costmodel" / "data" / "profile-cpu-xeon.csv"


@pytest.fixture(scope="module")
def sweep_rows() -> list[dict[str, Any]]:
    """Idle rows of the shipped Xeon profile, every 4th configuration: a small but real sweep."""
    rows = [r for r in read_dataset(DATA) if r["contention"] == "idle"]
    return rows[::4]


def _as_in_model(rows: list[dict[str, Any]], factor: float) -> list[dict[str, Any]]:
    """The rows relabelled as three families' in-model layers measured ``factor`` × their sweep time."""
    return [{**r, "source": f"in-model:{'abc'[i % 3]}-b1", "time_s": factor * r["time_s"]}
            for i, r in enumerate(rows)]


def test_a_constant_gap_is_learned_for_families_never_seen(sweep_rows: list[dict[str, Any]]) -> None:
    rows = _as_in_model(sweep_rows, 2.0)
    sweep_log = np.log10([r["time_s"] / 2.0 for r in rows])  # a sweep model exactly 2× too fast
    cv = family_cross_validation(rows, sweep_log)
    assert cv["families"] == ["a", "b", "c"]
    assert cv["sweep"]["median_abs"] == pytest.approx(0.5)
    assert abs(cv["corrected"]["worst"]) < 0.01
    assert cv["corrected"]["within_10"] == 1.0


def test_the_correction_is_bounded(sweep_rows: list[dict[str, Any]]) -> None:
    rows = _as_in_model(sweep_rows, 10.0)
    sweep_log = np.log10([r["time_s"] / 10.0 for r in rows])
    fitted = InModelCorrection.fit(rows, sweep_log)
    factors = fitted.log_factor(rows, sweep_log)
    assert factors.max() == pytest.approx(BOUNDS[1])
    errors = whole_model_errors(rows, np.power(10.0, sweep_log + factors))
    assert all(e == pytest.approx(10 ** BOUNDS[1] / 10 - 1) for e in errors.values())


def test_family_names_and_mismatched_inputs_are_refused(sweep_rows: list[dict[str, Any]]) -> None:
    assert family({"source": "in-model:llama-b2-s64-w256"}) == "llama"
    with pytest.raises(ValueError, match="3 in-model rows for 2 sweep predictions"):
        InModelCorrection.fit(sweep_rows[:3], np.zeros(2))
    with pytest.raises(ValueError, match="at least two architecture families"):
        family_cross_validation(_as_in_model(sweep_rows[:1], 1.0), np.zeros(1))


def _tiny_mlp(batch_size: int = 4) -> tuple[nn.Module, tuple[Any, ...]]:
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)), (torch.randn(batch_size, 64),)


def _tiny_cnn(batch_size: int = 2) -> tuple[nn.Module, tuple[Any, ...]]:
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten()), (torch.randn(batch_size, 3, 16, 16),)


def test_a_model_trained_with_in_model_rows_corrects_graph_layers_and_survives_a_round_trip(
        sweep_rows: list[dict[str, Any]], tmp_path: Path) -> None:
    in_model = [row for entry in (Entry(_tiny_mlp, {"batch_size": 4}), Entry(_tiny_mlp, {"batch_size": 16}),
                                  Entry(_tiny_cnn)) for row in in_model_rows(entry, seconds=0.05)]
    assert {r["source"] for r in in_model} == {"in-model:_tiny_mlp-b4", "in-model:_tiny_mlp-b16",
                                               "in-model:_tiny_cnn"}
    assert all(r["time_s"] > 0 and r["contention"] == "idle" for r in in_model)
    model = LearnedCostModel.train(sweep_rows, evaluate=False, in_model_rows=in_model)
    assert model.in_model is not None
    assert model.meta["in_model"] == {"rows": len(in_model), "models": 3}  # not cross-validated: evaluate=False

    model.save(tmp_path / "m.zip")
    loaded = LearnedCostModel.load(tmp_path / "m.zip")
    graph = capture_program(*_tiny_mlp()).graph
    device = Device(id="core0", type="cpu-core", peak_flops=1e11, mem_bandwidth=1e10, memory=2**30, cores=[0])
    corrected = loaded.layer_times(graph.layers, device)
    assert corrected == model.layer_times(graph.layers, device)
    # The sweep's own prediction of the same layers: the correction is a bounded factor on it.
    loaded.in_model = None
    sweep = loaded.layer_times(graph.layers, device)
    ratios = np.log10(np.array(corrected) / np.array(sweep))
    assert ratios.min() >= BOUNDS[0] - 1e-9 and ratios.max() <= BOUNDS[1] + 1e-9
    assert not np.allclose(ratios, 0.0)


def test_in_model_rows_of_a_device_the_sweep_never_profiled_are_refused(sweep_rows: list[dict[str, Any]]) -> None:
    model = LearnedCostModel.train(sweep_rows[:200], evaluate=False)
    rows = [{**r, "device_type": "gpu-h100"} for r in _as_in_model(sweep_rows[:10], 1.0)]
    with pytest.raises(ValueError, match=r"device types \['gpu-h100'\] that the sweep never profiled"):
        model.fit_in_model(rows)
