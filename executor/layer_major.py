"""Run a borrowing stage's batch layer-major, so that each borrowed layer is fetched once per batch.

With ``HarvestOptions.fetch="batch"`` (:mod:`pipeplan.planner.harvest`) a borrowing stage runs every
microbatch of a batch through one layer before the next: a borrowed layer's weights are fetched
once, serve all M microbatches, and are released; the stage holds the live activations of all M
meanwhile.  Concatenating the microbatches and running the module once would do the same, but an
exported stage graph carries its microbatch's shapes (a ``view`` to ``[2, 16, 4, 8]``), so
:func:`run_layer_major` instead walks the stage's graph once, running each operator M times, one
per microbatch, and each :class:`~pipeplan.executor.harvest_stream.Fetched` /
:class:`~pipeplan.executor.harvest_stream.Released` once (their weights are shared).  Per microbatch
every operator sees exactly its inputs of a microbatch-major run, so the outputs are bit-identical.

:class:`LayerMajor` fits that into ``PipelineStage``'s one-microbatch-a-call interface: the first
M − 1 calls of a batch keep their inputs and hand back empty output buffers; the M-th runs the
batch and fills them.  The schedule must therefore hold the batch's sends until its last
microbatch has run (:class:`pipeplan.executor.schedule.TimedSchedule`'s ``hold_sends``).

Complexity: one pass over the graph's nodes per batch, M calls per operator; a value is dropped
after its last user has run for every microbatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import fx, nn

from pipeplan.executor.harvest_stream import Fetched, Released
from pipeplan.executor.stages import Boundary

if TYPE_CHECKING:
    from pipeplan.executor.worker import GuardedStage

__all__ = ["LayerMajor", "run_layer_major"]

Env = dict[fx.Node, Any]


class _Step(NamedTuple):
    node: fx.Node
    shared: bool  # run once for the batch (weights, fetches, releases), not once per microbatch
    free: tuple[fx.Node, ...]  # values whose last user this node is: dropped after it


def _steps(module: fx.GraphModule) -> list[_Step]:
    nodes = list(module.graph.nodes)
    last: dict[fx.Node, int] = {}
    for i, node in enumerate(nodes):
        for used in node.all_input_nodes:
            last[used] = i
    free: list[list[fx.Node]] = [[] for _ in nodes]
    for used, i in last.items():
        free[i].append(used)
    out = []
    for i, node in enumerate(nodes):
        shared = node.op == "get_attr" or (
            node.op == "call_module" and isinstance(module.get_submodule(str(node.target)), Fetched | Released))
        out.append(_Step(node, shared, tuple(free[i])))
    return out


def _call(module: fx.GraphModule, node: fx.Node, env: Env) -> Any:
    args = fx.node.map_arg(node.args, env.__getitem__)
    kwargs = fx.node.map_arg(node.kwargs, env.__getitem__)
    if node.op == "call_function":
        return node.target(*args, **kwargs)  # type: ignore[operator]
    if node.op == "call_method":
        return getattr(args[0], str(node.target))(*args[1:], **kwargs)
    if node.op == "call_module":
        return module.get_submodule(str(node.target))(*args, **kwargs)
    if node.op == "get_attr":
        value: Any = module
        for part in str(node.target).split("."):
            value = getattr(value, part)
        return value
    raise RuntimeError(f"layer-major run: node {node.name} has an unknown op {node.op!r}")


def run_layer_major(module: fx.GraphModule, batch: Sequence[tuple[Any, ...]],
                    steps: list[_Step] | None = None) -> list[Any]:
    """``[module(*args) for args in batch]``, computed operator by operator across the batch (see the module).

    >>> gm = fx.symbolic_trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    >>> xs = [(torch.ones(1, 2),), (torch.zeros(1, 2),)]
    >>> all(torch.equal(a, b) for a, b in zip(run_layer_major(gm, xs), [gm(*x) for x in xs]))
    True
    """
    envs: list[Env] = [{} for _ in batch]
    outputs: list[Any] = [None] * len(batch)
    placeholder = 0
    for node, shared, free in steps if steps is not None else _steps(module):
        if node.op == "placeholder":
            for env, args in zip(envs, batch, strict=True):
                env[node] = args[placeholder]
            placeholder += 1
        elif node.op == "output":
            outputs = [fx.node.map_arg(node.args[0], env.__getitem__) for env in envs]
        elif shared:  # a release's arguments only order it: the first microbatch's serve
            value = _call(module, node, envs[0])
            for env in envs:
                env[node] = value
        else:
            for env in envs:
                env[node] = _call(module, node, env)
        for gone in free:
            for env in envs:
                env.pop(gone, None)
    return outputs


class LayerMajor(nn.Module):
    """A stage (a :class:`~pipeplan.executor.worker.GuardedStage`) that runs its batch layer-major, a
    microbatch per call as ``PipelineStage`` calls it: calls 1 … M − 1 of a batch keep their inputs
    and return empty buffers of ``output_meta``; call M runs the batch and fills them (see the module)."""

    def __init__(self, stage: GuardedStage, microbatches: int, output_meta: Sequence[Boundary]) -> None:
        super().__init__()
        self.stage = stage
        self.microbatches = microbatches
        self.output_meta = list(output_meta)
        self._steps = _steps(stage.module) if isinstance(stage.module, fx.GraphModule) else None
        self._inputs: list[tuple[Any, ...]] = []
        self._held: list[tuple[torch.Tensor, ...]] = []
        leaves = stage.staged and not stage.last
        self._out_device = torch.device("cpu") if leaves else stage.compute

    def forward(self, *args: Any) -> tuple[torch.Tensor, ...]:
        stage = self.stage
        if stage.staged:
            args = tuple(a.to(stage.compute, non_blocking=True) if isinstance(a, torch.Tensor) else a for a in args)
        self._inputs.append(args)
        if len(self._inputs) < self.microbatches:
            buffers = tuple(b.empty(self._out_device) for b in self.output_meta)
            self._held.append(buffers)
            return buffers
        batch, self._inputs = self._inputs, []
        held, self._held = self._held, []
        if not isinstance(stage.module, fx.GraphModule) or self._steps is None:
            raise RuntimeError("a layer-major stage needs its exported graph module")
        try:
            outs = run_layer_major(stage.module, batch, self._steps)
        except Exception as exc:
            from pipeplan.executor.worker import ForwardError  # the worker imports this module

            raise ForwardError(f"{type(exc).__name__}: {exc}") from exc
        for buffers, out in zip(held, outs, strict=False):
            for buffer, value in zip(buffers, out, strict=True):
                buffer.copy_(value)
        return tuple(t.to(self._out_device).contiguous() for t in outs[-1])
