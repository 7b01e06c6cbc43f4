"""A stage's batch run layer-major (:mod:`pipeplan.executor.layer_major`) gives exactly the outputs of
its microbatches run one by one, on real exported stage graphs whose views carry the microbatch's shape."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pipeplan.costmodel.capture import capture_program
from pipeplan.costmodel.zoo import build_model
from pipeplan.executor.layer_major import run_layer_major
from pipeplan.executor.stages import split_program


def stage_inputs(model: str, cut: str, count: int) -> tuple[Any, list[tuple[torch.Tensor, ...]]]:
    """The second stage of ``model`` cut at ``cut``, and its inputs for ``count`` different microbatches
    (the first stage's outputs for seeded random inputs)."""
    torch.manual_seed(0)
    built = build_model(model, 2)
    args = tuple(built.args)
    captured = capture_program(built.model, args)
    order = [layer.name for layer in captured.graph.layers]
    first, second = split_program(captured, [order[: order.index(cut)], order[order.index(cut):]])
    inputs = [tuple(t.clone() for t in args) for _ in range(count)]
    for i, x in enumerate(inputs):
        for t in x:
            if t.is_floating_point():
                t.normal_(generator=torch.Generator().manual_seed(i))
            else:
                t.random_(0, int(t.max()) + 1, generator=torch.Generator().manual_seed(i))
    with torch.no_grad():
        mids = [tuple(first.module(*x)) for x in inputs]
    return second.module, mids


@pytest.mark.parametrize(("model", "cut"), [("tinygpt", "blocks.2.ln1"), ("mlp", "net.4")])
def test_layer_major_outputs_equal_the_microbatches_run_one_by_one(model: str, cut: str) -> None:
    module, mids = stage_inputs(model, cut, 3)  # three different microbatches into the second stage
    with torch.no_grad():
        one_by_one = [module(*mid) for mid in mids]
        together = run_layer_major(module, mids)
    assert len(together) == 3
    for mine, theirs in zip(together, one_by_one, strict=True):
        assert len(mine) == len(theirs)
        assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))
    assert not torch.equal(together[0][0], together[1][0])  # the microbatches differ: nothing was shared
