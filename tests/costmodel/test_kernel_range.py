"""Layers of more operators than the sweep timed: priced up to the sweep's count by the learned model, each further
operator at the device's dispatch floor (``costmodel/kernel_range.py``); and fitting only the in-model correction."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

from pipeplan.costmodel.capture import capture_program
from pipeplan.costmodel.dataset import contention_features, layer_features
from pipeplan.costmodel.dataset_files import read_dataset
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.kernel_range import kernel_range
from pipeplan.costmodel.learned import LearnedCostModel, ModelFileError
from pipeplan.costmodel.registry import SHIPPED_NAMES
from tests.cli_run import run

EPYC = SHIPPED_NAMES["learned-epyc"]


class Scan(nn.Module):
    """A gated recurrence over 96 steps, unrolled by export into one layer of several hundred small operators
    (as RWKV's WKV scan and the gated delta rule are)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.sigmoid(self.gate(x))
        h = torch.zeros_like(x[:, 0])
        out = []
        for t in range(x.shape[1]):
            h = a[:, t] * h + (1 - a[:, t]) * x[:, t]
            out.append(h)
        return torch.stack(out, 1)


@pytest.fixture(scope="module")
def model() -> LearnedCostModel:
    return LearnedCostModel.load(EPYC.model)


@pytest.fixture(scope="module")
def scan_row(model) -> dict:
    graph = capture_program(Scan(), (torch.randn(2, 96, 32),), name="scan").graph
    layer = max(graph.layers, key=lambda la: la.kernels)
    device_type, figures = next(iter(model.reference_devices.items()))
    return {**layer_features(layer), "device_type": device_type, **figures, **contention_features(Contention())}


def test_the_shipped_model_knows_its_sweeps_operator_counts(model) -> None:
    assert kernel_range(read_dataset(EPYC.dataset)) == {"sweep_kernels": 8, "dispatch_s": model.meta["dispatch_s"]}
    assert 1e-6 < model.meta["dispatch_s"] < 3e-6  # the Zen 5's fastest one-operator layer: 1.6 µs


def test_each_operator_past_the_sweeps_count_costs_the_dispatch_floor(model, scan_row) -> None:
    most, dispatch = model.meta["sweep_kernels"], model.meta["dispatch_s"]
    assert scan_row["kernels"] > 300
    at_most = model.predict_rows([{**scan_row, "kernels": most}])[0]
    for kernels in (most + 1, scan_row["kernels"], 2 * scan_row["kernels"]):
        priced = model.predict_rows([{**scan_row, "kernels": kernels}])[0]
        assert priced == pytest.approx(at_most + (kernels - most) * dispatch, rel=1e-12)
    # a file from before the figures were kept priced the whole count through its trees and processes, far higher
    older = copy.copy(model)
    older.meta = {k: v for k, v in model.meta.items() if k not in ("sweep_kernels", "dispatch_s")}
    assert older.predict_rows([scan_row])[0] > 2 * model.predict_rows([scan_row])[0]
    assert older.predict_rows([{**scan_row, "kernels": most}])[0] == at_most


@pytest.mark.parametrize("load", ["2xcompute", "30% used"])  # co-runners, or a measured utilization
def test_the_further_operators_slow_down_under_load_as_their_layer_does(model, scan_row, load) -> None:
    loaded = {**scan_row, **contention_features(Contention.parse(load))}
    most, dispatch = model.meta["sweep_kernels"], model.meta["dispatch_s"]
    beyond = scan_row["kernels"] - most
    base_idle, base_loaded = model.predict_rows([{**scan_row, "kernels": most}, {**loaded, "kernels": most}])
    assert base_loaded > base_idle
    assert model.predict_rows([loaded])[0] == pytest.approx(base_loaded + beyond * dispatch * base_loaded / base_idle,
                                                           rel=1e-9)


def test_fitting_the_in_model_correction_again_reproduces_the_shipped_model(model) -> None:
    refit = LearnedCostModel.load(EPYC.model)
    refit.meta.pop("sweep_kernels"), refit.meta.pop("dispatch_s")  # as a file from before them
    refit.refit_in_model(read_dataset(EPYC.dataset), read_dataset(EPYC.in_model), evaluate=False)
    rows = read_dataset(EPYC.in_model)[::50]
    rows = [{**r, **model.reference_devices[r["device_type"]]} for r in rows]
    assert refit.meta["sweep_kernels"] == 8
    sweep = model.predict_rows(rows)
    assert refit.predict_rows(rows).tolist() == sweep.tolist()
    # the same trees up to the order OpenMP sums gradients in (threads differ from the shipping run's)
    assert refit.in_model.log_factor(rows, sweep) == pytest.approx(model.in_model.log_factor(rows, sweep), abs=1e-4)


def test_the_sweep_is_kept_only_with_the_rows_it_was_fitted_on(model, tmp_path: Path) -> None:
    rows = read_dataset(EPYC.dataset)
    with pytest.raises(ModelFileError, match=f"fitted on {len(rows)} rows .* not these 100 of"):
        copy.deepcopy(model).refit_in_model(rows[:100], read_dataset(EPYC.in_model))
    out = tmp_path / "m.zip"
    bad = run("costmodel", "train", str(EPYC.dataset), "--sweep-from", str(EPYC.model), "--out", str(out))
    assert bad.returncode == 2 and "give --in-model" in bad.stderr and not out.exists()
