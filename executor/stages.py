"""Cut an exported program into one ``GraphModule`` per pipeline stage, keeping a plan's layer sets.

:func:`pipeplan.costmodel.capture.capture_program` says which layer owns each operator of the exported
graph; a plan says which stage holds each layer.  :func:`split_program` copies the operators of
each stage into a graph of its own:

- stage 0 takes the model's inputs; stage k > 0 takes exactly what stage k − 1 returns;
- stage k returns every value computed (or received) so far that a later stage or the model's
  output still needs, so a tensor that skips stages (a residual from stage 0 used in stage 2) is
  forwarded through the stages in between — ``PipelineStage`` only talks to its neighbours;
- the last stage returns the model's computed outputs, in the exported order (constants it returns, such as
  ``None``, are left out).

Parameters, buffers and constants are attached to every stage that uses them (a tied weight used
in two stages is held by both).  Every value that crosses a boundary must be a tensor; an
``operator.getitem`` always stays with the operator whose tuple it reads, so tuples never cross.
Operators that belong to no layer (export's runtime assertions) run in the latest stage among
their inputs.

Complexity: linear in the number of nodes and uses, times the number of stages for the live sets.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import fx, nn
from torch.export.graph_signature import InputKind, OutputKind

from pipeplan.costmodel.capture import CapturedProgram
from pipeplan.executor.errors import PlanMismatchError
from pipeplan.executor.python_calls import bind_python_calls

__all__ = ["LAYER_META", "Boundary", "StageProgram", "split_program"]

_INPUT = -1  # the "stage" that produces the model's inputs
# The key, in a stage graph node's meta, of the plan layer that owns the operator (None: no layer), so
# that later passes (lending a layer's weights, :mod:`pipeplan.executor.loan_cut`) can find a layer's operators.
LAYER_META = "pipeplan_layer"


class Boundary(NamedTuple):
    """A tensor a stage receives or returns, as the export traced it: what its buffers are made of.

    Shapes come from the capture, not from running the stage, so a stage is never run on garbage to
    learn them (an embedding fed uninitialised token ids would index out of range).
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    def empty(self, device: torch.device | str = "meta") -> torch.Tensor:
        """A contiguous tensor of this shape and dtype: stages send and receive contiguous tensors."""
        return torch.empty(self.shape, dtype=self.dtype, device=device)


@dataclass
class StageProgram:
    """One stage's module and the names of the values it receives and returns."""

    index: int
    module: fx.GraphModule
    inputs: list[str]  # placeholder names, in call order (stage 0: the model's inputs)
    outputs: list[str]  # returned value names, in order (last stage: the model's outputs)
    layers: list[str]
    forwarded: list[str]  # inputs returned unchanged, for later stages: skip connections
    input_meta: list[Boundary]  # one per input, in order
    output_meta: list[Boundary]  # one per output, in order


def _boundary(node: fx.Node) -> Boundary:
    val = node.meta.get("val")
    assert isinstance(val, torch.Tensor), node.name  # checked for every value that crosses a boundary
    return Boundary(node.name, tuple(int(d) for d in val.shape), val.dtype)


def _state(program: torch.export.ExportedProgram) -> tuple[list[fx.Node], dict[str, torch.Tensor]]:
    """The user-input placeholders, and the tensor behind every parameter/buffer/constant one."""
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    user: list[fx.Node] = []
    state: dict[str, torch.Tensor] = {}
    for spec, node in zip(program.graph_signature.input_specs, placeholders, strict=True):
        if spec.kind == InputKind.USER_INPUT:
            user.append(node)
            continue
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            raise PlanMismatchError(f"cannot split a program with a {spec.kind.name} input ({node.name})")
        target = spec.target or ""
        value = program.state_dict.get(target, program.constants.get(target))
        if not isinstance(value, torch.Tensor):
            raise PlanMismatchError(f"exported program has no tensor for {spec.kind.name} {target!r}")
        state[node.name] = value.detach()
    return user, state


def _outputs(program: torch.export.ExportedProgram) -> list[fx.Node]:
    """The model's computed outputs, in the exported order. Constants it returns (CLIPSeg's hidden states hold
    ``None`` for the layers it skips) are left out: nothing computes them, and the pipeline's results are
    compared with the unsplit model's tensors, in order (:func:`pipeplan.executor.check.tensor_leaves`)."""
    output = next(n for n in program.graph.nodes if n.op == "output")
    values = list(output.args[0])
    result: list[fx.Node] = []
    for spec, value in zip(program.graph_signature.output_specs, values, strict=True):
        if spec.kind != OutputKind.USER_OUTPUT:
            raise PlanMismatchError(f"the model's forward mutates state ({spec.kind.name} {spec.target!r}); "
                                    "a pipeline can only run a pure forward")
        if isinstance(value, fx.Node):
            result.append(value)
    return result


