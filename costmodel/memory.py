"""Memory of inference from a graph's liveness: what a device really holds while it runs a stage.

An inference pass does not keep every layer's output: a tensor is alive from the layer that writes
it to the last layer that reads it (in the graph's recorded topological order, which is the order
stages run their layers in).  So a stage holding layers ``S`` needs

    weights(S) + peak_live(S) + (in_flight − 1) · boundary(S) + in_flight · kv_cache(S)

- ``peak_live(S)``: the largest set of tensors alive at once while one microbatch runs through S —
  the tensors received and still to be read, those produced and still to be read or sent, and the
  running layer's outputs and transient workspace;
- ``boundary(S)``: the tensors S receives plus those it sends; each other microbatch in flight
  holds its received inputs or its outputs waiting to be sent (the microbatch being computed is
  already in the peak);
- ``kv_cache(S)``: for a decoder serving a context of C tokens, each attention layer's keys and
  values for C tokens of every sequence of the microbatch, for every microbatch in flight.

A layer's outputs still needed at step ``t`` are bounded by both its output bytes and the bytes of
its edges to consumers at or after ``t`` (an output read only by early consumers is freed early),
unless they are views of one tensor (:func:`shares_storage`: a ``chunk`` or ``split`` ends the
layer), which frees nothing until its last reader has run.

A layer's workspace is what it writes beyond its outputs (or its cost model's ``workspace``) plus
what the CPU kernels of its operators allocate inside them (:func:`kernel_workspace`): the blocked
copies oneDNN makes for a convolution, the indices of a max pooling.

:func:`stage_memory` computes that figure for any set of layers.  The planners need it as a *sum
plus a max* over the layers of a device (what :class:`pipeplan.planner.problem.Problem` and the ILP's
linear constraint take); :func:`planner_terms` gives per-layer terms whose "Σ params + max
workspace" is at least :func:`stage_memory` for every stage that is an interval of the recorded
order (proof in :func:`planner_terms`).

Complexity: O(E log E) for the whole-graph liveness, O(|S| + E(S) log E(S)) per stage.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import NamedTuple

from pipeplan.costmodel.base import LayerMemory
from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.errors import UserError

__all__ = ["KV_SUFFIXES", "Liveness", "LivenessError", "PlannerTerms", "StageMemory", "kernel_workspace",
           "kv_cache_bytes", "liveness", "planner_terms", "shares_storage", "stage_memory"]

# Names of the layers that produce the keys and values a decoder caches (Llama, Mistral, Mixtral,
# Qwen, OPT at leaf granularity).  A capture can name others in meta["kv_bytes_per_token"].
KV_SUFFIXES = (".k_proj", ".v_proj")


class LivenessError(UserError, ValueError):
    """The graph cannot give the memory asked for (no K/V layers for a KV cache, a bad count)."""


class Liveness(NamedTuple):
    """One microbatch through the whole graph, layer by layer in the recorded order."""

    live: list[int]  # bytes alive while layer i runs: its outputs and workspace, all earlier tensors still needed
    cut: list[int]  # bytes alive between layer i and layer i + 1 (what a stage boundary there carries)
    entry: int  # bytes of the model's inputs (the cut before the first layer)

    @property
    def peak(self) -> int:
        return max(self.live, default=0)

    @property
    def max_cut(self) -> int:
        return max([self.entry, *self.cut])


class StageMemory(NamedTuple):
    """Bytes a device needs for one stage, by where they go."""

    params: int  # weights and buffers, once
    peak_live: int  # the largest live set of the microbatch being computed
    boundary: int  # received plus sent bytes of one microbatch (held by each other one in flight)
    kv_cache: int  # keys and values of every microbatch in flight
    in_flight: int

    @property
    def total(self) -> int:
        return self.params + self.peak_live + (self.in_flight - 1) * self.boundary + self.kv_cache


class PlannerTerms(NamedTuple):
    """Per-layer terms for a planner's "Σ params + in_flight · Σ activations + max workspace"."""

    params: list[int]
    activations: list[int]
    workspace: list[int]


_CONVOLUTIONS = frozenset({"aten.conv1d", "aten.conv2d", "aten.conv3d", "aten.convolution", "aten._convolution"})
_MAX_POOLS = frozenset({"aten.max_pool1d", "aten.max_pool2d", "aten.max_pool3d"})
_VIEW_SPLITS = frozenset({"aten.chunk", "aten.split", "aten.split_with_sizes", "aten.unbind", "aten.tensor_split"})
_INDEX_BYTES = 8  # int64
_MKLDNN_MIN_BATCH = 16  # PyTorch runs a 1×1, stride-1 convolution of a smaller batch on one thread natively


