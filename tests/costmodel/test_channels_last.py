"""A layer's memory layout as a cost feature: a 4-D map in channels-last strides (as a model leaves it after
turning tokens back into an image) is recorded by capture, timed by the sweep, stored in the datasets and
read by the learned models, while model files trained before the feature existed still load and predict."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeplan.costmodel.capture import capture
from pipeplan.costmodel.cli import select_layers
from pipeplan.costmodel.dataset import NUMERIC, layer_features
from pipeplan.costmodel.dataset_files import check_appendable, read_dataset, write_rows
from pipeplan.costmodel.graph import GraphError, ModelGraph
from pipeplan.costmodel.layerspecs import channels_last_twin, default_sweep, parse_spec
from pipeplan.costmodel.layout_backfill import backfill
from pipeplan.costmodel.learned import LearnedCostModel
from pipeplan.costmodel.profile import targets_from_specs
from pipeplan.costmodel.registry import SHIPPED, load_cost_model
from pipeplan.errors import UsageError
from tests.reference_device import reference_device

# The Zen 3's model as shipped from 2026-11-24 to 2026-11-28: trained before the feature, as a user's own older
# model files are (every shipped model has the feature since).
BEFORE_THE_FEATURE = Path(__file__).parents[1] / "data" / "learned-before-channels-last.zip"


class TokensToMap(nn.Module):
    """A dense-prediction neck, cut down (DPT, ViTPose, SAM): tokens turned back into a map by a permute and
    a reshape, which leaves channels-last strides; a convolution keeps them; a resize after it too."""

    def __init__(self, width: int = 16, side: int = 8) -> None:
        super().__init__()
        self.side = side
        self.proj = nn.Conv2d(width, width, 3, padding=1)
        self.head = nn.Conv2d(1, 4, 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, _, c = tokens.shape
        image = tokens.permute(0, 2, 1).reshape(b, c, self.side, self.side)
        up = F.interpolate(self.proj(image), scale_factor=2, mode="bilinear")
        return self.head(up.mean(1, keepdim=True).contiguous())


def test_capture_records_which_layers_run_on_channels_last_maps() -> None:
    graph = capture(TokensToMap().eval(), (torch.randn(2, 64, 16),))
    by_name = {la.name: la for la in graph.layers}
    # the permute and reshape join the convolution: the layer takes tokens, its convolution a map
    assert by_name["proj"].channels_last and by_name["proj"].input_shapes == [[2, 64, 16]]
    (resize,) = [la for la in graph.layers if la.kind == "resize"]
    assert resize.channels_last  # the convolution handed its layout on
    # a one-channel map is contiguous in both layouts: nothing tells them apart, so it is not flagged
    assert not by_name["head"].channels_last
    assert layer_features(by_name["proj"])["channels_last"] == 1
    assert layer_features(by_name["head"])["channels_last"] == 0


def test_the_layout_survives_graph_json_and_older_graphs_read_as_contiguous(tmp_path) -> None:
    graph = capture(TokensToMap().eval(), (torch.randn(2, 64, 16),))
    path = tmp_path / "g.json"
    graph.save(path)
    again = ModelGraph.load(path)
    assert [la.channels_last for la in again.layers] == [la.channels_last for la in graph.layers]
    doc = json.loads(path.read_text())
    # written only where true: a graph without such layers reads, and digests, as before the field existed
    assert [la.get("channels_last") for la in doc["layers"]] == [True if la.channels_last else None
                                                                   for la in graph.layers]
    for layer in doc["layers"]:
        layer.pop("channels_last", None)  # a graph captured before the field existed
    path.write_text(json.dumps(doc))
    assert not any(la.channels_last for la in ModelGraph.load(path).layers)
    doc["layers"][0]["channels_last"] = "yes"
    path.write_text(json.dumps(doc))
    with pytest.raises(GraphError, match=f"layer '{doc['layers'][0]['name']}': channels_last must be true or false"):
        ModelGraph.load(path)


def test_the_sweep_times_the_same_shapes_channels_last() -> None:
    spec = default_sweep(per_kind=4, kinds=["resize"])[0]
    twin = channels_last_twin(spec)
    assert twin is not None and twin.key == spec.key + ",cl=1"
    (flat, laid) = targets_from_specs([spec, twin])
    assert not flat.layer.channels_last and laid.layer.channels_last
    assert layer_features(flat.layer) == {**layer_features(laid.layer), "channels_last": 0}
    _, (x,) = twin.build()
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    # an activation on a token sequence (rank 3) has no map to lay out
    assert channels_last_twin(parse_spec("activation:b=2,c=64,hw=8,rank=3,op=1")) is None


def test_a_shape_with_a_parameter_its_kind_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="layer 'linear' has no parameter cl"):
        parse_spec("linear:m=4,k=8,n=16,cl=1")
    with pytest.raises(ValueError, match="has no parameter cll: it takes b, c, cl, hw, k"):
        parse_spec("maxpool:b=2,c=64,hw=28,k=2,cll=1")


def test_channels_last_profiling_pairs_each_map_shape_with_its_twin_and_refuses_models() -> None:
    plain, _ = select_layers("maxpool,linear", 3, gpu=False)
    specs, _ = select_layers("maxpool,linear", 3, gpu=False, channels_last=True)
    pools = [s for s in plain if s.kind == "maxpool"]
    assert [s.key for s in specs] == [k for s in pools for k in (s.key, s.key + ",cl=1")] + [
        s.key for s in plain if s.kind == "linear"]
    with pytest.raises(UsageError, match="not zoo models"):
        select_layers("maxpool,model:gpt2", 3, gpu=False, channels_last=True)
    with pytest.raises(UsageError, match="has none"):
        select_layers("linear", 3, gpu=False, channels_last=True)


def _row(config: str, channels_last: int) -> dict:
    return {"config": config, "source": "sweep", "layer_kind": "pool", "main_op": "aten.max_pool2d",
            "module_type": "MaxPool2d", "input_shapes": "2x64x28x28", "flops": 0, "bytes_read": 1, "bytes_written": 1,
            "param_bytes": 0, "kernels": 1, "batch": 2, "dtype": "fp32", "device_type": "cpu-core",
            "device_name": "x", "peak_flops": 1e11, "mem_bandwidth": 4e10, "threads": 1, "cores": "0",
            "contention": "idle", "corunners": 0, "contention_kind": "none", "utilization": 0.0,
            "compute_share": 0.0, "memory_share": 0.0, "time_s": 1e-4, "time_min_s": 1e-4, "time_max_s": 1e-4,
            "spread": 0.0, "repeats": 3, "iterations": 10, "loadavg": 0.1, "torch_version": "2", "measured_at": "t",
            "channels_last": channels_last}


def test_datasets_store_the_layout_and_older_files_need_the_backfill(tmp_path) -> None:
    path = tmp_path / "p.csv"
    write_rows(path, [_row("maxpool:b=2,c=64,hw=28,k=2", 0), _row("maxpool:b=2,c=64,hw=28,k=2,cl=1", 1)])
    assert [r["channels_last"] for r in read_dataset(path)] == [0, 1]
    # a file written before the column: its rows read 0, and channels-last rows cannot join it ...
    old = tmp_path / "old.csv"
    with path.open() as src, old.open("w", newline="") as dst:
        rows = list(csv.DictReader(src))
        writer = csv.DictWriter(dst, fieldnames=[c for c in rows[0] if c != "channels_last"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    assert [r["channels_last"] for r in read_dataset(old)] == [0, 0]
    check_appendable(old)
    with pytest.raises(ValueError, match=r"before the channels_last column.*layout_backfill"):
        check_appendable(old, channels_last=True)
    # ... until the backfill adds it, from each row's own key
    assert backfill(old) == (2, 1, 0)
    assert [r["channels_last"] for r in read_dataset(old)] == [0, 1]
    check_appendable(old, channels_last=True)


def test_model_files_from_before_the_feature_load_and_predict_with_what_they_have() -> None:
    graph = capture(TokensToMap().eval(), (torch.randn(2, 64, 16),))
    models = [load_cost_model(f"learned-{shipped.name}") for shipped in SHIPPED]
    models.append(LearnedCostModel.load(BEFORE_THE_FEATURE))
    for model in models:
        assert isinstance(model, LearnedCostModel)
        numeric = model.fitted.numeric
        assert numeric == NUMERIC[:len(numeric)]
        times = model.layer_times(graph.layers, reference_device(model), check_cpu=False)
        assert all(t > 0 for t in times)
        if "channels_last" not in numeric:  # blind to the layout: the same layer on either costs the same
            flat = [dataclasses.replace(la, channels_last=False) for la in graph.layers]
            assert model.layer_times(flat, reference_device(model), check_cpu=False) == times


def test_a_model_file_from_before_the_feature_refits_its_correction_on_its_own_features(tmp_path) -> None:
    (zen3,) = [s for s in SHIPPED if s.name == "epyc-zen3"]  # the CPU the old file was trained on
    model = LearnedCostModel.load(BEFORE_THE_FEATURE)
    assert "channels_last" not in model.fitted.numeric
    rows = read_dataset(zen3.dataset.parent / "inmodel-cpu-epyc-zen3.csv")[:400]
    model.fit_in_model(rows, evaluate=False)
    assert model.in_model is not None and model.in_model.numeric == model.fitted.numeric
    graph = capture(TokensToMap().eval(), (torch.randn(2, 64, 16),))
    before = model.layer_times(graph.layers, reference_device(model), check_cpu=False)
    model.save(tmp_path / "refit.zip")
    again = LearnedCostModel.load(tmp_path / "refit.zip")
    assert again.layer_times(graph.layers, reference_device(model), check_cpu=False) == before


def test_the_zen5_model_prices_each_layout_as_it_was_measured() -> None:
    """The Zen 5's profile holds shapes timed in both layouts; its model, trained with the feature, gives
    each pair the ratio measured (max-pool and resizes far cheaper channels-last, batch norm dearer)."""
    import statistics

    (zen5,) = [s for s in SHIPPED if s.name == "epyc"]
    model = load_cost_model("learned-epyc")
    assert isinstance(model, LearnedCostModel) and "channels_last" in model.fitted.numeric
    idle = {r["config"]: r for r in read_dataset(zen5.dataset) if r["contention"] == "idle"}
    pairs: dict[str, list[tuple[dict, dict]]] = {}
    for config, row in idle.items():
        if config.endswith(",cl=1") and config[:-5] in idle:
            pairs.setdefault(row["main_op"], []).append((idle[config[:-5]], row))
    for op, most in [("aten.max_pool2d", 0.2), ("aten.upsample_bilinear2d", 0.6), ("aten.batch_norm", None)]:
        flat, laid = zip(*pairs[op], strict=True)
        measured = statistics.median(b["time_s"] / a["time_s"] for a, b in pairs[op])
        predicted = statistics.median(model.predict_rows(list(laid)) / model.predict_rows(list(flat)))
        if most is None:  # batch norm: 1.3× slower channels-last, measured and predicted
            assert measured > 1.15 and predicted > 1.15, (op, measured, predicted)
        else:
            assert measured < most and predicted < most, (op, measured, predicted)
