"""Layers named by an operator the sweep never timed, priced at the device's roofline plus the dispatch floor
(``costmodel/unseen_ops.py``); a model's device figures are its rows' median (``learned.reference_figures``)."""

from __future__ import annotations

import copy
import statistics

import pytest
import torch
from torch import nn

from pipeplan.costmodel.capture import capture_program
from pipeplan.costmodel.dataset import contention_features, layer_features
from pipeplan.costmodel.dataset_files import read_dataset
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.learned import LearnedCostModel
from pipeplan.costmodel.registry import SHIPPED_NAMES
from pipeplan.costmodel.unseen_ops import roofline_floor

EPYC = SHIPPED_NAMES["learned-epyc"]


class DepthBins(nn.Module):
    """Depth as the expectation over bins spaced by ``linspace``, as CHMv2's head computes it: one layer named
    ``aten.linspace``, an operator no sweep times."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bins = torch.linspace(0.1, 10.0, x.shape[1])
        return (torch.softmax(x, 1) * bins.view(1, -1, 1, 1)).sum(1)


@pytest.fixture(scope="module")
def model() -> LearnedCostModel:
    return LearnedCostModel.load(EPYC.model)


def _row(model: LearnedCostModel, layer, load: Contention) -> dict:
    device_type, figures = next(iter(model.reference_devices.items()))
    return {**layer_features(layer), "device_type": device_type, **figures, **contention_features(load)}


@pytest.fixture(scope="module")
def bins_row(model) -> dict:
    (layer,) = capture_program(DepthBins(), (torch.randn(2, 64, 64, 64),), name="bins").graph.layers
    return _row(model, layer, Contention())


def _through_the_trees(model: LearnedCostModel) -> LearnedCostModel:
    older = copy.copy(model)
    older.meta = {k: v for k, v in model.meta.items() if k != "unseen_ops"}
    return older


def test_an_unseen_operator_costs_its_roofline_and_a_dispatch_per_operator(model, bins_row) -> None:
    assert bins_row["main_op"] == "aten.linspace" and "aten.linspace" not in model.vocabulary["main_op"]
    assert model.meta["unseen_ops"] == "roofline"
    moved = bins_row["bytes_read"] + bins_row["bytes_written"]
    floor = moved / bins_row["mem_bandwidth"] + bins_row["kernels"] * model.meta["dispatch_s"]
    assert model.predict_rows([bins_row])[0] == pytest.approx(floor, rel=1e-12)
    assert roofline_floor([bins_row], model.meta["dispatch_s"])[0] == pytest.approx(floor, rel=1e-12)
    # a file fitted before prices it through its trees, as its in-model correction was fitted
    assert _through_the_trees(model).predict_rows([bins_row])[0] != pytest.approx(floor, rel=0.01)


@pytest.mark.parametrize("load", ["2xcompute", "30% used"])
def test_an_unseen_operator_slows_down_under_load_as_the_trees_say_its_layer_does(model, bins_row, load) -> None:
    loaded = {**bins_row, **contention_features(Contention.parse(load))}
    idle_trees, loaded_trees = _through_the_trees(model).predict_rows([bins_row, loaded])
    assert loaded_trees > idle_trees
    floor = model.predict_rows([bins_row])[0]
    assert model.predict_rows([loaded])[0] == pytest.approx(floor * loaded_trees / idle_trees, rel=1e-9)


def test_a_layer_of_a_timed_operator_is_priced_as_before(model) -> None:
    layers = capture_program(nn.Sequential(nn.Linear(256, 512), nn.GELU()), (torch.randn(8, 256),),
                             name="mlp").graph.layers
    rows = [_row(model, la, load) for la in layers for load in (Contention(), Contention.parse("2xcompute"))]
    assert model.predict_rows(rows).tolist() == _through_the_trees(model).predict_rows(rows).tolist()


def test_the_device_figures_are_the_median_of_the_rows(model) -> None:
    rows = [r for r in read_dataset(EPYC.dataset) if r["device_type"] == "cpu-core"]
    assert model.reference_devices["cpu-core"] == {
        "peak_flops": statistics.median(float(r["peak_flops"]) for r in rows),
        "mem_bandwidth": statistics.median(float(r["mem_bandwidth"]) for r in rows)}