def _numel(shape: Sequence[int]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


def kernel_workspace(layer: Layer) -> int:
    """Bytes the CPU kernels of ``layer``'s operators allocate beyond its outputs while it runs
    (a block: the most of its parts).  Derived from the layer's shapes; measured against RSS with
    ``tests/memory_probe.py`` (benchmarks/README.md, "llm_scale.py").

    - **Convolution**: ``max(input, output)`` bytes.  PyTorch hands a float convolution to oneDNN
      (``ConvParams::use_mkldnn``, aten/src/ATen/native/Convolution.cpp), which computes in a blocked
      layout (nChw8c/nChw16c) and reorders the plain input into it or its result out of it
      (oneDNN, "Understanding Memory Formats"); measured alone, one such copy of the larger tensor
      is alive at the peak.  Not for a 1×1, stride-1 kernel on a batch under 16, which PyTorch
      runs natively on one thread without a copy (the kernel's area read from the weights:
      ``param_bytes ≈ C_out · C_in · area · itemsize``).
    - **Max pooling**: the int64 indices, ``numel(output) · 8`` bytes: ``max_pool2d`` on CPU calls
      ``max_pool2d_with_indices`` and drops them (aten/src/ATen/native/Pooling.cpp).

    >>> conv = Layer("c", "conv", "Conv2d", 0, 0, 0, 0, 64 * 32 * 9 * 4, 64 * 64 * 32 * 32 * 4, 1,
    ...              input_shapes=[[64, 32, 32, 32]], output_shapes=[[64, 64, 32, 32]], ops=["aten.conv2d"])
    >>> kernel_workspace(conv) == 64 * 64 * 32 * 32 * 4
    True
    """
    if layer.parts:
        return max((kernel_workspace(part) for part in layer.parts), default=0)
    if not layer.output_shapes or not layer.input_shapes or not layer.input_shapes[0]:
        return 0
    out_items = _numel(layer.output_shapes[0])
    itemsize = layer.activation_bytes // out_items if out_items else 0
    work = 0
    if _MAX_POOLS.intersection(layer.ops):
        work = max(work, out_items * _INDEX_BYTES)
    if _CONVOLUTIONS.intersection(layer.ops) and itemsize:
        x, y = layer.input_shapes[0], layer.output_shapes[0]
        area = layer.param_bytes // itemsize // max(1, y[1] * x[1]) if len(x) > 2 and len(y) > 2 else 0
        native = area == 1 and x[2:] == y[2:] and x[0] < _MKLDNN_MIN_BATCH
        if not native:
            work = max(work, itemsize * max(_numel(x), out_items))
    return work


def shares_storage(layer: Layer) -> bool:
    """Whether ``layer``'s outputs are views of one tensor (its last operator a ``chunk`` or
    ``split``), so that none is freed before the last reader of any has run: the two halves of a
    mixture of experts' gate-and-up projection (``_grouped_mm`` then ``chunk``)."""
    ops = [op for op in layer.ops if op != "getitem"]
    return bool(ops) and ops[-1] in _VIEW_SPLITS


def _whole(reads: list[tuple[int, int]], cap: int) -> list[tuple[int, int]]:
    """``reads`` of a layer whose outputs share one storage: all of it held until the last read."""
    return [(max(p for p, _ in reads), max(cap, sum(b for _, b in reads)))] if reads else reads


def _tables(graph: ModelGraph, mem: Sequence[LayerMemory] | None) -> tuple[list[Layer], list[int], list[int]]:
    layers = graph.layers
    if mem is None:
        out = [layer.activation_bytes for layer in layers]
        work = [max(0, layer.bytes_written - layer.activation_bytes) for layer in layers]
    else:
        if len(mem) != len(layers):
            raise LivenessError(f"{len(mem)} layer memories for the {len(layers)} layers of {graph.model}")
        out, work = [m.activations for m in mem], [m.workspace for m in mem]
    return layers, out, [w + kernel_workspace(layer) for w, layer in zip(work, layers, strict=True)]


def _model_io(graph: ModelGraph) -> tuple[dict[str, int], dict[str, list[tuple[str, int]]]]:
    """Bytes each layer hands to the model's output, and (consumer, bytes) of each model input."""
    sink: dict[str, int] = defaultdict(int)
    for t in graph.outputs:
        for name in t.layers:
            sink[name] += t.bytes
    feeds: dict[str, list[tuple[str, int]]] = {t.name: [(c, t.bytes) for c in t.layers] for t in graph.inputs}
    return sink, feeds


def _add_held(diff: list[int], start: int, end: int, cap: int, reads: list[tuple[int, int]], tail: int) -> None:
    """Add to ``diff`` (a difference array over steps) a tensor set of ``cap`` bytes alive over
    steps ``start … end`` whose part still needed at step t is min(cap, Σ bytes of reads at ≥ t + tail)."""
    reads = sorted(reads)
    remaining = sum(b for _, b in reads) + tail
    step = start
    for pos, nbytes in reads:
        if pos >= step:
            held = min(cap, remaining)
            diff[step] += held
            diff[pos + 1] -= held
            step = pos + 1
        remaining -= nbytes
    if tail and step <= end:
        held = min(cap, tail)
        diff[step] += held
        diff[end + 1] -= held


def liveness(graph: ModelGraph, mem: Sequence[LayerMemory] | None = None) -> Liveness:
    """Bytes alive at each step of one microbatch through ``graph`` (see the module docstring).

    ``mem`` gives each layer's output and workspace bytes (a cost model's ``layer_memory``); by
    default the captured ``activation_bytes`` and the bytes written beyond them.

    >>> from pipeplan.costmodel.graph import Layer
    >>> g = ModelGraph("chain", batch_size=1)
    >>> for i, name in enumerate("abc"):
    ...     g.add_layer(Layer(name, "linear", "Linear", i, 0, 0, 10, 0, 10, 1))
    >>> g.add_edge("a", "b", 10); g.add_edge("b", "c", 10); g.add_edge("a", "c", 10)
    >>> liveness(g).live, liveness(g).cut
    ([10, 20, 30], [10, 20, 0])
    """
    layers, out, work = _tables(graph, mem)
    n = len(layers)
    pos = {layer.name: i for i, layer in enumerate(layers)}
    sink, feeds = _model_io(graph)
    live_diff, cut_diff = [0] * (n + 2), [0] * (n + 2)
    for i, layer in enumerate(layers):
        reads = [(pos[s], graph.edge_bytes(layer.name, s)) for s in graph.successors(layer.name)]
        if shares_storage(layer):
            reads = _whole(reads, out[i])
        tail = sink.get(layer.name, 0)
        live_diff[i] += out[i] + work[i]  # while it runs, all its outputs are being written
        live_diff[i + 1] -= out[i] + work[i]
        _add_held(live_diff, i + 1, n - 1, out[i], reads, tail)
        # The cut after step j holds what is read at steps > j: the same profile shifted by one.
        _add_held(cut_diff, i, n - 1, out[i], [(p - 1, b) for p, b in reads], tail)
    entry = 0
    for uses in feeds.values():
        reads = [(pos[c], b) for c, b in uses if c in pos]
        cap = max((b for _, b in uses), default=0)
        entry += cap
        _add_held(live_diff, 0, n - 1, cap, reads, 0)
        _add_held(cut_diff, 0, n - 1, cap, [(p - 1, b) for p, b in reads if p >= 1], 0)
    live, cut, acc_l, acc_c = [], [], 0, 0
    for i in range(n):
        acc_l += live_diff[i]
        acc_c += cut_diff[i]
        live.append(acc_l)
        cut.append(acc_c)
    return Liveness(live, cut, entry)


def kv_cache_bytes(graph: ModelGraph, context: int) -> dict[str, int]:
    """Bytes of keys and values each layer caches for ``context`` tokens of every sequence of the
    graph's batch: ``meta["kv_bytes_per_token"]`` (layer → bytes per token per sequence, what
    :func:`pipeplan.costmodel.zoo.capture_model` records at any granularity), else the leaf layers named
    ``*.k_proj`` / ``*.v_proj``, each caching one output row (of its weight's width) per token.
    """
    if context < 1:
        raise LivenessError(f"a KV cache context must be at least 1 token, got {context}")
    per_token: dict[str, int] = {k: int(v) for k, v in (graph.meta.get("kv_bytes_per_token") or {}).items()}
    if not per_token:
        for layer in graph.layers:
            if layer.name.endswith(KV_SUFFIXES) and layer.input_shapes and layer.input_shapes[0]:
                per_token[layer.name] = _row_bytes(layer.param_bytes, layer.input_shapes[0][-1])
    if not per_token:
        raise LivenessError(f"a KV cache needs the key and value layers of {graph.model}: none of its layers "
                           f"({graph.granularity} granularity) is named {' or '.join('*' + s for s in KV_SUFFIXES)} "
                           "and meta has no kv_bytes_per_token; capture a decoder at leaf granularity, or with "
                           "pipeplan.costmodel.zoo.capture_model(..., kv_context=N)")
    missing = sorted(set(per_token) - {layer.name for layer in graph.layers})
    if missing:
        raise LivenessError(f"meta['kv_bytes_per_token'] names layers {missing[:3]} that {graph.model} lacks")
    return {name: graph.batch_size * context * b for name, b in per_token.items()}


def _row_bytes(param_bytes: int, in_features: int) -> int:
    """Bytes of one output row of a Linear from its weight (and bias) bytes: ``out · itemsize``.

    Its outputs cannot say it: a grouped-query V projection's output is captured after the heads are
    repeated.  With a bias the weights are ``out · (in + 1)`` items, without ``out · in``.
    """
    if in_features <= 0:
        return 0
    return param_bytes // (in_features + 1) if param_bytes % (in_features + 1) == 0 else param_bytes // in_features


def stage_memory(graph: ModelGraph, layers: Collection[str], *, in_flight: int = 1,
                 kv_context: int | None = None, mem: Sequence[LayerMemory] | None = None) -> StageMemory:
    """Bytes a device needs to run ``layers`` of ``graph`` with ``in_flight`` microbatches.

    Exact under the module's model for any set of layers, run in the recorded order; a stage sends
    its outputs when it ends.  Weights shared by two layers are counted once only for the whole
    graph (a layer graph does not say which weights are shared).
    """
    if in_flight < 1:
        raise LivenessError(f"in_flight must be at least 1, got {in_flight}")
    all_layers, out, work = _tables(graph, mem)
    chosen = set(layers)
    unknown = chosen - {layer.name for layer in all_layers}
    if unknown:
        raise LivenessError(f"layers {sorted(unknown)[:3]} are not in {graph.model}")
    index = {layer.name: i for i, layer in enumerate(all_layers)}
    steps = [layer for layer in all_layers if layer.name in chosen]
    if not steps:
        return StageMemory(0, 0, 0, 0, in_flight)
    pos = {layer.name: i for i, layer in enumerate(steps)}
    end = len(steps) - 1
    sink, feeds = _model_io(graph)
    diff = [0] * (len(steps) + 2)
    received = sent = 0
    incoming: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, layer in enumerate(steps):
        k = index[layer.name]
        diff[i] += out[k] + work[k]
        diff[i + 1] -= out[k] + work[k]
        inside, outside = [], sink.get(layer.name, 0)
        for s in graph.successors(layer.name):
            if s in pos:
                inside.append((pos[s], graph.edge_bytes(layer.name, s)))
            else:
                outside += graph.edge_bytes(layer.name, s)
        sent += min(out[k], outside)
        if shares_storage(layer):
            inside = _whole(inside, out[k])
        _add_held(diff, i + 1, end, out[k], inside, outside)
        for p in graph.predecessors(layer.name):
            if p not in chosen:
                incoming[p].append((i, graph.edge_bytes(p, layer.name)))
    for p, reads in incoming.items():
        cap = out[index[p]]
        received += min(cap, sum(b for _, b in reads))
        _add_held(diff, 0, end, cap, reads, 0)
    for uses in feeds.values():
        reads = [(pos[c], b) for c, b in uses if c in pos]
        if reads:
            cap = max(b for _, b in reads)
            received += cap
            _add_held(diff, 0, end, cap, reads, 0)
    peak, acc = 0, 0
    for i in range(len(steps)):
        acc += diff[i]
        peak = max(peak, acc)
    params = sum(layer.param_bytes for layer in steps)
    if len(steps) == len(all_layers):
        params = graph.total_param_bytes
    kv = sum(kv_cache_bytes(graph, kv_context).get(name, 0) for name in chosen) if kv_context else 0
    return StageMemory(params, peak, received + sent, in_flight * kv, in_flight)


def planner_terms(graph: ModelGraph, mem: Sequence[LayerMemory], in_flight: int,
                  kv_context: int | None = None) -> PlannerTerms:
    """Per-layer terms whose "Σ params + max workspace" over a stage bounds :func:`stage_memory`.

    ``params[v]`` = weights + ``in_flight`` KV caches (exact: both add up over layers);
    ``activations[v]`` = 0 (no output is kept per microbatch beyond what the max covers);
    ``workspace[v]`` = ``live[v] + 2 · (in_flight − 1) · max_cut``.

    Why the max bounds the rest, for a stage S = layers a … b of the recorded order: at each step of
    S, every tensor S holds is also alive at that step of the whole graph (S's outputs are read after
    b, its inputs were written before a), so peak_live(S) ≤ max over S of ``live``; what S receives
    is part of the cut before a and what it sends part of the cut after b, so boundary(S) ≤
    2 · max_cut.  A stage that is not an interval may hold more; :func:`stage_memory` is exact for it.
    """
    if in_flight < 1:
        raise LivenessError(f"in_flight must be at least 1, got {in_flight}")
    layers = graph.layers
    flow = liveness(graph, mem)
    kv = kv_cache_bytes(graph, kv_context) if kv_context else {}
    params = [m.params + in_flight * kv.get(layer.name, 0) for layer, m in zip(layers, mem, strict=True)]
    extra = 2 * (in_flight - 1) * flow.max_cut
    return PlannerTerms(params, [0] * len(layers), [live + extra for live in flow.live])
