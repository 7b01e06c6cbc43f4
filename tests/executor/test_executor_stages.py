"""Cutting an exported program into stage modules, checking plans against models, plan sources."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from pipeplan.costmodel.capture import capture, capture_program
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.zoo import build_model, capture_model
from pipeplan.executor import PlanMismatchError, check_plan, split_program
from pipeplan.executor.check import tensor_leaves
from pipeplan.executor.source import batch_inputs, batch_kwargs, rebuild, source_of_plan
from pipeplan.planner.plan import Plan
from tests.executor_helpers import cpu_cluster, plan_with_cuts


def _chain(cp_layers: list[str], cuts: list[int]) -> list[list[str]]:
    bounds = [0, *cuts, len(cp_layers)]
    return [cp_layers[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize(("name", "granularity", "cuts"), [
    ("mlp", "leaf", [3, 6]),
    ("rescnn", "leaf", [4, 6, 20]),  # inside block 0: its shortcut skips a stage
    ("rescnn", "block", [2, 4]),
    ("inception", "leaf", [8, 12, 30]),  # between branches of one module
    ("tinygpt", "leaf", [4, 9, 30]),  # inside blocks: the residual stream and the tied weight cross
])
def test_stages_compose_to_the_model(name: str, granularity: str, cuts: list[int]) -> None:
    built = build_model(name, 2, seq_len=16 if name == "tinygpt" else None)
    cp = capture_program(built.model, built.args, granularity=granularity, name=name)
    stage_layers = _chain([layer.name for layer in cp.graph.layers], cuts)
    stages = split_program(cp, stage_layers)
    assert [s.layers for s in stages] == stage_layers
    values = built.args
    with torch.no_grad():
        for k, stage in enumerate(stages):
            assert len(values) == len(stage.inputs), f"stage {k} takes what stage {k - 1} returns"
            values = stage.module(*values)
        torch.testing.assert_close(values[0], built.model(*built.args), rtol=0, atol=0)
    for k, stage in enumerate(stages[:-1]):
        assert stages[k + 1].inputs == stage.outputs


def test_a_skip_over_a_stage_is_forwarded_through_it() -> None:
    built = build_model("rescnn", 1)
    cp = capture_program(built.model, built.args, name="rescnn")
    layers = [layer.name for layer in cp.graph.layers]
    stages = split_program(cp, _chain(layers, [layers.index("blocks.0.bn1"), layers.index("blocks.0.conv2")]))
    # Stage 1 (bn1, relu1) does not use the block's shortcut, the stem's output: it passes it on.
    assert len(stages[1].forwarded) == 1
    assert stages[1].forwarded[0] in stages[0].outputs and stages[1].forwarded[0] in stages[2].inputs


def test_tied_weights_are_held_by_every_stage_that_uses_them() -> None:
    built = build_model("tinygpt", 1, seq_len=8)
    cp = capture_program(built.model, built.args, name="tinygpt")
    layers = [layer.name for layer in cp.graph.layers]
    stages = split_program(cp, _chain(layers, [layers.index("blocks.1.ln1")]))
    first = {t.data_ptr() for _, t in stages[0].module.named_buffers()}
    last = {t.data_ptr() for _, t in stages[1].module.named_buffers()}
    # The embedding (stage 0) and the LM head (stage 1) share one weight.
    tied = dict(built.model.named_parameters())["tok.weight"].data_ptr()
    assert tied in first and tied in last


def test_stages_out_of_pipeline_order_are_refused() -> None:
    cp = capture_program(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (torch.randn(2, 4),))
    with pytest.raises(PlanMismatchError, match="not in pipeline order"):
        split_program(cp, [["1"], ["0"]])


@pytest.fixture(scope="module")
def mlp_plan(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    cluster = cpu_cluster(tmp_path_factory.mktemp("c") / "c.yaml", 2)
    return plan_with_cuts(capture_model("mlp", 4), cluster, ["net.4"])


def _with(plan: Plan, **changes: object) -> Plan:
    return Plan.from_dict({**plan.to_dict(), **changes})


def test_check_plan_names_what_does_not_fit(mlp_plan: Plan) -> None:
    graph = capture_model("mlp", 4)
    check_plan(mlp_plan, graph)
    doc = mlp_plan.to_dict()
    s0, s1 = doc["stages"]
    cases: dict[str, dict[str, Any]] = {
        "plan is for model 'rescnn'": {"model": "rescnn"},
        "microbatch is 8 samples": {"batch_size": 8},
        "leaves out 2 of the 9 layers of model 'mlp'": {"stages": [s0, {**s1, "layers": s1["layers"][:-2]}]},
        "plan names layers 'x', 'y'": {"stages": [s0, {**s1, "layers": [*s1["layers"], "x", "y"]}]},
        "layer 'net.0' is in stage 0 and in stage 1": {"stages": [s0, {**s1, "layers": [*s1["layers"], "net.0"]}]},
        "stage 1 on cpu1 has no layers": {"stages": [s0, {**s1, "layers": []}]},
        "edge net.3 -> net.4 goes backwards": {"stages": [s1, s0]},
    }
    for message, change in cases.items():
        with pytest.raises(PlanMismatchError, match=message):
            check_plan(_with(mlp_plan, **change), graph)


def test_plans_record_their_source_and_old_plans_still_load(mlp_plan: Plan, tmp_path: Path) -> None:
    assert mlp_plan.source == {"model": "mlp", "batch_size": 4, "granularity": "leaf", "zoo": "mlp", "seed": 0}
    mlp_plan.save(tmp_path / "p.json")
    assert Plan.load(tmp_path / "p.json") == mlp_plan
    doc = mlp_plan.to_dict()
    del doc["source"]
    old = Plan.from_dict(json.loads(json.dumps(doc)))
    assert old.source is None
    assert source_of_plan(old) == {"model": "mlp", "zoo": "mlp", "batch_size": 4, "granularity": "leaf"}
    assert [layer.name for layer in rebuild(old).captured.graph.layers] == [layer.name for layer in
                                                                            capture_model("mlp", 4).layers]


def test_a_plan_from_a_factory_rebuilds_the_same_graph() -> None:
    from tests.executor_helpers import exploding_model

    model, args = exploding_model(2)
    graph = capture(model, args, name="exploding")
    graph.meta["factory"] = "tests.executor_helpers:exploding_model"
    with pytest.raises(PlanMismatchError, match="model factory 'nowhere:thing': cannot import 'nowhere'"):
        rebuild(_plan_for(graph, factory="nowhere:thing"))
    assert [layer.name for layer in rebuild(_plan_for(graph)).captured.graph.layers] == ["a", "boom", "c"]


def _plan_for(graph: ModelGraph, factory: str | None = None) -> Plan:
    from pipeplan.planner.plan import Certificate, Stage, source_of
    from pipeplan.planner.problem import PlanOptions

    source = source_of(graph) | ({"factory": factory} if factory else {})
    stage = Stage(0, "cpu0", [layer.name for layer in graph.layers], 0.0, 0.0, 0.0, 0.0, 0, 1)
    return Plan(graph.model, "c", "analytic", PlanOptions(), [stage], 0.0, 0.0, Certificate("t", "HEURISTIC", 0.0),
                batch_size=graph.batch_size, source=source)


def test_batch_inputs_are_deterministic_and_valid() -> None:
    tokens = torch.tensor([[3, 7], [1, 9]])
    samples = torch.arange(10.0).reshape(2, 5)
    a = batch_inputs((tokens, samples), microbatches=3, seed=1, index=4)
    b = batch_inputs((tokens, samples), microbatches=3, seed=1, index=4)
    assert a[0].shape == (6, 2) and a[1].shape == (6, 5) and a[0].dtype == torch.int64
    assert all(any(torch.equal(row, s) for s in samples) for row in a[1])  # the example's samples
    torch.testing.assert_close(a, b)
    assert not torch.equal(a[1], batch_inputs((tokens, samples), 3, seed=1, index=5)[1])


def test_a_samples_inputs_stay_together_positional_and_keyword() -> None:
    """LiLT's boxes (x0, y0, x1, y1) drawn uniformly over their range had negative widths, which index an
    embedding out of range; drawn as whole samples, beside their own token ids, they stay valid."""
    ids = torch.tensor([[5, 6, 7], [50, 60, 70]])
    boxes = torch.tensor([[[0, 0, 10, 10]] * 3, [[400, 300, 900, 800]] * 3])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    pixels = torch.tensor([[0.5], [9.5]])
    args = batch_inputs((ids, boxes), microbatches=4, seed=3, index=2)
    kwargs = batch_kwargs({"mask": mask, "pixels": pixels}, microbatches=4, seed=3, index=2)
    drawn = [int(row[0] == 50) for row in args[0]]  # which example sample each drawn sample is
    assert set(drawn) == {0, 1}  # both samples drawn in 8
    for i, sample in enumerate(drawn):
        assert torch.equal(args[1][i], boxes[sample]) and torch.equal(kwargs["mask"][i], mask[sample])
        assert float(kwargs["pixels"][i]) == float(pixels[sample])
    widths = args[1][..., 2] - args[1][..., 0]
    assert int(widths.min()) > 0


def test_batch_inputs_keep_an_empty_tensor_empty() -> None:
    empty_cache, tokens = torch.zeros(0, 4), torch.tensor([[3, 7]])
    cache, batch = batch_inputs((empty_cache, tokens), microbatches=2, seed=0, index=0)
    assert cache.shape == (0, 4) and batch.shape == (2, 2)


class _ReturnsNone(nn.Module):
    """Returns ``None`` among its tensors, as CLIPSeg's hidden states do for the layers it skips."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        hidden = torch.relu(self.a(x))
        return {"logits": self.b(hidden), "hidden_states": (hidden, None), "loss": None}


def test_constants_a_model_returns_are_left_out_of_the_last_stage() -> None:
    model, x = _ReturnsNone().eval(), torch.randn(2, 8)
    cp = capture_program(model, (x,), name="returns_none")
    layers = [layer.name for layer in cp.graph.layers]
    first, second = split_program(cp, _chain(layers, [1]))
    with torch.no_grad():
        got = second.module(*first.module(x))
        want = tensor_leaves(model(x))
    assert len(got) == len(want) == 2
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