def _stage_of_nodes(captured: CapturedProgram, layer_stage: dict[str, int],
                    state: dict[str, torch.Tensor]) -> dict[str, int]:
    """Stage of every operator node; user inputs get ``_INPUT``."""
    stage: dict[str, int] = {}
    for node in captured.program.graph.nodes:
        if node.op == "placeholder":
            if node.name not in state:
                stage[node.name] = _INPUT
            continue
        if node.op != "call_function":
            continue
        producers = [stage[a.name] for a in node.all_input_nodes if a.name in stage]
        if node.target is operator.getitem and isinstance(node.args[0], fx.Node):
            stage[node.name] = max(0, stage.get(node.args[0].name, 0))
        elif node.name in captured.node_layers:
            stage[node.name] = layer_stage[captured.node_layers[node.name]]
        else:
            stage[node.name] = max([0, *producers])
        late = [a.name for a in node.all_input_nodes if stage.get(a.name, _INPUT) > stage[node.name]]
        if late:
            raise PlanMismatchError(
                f"operator {node.name} (layer {captured.node_layers.get(node.name, '?')!r}) in stage "
                f"{stage[node.name]} reads {late[0]} from the later stage {stage[late[0]]}: the plan's "
                "stages are not in pipeline order")
    return stage


def _attr_name(target: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", target) or "state"
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def split_program(captured: CapturedProgram, stage_layers: Sequence[Sequence[str]]) -> list[StageProgram]:
    """Cut ``captured.program`` into ``len(stage_layers)`` stage modules.

    ``stage_layers[k]`` are the layers of stage k; together they must cover the graph's layers once
    (checked by :func:`pipeplan.executor.validate.check_plan`).

    >>> from pipeplan.costmodel.capture import capture_program
    >>> cp = capture_program(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), (torch.randn(2, 4),))
    >>> [s.inputs for s in split_program(cp, [["0"], ["1", "2"]])]
    [['input'], ['linear']]
    """
    program = captured.program
    layer_stage = {layer: k for k, layers in enumerate(stage_layers) for layer in layers}
    last = len(stage_layers) - 1
    user_inputs, state = _state(program)
    model_outputs = _outputs(program)
    stage = _stage_of_nodes(captured, layer_stage, state)

    # The last stage that needs each value: its latest consumer, or the end for a model output.
    needed_until: dict[str, int] = {}
    for node in program.graph.nodes:
        if node.op == "call_function":
            for arg in node.all_input_nodes:
                if arg.name in stage:
                    needed_until[arg.name] = max(needed_until.get(arg.name, _INPUT), stage[node.name])
    for node in model_outputs:
        needed_until[node.name] = last + 1
    order = [n for n in program.graph.nodes if n.name in stage]
    live = [[n for n in order if stage[n.name] <= k < needed_until.get(n.name, _INPUT)] for k in range(last)]

    for k, values in enumerate(live):
        for node in values:
            if not isinstance(node.meta.get("val"), torch.Tensor):
                raise PlanMismatchError(
                    f"value {node.name} ({type(node.meta.get('val')).__name__}) would cross from stage {k} to "
                    f"{k + 1}; only tensors can be sent between stages")

    stages: list[StageProgram] = []
    for k in range(last + 1):
        inputs = user_inputs if k == 0 else live[k - 1]
        outputs = model_outputs if k == last else live[k]
        graph = fx.Graph()
        root = nn.Module()
        env: dict[fx.Node, fx.Node] = {}
        for node in inputs:
            env[node] = graph.placeholder(node.name)
            env[node].meta = dict(node.meta)
        taken: set[str] = set()
        for node in order:
            if node.op != "call_function" or stage[node.name] != k:
                continue
            for arg in node.all_input_nodes:
                if arg in env:
                    continue
                if arg.name in state:
                    attr = _attr_name(arg.name, taken)
                    root.register_buffer(attr, state[arg.name])
                elif arg.op == "get_attr":  # a subgraph a higher-order operator calls (torch.cond's branches)
                    attr = _attr_name(str(arg.target), taken)
                    root.add_module(attr, getattr(program.graph_module, str(arg.target)))
                else:
                    continue
                env[arg] = graph.get_attr(attr)
                env[arg].meta = dict(arg.meta)
            env[node] = graph.node_copy(node, lambda a: env[a])  # noqa: B023 - used at once
            env[node].meta[LAYER_META] = captured.node_layers.get(node.name)
        missing = [n.name for n in outputs if n not in env]
        if missing:  # a bug in the live sets, not a user error: fail loudly
            raise AssertionError(f"stage {k} cannot return {missing}")
        graph.output(tuple(env[n] for n in outputs))
        bind_python_calls(graph)  # eager's call path: 0.8 µs an operator less than the graph's overloads
        graph.lint()
        module = fx.GraphModule(root, graph, class_name=f"Stage{k}")
        input_names = [n.name for n in inputs]
        stages.append(StageProgram(
            index=k, module=module, inputs=input_names, outputs=[n.name for n in outputs],
            layers=list(stage_layers[k]),
            forwarded=[n.name for n in outputs if n.name in set(input_names)],
            input_meta=[_boundary(n) for n in inputs if isinstance(n.meta.get("val"), torch.Tensor)],
            output_meta=[_boundary(n) for n in outputs if isinstance(n.meta.get("val"), torch.Tensor)]))
    return stages
