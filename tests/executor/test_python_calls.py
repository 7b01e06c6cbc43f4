"""Stage modules call their operators through PyTorch's Python bindings (``torch.add``, ``x.view``), as eager
code does, not through the exported graph's ``OpOverload``s, which cost about 0.8 µs more a call."""

from __future__ import annotations

import pickle

import torch
from torch import nn

from pipeplan.costmodel.capture import capture_program
from pipeplan.costmodel.zoo.build import build_model
from pipeplan.executor.stages import split_program


def _overloads(module: torch.fx.GraphModule) -> list[str]:
    return [str(n.target) for n in module.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]


def test_stages_of_a_real_model_call_bindings_and_compute_exactly_what_the_exported_graph_does() -> None:
    built = build_model("tinygpt", 2, seq_len=16)
    captured = capture_program(built.model, built.args)
    names = [la.name for la in sorted(captured.graph.layers, key=lambda la: la.order)]
    stages = split_program(captured, [names[:len(names) // 2], names[len(names) // 2:]])
    calls = [n for s in stages for n in s.module.graph.nodes if n.op in ("call_function", "call_method")]
    assert sum(n.op == "call_method" for n in calls) > 5  # x.view(...), x.expand(...): Tensor methods
    assert sum(n.op == "call_function" for n in calls) > 20
    # split keeps its overload: Tensor.split and torch.split are Python functions, not the generated binding
    assert {op for s in stages for op in _overloads(s.module)} == {"aten.split.Tensor"}
    with torch.no_grad():
        want = captured.program.module()(*built.args)  # the exported graph as captured: every call an overload
        middle = stages[0].module(*built.args)
        sent = [middle[stages[0].outputs.index(name)] for name in stages[1].inputs]
        got = stages[1].module(*sent)
    assert torch.equal(got[0], want if isinstance(want, torch.Tensor) else want[0])


class _WritesInPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        y.add_(1.0)  # an operator that writes to its argument keeps its overload
        return y.view(-1) * 2


def test_an_operator_that_writes_to_its_argument_keeps_its_overload_and_stages_still_pickle() -> None:
    x = torch.randn(2, 3)
    captured = capture_program(_WritesInPlace().eval(), (x,))
    (stage,) = split_program(captured, [[la.name for la in captured.graph.layers]])
    assert _overloads(stage.module) == ["aten.add_.Tensor"]
    again = pickle.loads(pickle.dumps(stage.module))  # stages travel to their processes pickled
    with torch.no_grad():
        assert torch.equal(again(x)[0], (torch.relu(x) + 1.0).view(-1) * 2)


class _Casts(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # as OLMo Hybrid casts: export records aten.to.dtype with every argument in order, memory_format among
        # them, which the binding (Tensor.to) takes by keyword only
        wide = x.transpose(1, 2).to(torch.float64, memory_format=torch.contiguous_format) * 3
        return wide.to(torch.float32, memory_format=torch.contiguous_format)


def test_optional_arguments_reach_a_binding_by_name() -> None:
    x = torch.randn(1, 2, 3, 3)
    captured = capture_program(_Casts().eval(), (x,))
    (stage,) = split_program(captured, [[la.name for la in captured.graph.layers]])
    methods = [n for n in stage.module.graph.nodes if n.op == "call_method"]
    casts = [n for n in methods if n.target == "to"]
    assert len(casts) == 2 and all(len(n.args) == 2 and "memory_format" in n.kwargs for n in casts)
    with torch.no_grad():
        got = stage.module(x)[0]
    assert torch.equal(got, (x.transpose(1, 2).double() * 3).float()) and got.dtype == torch.float32


def test_a_call_no_binding_takes_keeps_its_overload() -> None:
    """Qwen2.5-Omni's BigVGAN (a tuning family) calls ``aten.to.dtype_layout``, whose ``layout`` argument no
    Python binding takes: tried on its fake tensors first, it keeps its overload and the stage still runs."""
    from pipeplan.costmodel.tuning_set import ENTRIES

    (entry,) = [e for e in ENTRIES if e.name == "bigvgan-b1-f64-w128"]
    _, args, captured = entry.built()
    (stage,) = split_program(captured, [[la.name for la in captured.graph.layers]])
    assert "aten.to.dtype_layout" in _overloads(stage.module)
    with torch.no_grad():
        assert torch.equal(stage.module(*args)[0], captured.program.module()(*args))
