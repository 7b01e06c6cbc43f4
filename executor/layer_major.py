"""Run a borrowing stage's batch layer-major, so that each borrowed layer is fetched once per batch.

With ``HarvestOptions.fetch="batch"`` (:mod:`pipeplan.planner.harvest`) a borrowing stage runs every
microbatch of a batch through one layer before the next: a borrowed layer's weights are fetched
once, serve all M microbatches, and are released; the stage holds the live activations of all M
meanwhile.  Concatenating the microbatches and running the module once would do the same, but an
exported stage graph carries its microbatch's shapes (a ``view`` to ``[2, 16, 4, 8]``), so
:func:`run_layer_major` instead runs each operator M times, one per microbatch, and each
:class:`~pipeplan.executor.harvest_stream.Fetched` /
:class:`~pipeplan.executor.harvest_stream.Released` once (their weights are shared).  Per microbatch
every operator sees exactly its inputs of a microbatch-major run, so the outputs are bit-identical.

:class:`LayerMajor` fits that into ``PipelineStage``'s one-microbatch-a-call interface: the first
M − 1 calls of a batch keep their inputs and hand back empty output buffers; the M-th runs the
batch and fills them.  The schedule must therefore hold the batch's sends until its last
microbatch has run (:class:`pipeplan.executor.schedule.TimedSchedule`'s ``hold_sends``).

The walk is by blocks, one per layer (cut after each layer's last operator and after each
release): each block runs for every microbatch in turn, in alternating order (0…M−1, then M−1…0,
so the microbatch that ends a block starts the next), a fetch for the first microbatch and a
release after the last.  With a stash (``stash=True``, :mod:`pipeplan.executor.stash`) the
microbatches that wait between blocks are sent to a lender and asked back, the next one while the
current one computes; a :class:`~pipeplan.executor.stash_memory.BatchMeter` counts what the batch
holds against the device's cap.

Complexity: one pass over the graph's nodes per microbatch; a value is dropped after its last user
has run for its microbatch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import fx, nn

from pipeplan.executor.harvest_stream import Fetched, Released
from pipeplan.executor.stage_build import ForwardError, GuardedStage
from pipeplan.executor.stages import LAYER_META, Boundary
from pipeplan.executor.stash import StashError
from pipeplan.executor.stash_memory import storages_of

if TYPE_CHECKING:
    from pipeplan.executor.stash import StashClient
    from pipeplan.executor.stash_memory import BatchMeter

__all__ = ["LAYERS_ATTR", "LayerMajor", "run_layer_major"]

# A stage module's attribute: node name → the plan layer of the operator (what LAYER_META says in
# the node's meta, which pickling drops), set by pipeplan.executor.lending.apply_loans.
LAYERS_ATTR = "pipeplan_layers"

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


def _call(module: fx.GraphModule, node: fx.Node, value: Callable[[fx.Node], Any]) -> Any:
    args = fx.node.map_arg(node.args, value)
    kwargs = fx.node.map_arg(node.kwargs, value)
    if node.op == "call_function":
        return node.target(*args, **kwargs)  # type: ignore[operator]
    if node.op == "call_method":
        return getattr(args[0], str(node.target))(*args[1:], **kwargs)
    if node.op == "call_module":
        return module.get_submodule(str(node.target))(*args, **kwargs)
    if node.op == "get_attr":
        found: Any = module
        for part in str(node.target).split("."):
            found = getattr(found, part)
        return found
    raise RuntimeError(f"layer-major run: node {node.name} has an unknown op {node.op!r}")


def _blocks(module: fx.GraphModule, steps: list[_Step]) -> list[list[_Step]]:
    """``steps`` cut after each layer's last operator (and the releases right after it), but the
    last layer's: the layer boundaries at which a batch's microbatches take turns (and stash)."""
    names = getattr(module, LAYERS_ATTR, {})
    last: dict[str, int] = {}
    for i, step in enumerate(steps):
        layer = step.node.meta.get(LAYER_META, names.get(step.node.name))
        if not step.shared and isinstance(layer, str):
            last[layer] = i
    # and after every release, so that a block never takes a borrowed layer it has not given back
    releases = [i for i, step in enumerate(steps) if _is_release(module, step.node)]
    cuts = sorted(set(last.values()))[:-1] + releases
    ends = []
    for i in cuts:
        while i + 1 < len(steps) and _is_release(module, steps[i + 1].node):
            i += 1
        ends.append(i)
    final = max((i for i, step in enumerate(steps)
                 if not step.shared and step.node.op not in ("placeholder", "output")), default=len(steps))
    out, begin = [], 0
    for end in sorted({e for e in ends if e < final}):
        if end >= begin:
            out.append(steps[begin:end + 1])
            begin = end + 1
    out.append(steps[begin:])
    return out


def _is_release(module: fx.GraphModule, node: fx.Node) -> bool:
    return node.op == "call_module" and isinstance(module.get_submodule(str(node.target)), Released)


def run_layer_major(module: fx.GraphModule, batch: Sequence[tuple[Any, ...]], steps: list[_Step] | None = None,
                    stash: StashClient | None = None, meter: BatchMeter | None = None) -> list[Any]:
    """``[module(*args) for args in batch]``, computed layer by layer across the batch (see the module).

    Each block (a layer, :func:`_blocks`) runs for every microbatch in turn, in alternating order
    (0…M−1, then M−1…0), so the microbatch that ends one block starts the next.  With ``stash`` the
    others' values leave after each block and come back before the next (the next one's prefetched
    while the current one runs); ``meter`` counts what the batch holds against the device's cap.

    >>> gm = fx.symbolic_trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    >>> xs = [(torch.ones(1, 2),), (torch.zeros(1, 2),)]
    >>> all(torch.equal(a, b) for a, b in zip(run_layer_major(gm, xs), [gm(*x) for x in xs]))
    True
    """
    steps = steps if steps is not None else _steps(module)
    blocks = _blocks(module, steps)
    envs: list[Env] = [{} for _ in batch]
    shared: Env = {}
    outputs: list[Any] = [None] * len(batch)
    slot = {node: i for i, node in enumerate(s.node for s in steps if s.node.op == "placeholder")}
    m = len(batch)
    for b, block in enumerate(blocks):
        order = list(range(m)) if b % 2 == 0 else list(range(m - 1, -1, -1))
        if stash is not None and b and m > 1:
            stash.prefetch(order[1])
        for i, mb in enumerate(order):
            env = envs[mb]
            if stash is not None and b and i:
                stash.restore(mb, env)
                if i + 1 < m:
                    stash.prefetch(order[i + 1])

            def value(node: fx.Node, env: Env = env) -> Any:
                return env[node] if node in env else shared[node]

            for node, is_shared, free in block:
                if node.op == "placeholder":
                    env[node] = batch[mb][slot[node]]
                elif node.op == "output":
                    outputs[mb] = fx.node.map_arg(node.args[0], value)
                elif is_shared:  # fetched once, when the first microbatch needs it; released after the last
                    if i == (m - 1 if _is_release(module, node) else 0):
                        shared[node] = _call(module, node, value)
                else:
                    env[node] = _call(module, node, value)
                for gone in free:
                    env.pop(gone, None)
                    if i == m - 1:
                        shared.pop(gone, None)
                if meter is not None and meter.strict:
                    meter.check(envs, shared, batch, f"running {node.name} of microbatch {mb}")
            if meter is not None and not meter.strict:
                meter.check(envs, shared, batch, f"after a layer of microbatch {mb}")
            if stash is not None and b + 1 < len(blocks) and i + 1 < m:
                stash.put(mb, env, storages_of([*shared.values(), *batch[mb]]))
    return outputs


class LayerMajor(nn.Module):
    """A stage (a :class:`~pipeplan.executor.stage_build.GuardedStage`) that runs its batch layer-major, a
    microbatch per call as ``PipelineStage`` calls it: calls 1 … M − 1 of a batch keep their inputs
    and return empty buffers of ``output_meta``; call M runs the batch and fills them (see the module)."""

    def __init__(self, stage: GuardedStage, microbatches: int, output_meta: Sequence[Boundary],
                 stash: StashClient | None = None, meter: BatchMeter | None = None) -> None:
        super().__init__()
        self.stage = stage
        self.stash = stash
        self.meter = meter
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
            outs = run_layer_major(stage.module, batch, self._steps, self.stash, self.meter)
        except StashError:
            raise  # the transfer's failure, not the forward's: the run blames who failed first
        except Exception as exc:
            raise ForwardError(f"{type(exc).__name__}: {exc}") from exc
        for buffers, out in zip(held, outs, strict=False):
            for buffer, value in zip(buffers, out, strict=True):
                buffer.copy_(value)
        return tuple(t.to(self._out_device).contiguous() for t in outs[-1])
