"""Capture an ``nn.Module`` as a layer DAG with ``torch.export``.

``torch.export`` traces the model into a graph of aten operators, each tagged with the stack of
modules that called it.  :func:`capture` groups those operators into layers:

``leaf`` (default)
    one layer per leaf module call (``Linear``, ``Conv2d``, ``LayerNorm`` …);
``block``
    one layer per repeated block (a transformer block, a ResNet bottleneck): the outermost class
    of non-leaf modules repeated inside ``ModuleList``/``Sequential`` containers with at least
    8 instances, else the most repeated one; operators outside every block fall back to ``leaf``;
``depth:N``
    one layer per module at depth N of the module tree (``blocks.3`` is depth 2).

Operators that no module owns at that granularity (residual adds, reshapes, attention glue written
in a ``forward``) are kept, never dropped, so the graph's total FLOPs equal the model's:

1. consecutive functional operators of one module scope whose inputs all come from the same
   functional layer join it (``q.view(...).transpose(...)`` → one layer);
2. a functional layer with zero FLOPs and a single producer is attached to its producer
   (a ``flatten`` after pooling), and one with no producer and a single consumer (``arange`` for
   position ids) to its consumer.  Both merges provably keep the graph acyclic;
3. everything else becomes a layer of its own, named ``scope:op`` (``blocks.0:add_1``).

A module called several times is one layer when its calls are independent (an embedding used for
tokens and positions) and one layer per call (``enc@1``) when merging would create a cycle.

Complexity: linear in the number of exported operators, plus one acyclicity check per module
that is called more than once.
"""

from __future__ import annotations

import logging
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch
from torch import nn
from torch.export.graph_signature import InputKind

from pipeplan.costmodel.capture.features import OpStats, module_kind, op_kind, op_name, op_stats, tensor_bytes
from pipeplan.costmodel.capture.ops import report_uncounted
from pipeplan.costmodel.capture.owners import Owners
from pipeplan.costmodel.graph import Layer, ModelGraph, TensorInfo
from pipeplan.errors import UserError

__all__ = ["CaptureError", "CapturedProgram", "capture", "capture_program", "parse_granularity"]

log = logging.getLogger(__name__)

class CaptureError(UserError, ValueError):
    """The model could not be exported, or the capture options are wrong."""


def parse_granularity(text: str) -> tuple[str, int | None]:
    """``"leaf"`` → ("leaf", None); ``"depth:2"`` → ("depth", 2); anything else is refused."""
    text = text.strip().lower()
    if text in ("leaf", "block"):
        return text, None
    m = re.fullmatch(r"depth[:=](\d+)", text)
    if m and int(m.group(1)) >= 1:
        return "depth", int(m.group(1))
    raise CaptureError(f"unknown granularity {text!r}: use 'leaf', 'block' or 'depth:N' with N >= 1")


@dataclass
class _Group:
    gid: int
    functional: bool
    path: str  # module path for module groups, scope for functional ones
    call: int  # which call of the module (0 for the first)
    ops: list[torch.fx.Node] = field(default_factory=list)


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while x != root:
            self.parent[x], x = root, self.parent.get(x, x)
        return root

    def union(self, into: int, other: int) -> None:
        self.parent[self.find(other)] = self.find(into)


def _export(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.export.ExportedProgram:
    try:
        with torch.no_grad():
            return torch.export.export(model, args, kwargs=kwargs, strict=False)
    except Exception as exc:  # torch raises many types; the user needs the model name and the cause
        raise CaptureError(f"torch.export could not trace {type(model).__name__}: {exc}") from exc


def capture(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    granularity: str = "leaf",
    name: str | None = None,
) -> ModelGraph:
    """Capture ``model`` called on ``args``/``kwargs`` as a :class:`ModelGraph`.

    >>> g = capture(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), (torch.randn(2, 4),))
    >>> [layer.name for layer in g.layers], g.total_flops
    (['0', '1'], 128)
    """
    return capture_program(model, args, kwargs, granularity=granularity, name=name).graph


@dataclass(frozen=True)
class CapturedProgram:
    """A capture together with the exported program it was built from.

    ``node_layers`` maps the name of every operator node of ``program.graph`` that belongs to a
    layer to that layer's name; the runtime assertions export inserts belong to none.  The
    executor cuts ``program`` into pipeline stages with it.
    """

    graph: ModelGraph
    program: torch.export.ExportedProgram
    node_layers: dict[str, str]


def capture_program(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    granularity: str = "leaf",
    name: str | None = None,
) -> CapturedProgram:
    """Like :func:`capture`, and also return the exported program and which layer owns each node.

    >>> cp = capture_program(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), (torch.randn(2, 4),))
    >>> sorted(set(cp.node_layers.values()))
    ['0', '1']
    """
    kwargs = kwargs or {}
    owners = Owners(model, *parse_granularity(granularity))
    model.eval()
    ep = _export(model, args, kwargs)
    try:
        stats = op_stats(ep, args, kwargs)
    except Exception as exc:  # an operator the FLOP counter cannot run; say which and why
        raise CaptureError(f"counting the FLOPs of {type(model).__name__}'s exported graph failed: {exc}. "
                           "If the failing operator is a custom one, give it a fake (meta) kernel with "
                           "torch.library.register_fake") from exc
    graph_nodes = list(ep.graph.nodes)

    # -- placeholders: parameters, buffers and constants versus the model's inputs ----------
    placeholder_kind = {}
    placeholders = [n for n in graph_nodes if n.op == "placeholder"]
    for spec, n in zip(ep.graph_signature.input_specs, placeholders, strict=True):
        placeholder_kind[n.name] = "input" if spec.kind == InputKind.USER_INPUT else "param"

    ops, dead = _live([n for n in graph_nodes if n.op == "call_function" and _is_real(n, stats[n.name])],
                      next(n for n in graph_nodes if n.op == "output"))
    name = name or type(model).__name__
    captured = _layers(model, name, granularity, owners, ops, graph_nodes, placeholder_kind, stats, ep, args, kwargs)
    graph = captured.graph
    if granularity != "leaf":
        leaf = _layers(model, name, "leaf", Owners(model, "leaf", None), ops, graph_nodes, placeholder_kind, stats,
                       ep, args, kwargs)
        _attach_parts(captured, leaf)
    if dead:
        scopes = list(dict.fromkeys(_dead_name(owners, n) for n in dead))
        graph.meta["dropped_dead"] = scopes
        log.info("%s: dropped %d operator(s) whose results nothing uses, in %s",
                 graph.model, len(dead), ", ".join(scopes))
    uncounted = report_uncounted(graph.model, ((captured.node_layers[n.name], stats[n.name].uncounted)
                                              for n in ops if stats[n.name].uncounted))
    if uncounted:
        graph.meta["uncounted_ops"] = uncounted
    return captured


def _attach_parts(merged: CapturedProgram, leaf: CapturedProgram) -> None:
    """Give each layer of a coarser capture the leaf layers it is made of (``Layer.parts``).

    A block's own features (all its FLOPs and bytes in one row) describe no layer a cost model was
    fitted on; its leaf layers do. A leaf layer belongs to the layer that owns its first operator
    (leaf glue merged across two blocks is rare and small). A layer that is one leaf layer gets none.
    """
    owner: dict[str, str] = {}
    for node, leaf_name in leaf.node_layers.items():
        owner.setdefault(leaf_name, merged.node_layers[node])
    parts: dict[str, list[Layer]] = defaultdict(list)
    for layer in leaf.graph.layers:  # in the leaf graph's topological order
        parts[owner[layer.name]].append(layer)
    for layer in merged.graph.layers:
        own = parts.get(layer.name, [])
        if len(own) > 1:
            layer.parts = own


def _layers(model: nn.Module, name: str, granularity: str, owners: Owners, ops: list[torch.fx.Node],
            graph_nodes: list[torch.fx.Node], placeholder_kind: dict[str, str], stats: dict[str, OpStats],
            ep: torch.export.ExportedProgram, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CapturedProgram:
    """Group the live operators ``ops`` into layers as ``owners`` decides, and build the graph."""
    # -- assign every operator to a group ---------------------------------------------------
    groups: list[_Group] = []
    module_groups: dict[tuple[str, int], _Group] = {}
    assign: dict[str, int] = {}
    for n in ops:
        functional, path, call = owners.owner(n)
        if not functional:
            group = module_groups.get((path, call))
            if group is None:
                group = module_groups[(path, call)] = _Group(len(groups), False, path, call)
                groups.append(group)
        else:
            producers = {assign[a.name] for a in n.all_input_nodes if a.name in assign}
            single = groups[producers.pop()] if len(producers) == 1 else None
            if single is not None and single.functional and single.path == path:
                group = single
            else:
                group = _Group(len(groups), True, path, 0)
                groups.append(group)
        group.ops.append(n)
        assign[n.name] = group.gid

    uf = _UnionFind()
    raw_edges = {(assign[a.name], assign[n.name]) for n in ops for a in n.all_input_nodes
                 if a.name in assign and assign[a.name] != assign[n.name]}

    def quotient() -> nx.DiGraph:
        q = nx.DiGraph()
        q.add_nodes_from({uf.find(g.gid) for g in groups})
        q.add_edges_from((uf.find(u), uf.find(v)) for u, v in raw_edges if uf.find(u) != uf.find(v))
        return q

    # -- a module called more than once: one layer, unless that would make a cycle ----------
    calls: dict[str, list[_Group]] = defaultdict(list)
    for g in groups:
        if not g.functional:
            calls[g.path].append(g)
    for gs in calls.values():
        for g in gs[1:]:
            saved = dict(uf.parent)
            uf.union(gs[0].gid, g.gid)
            if not nx.is_directed_acyclic_graph(quotient()):
                uf.parent = saved

    # -- glue computed from the inputs alone (masks, position ids) becomes one layer per
    # connected piece.  Such a set is closed under ancestors, so contracting it keeps a DAG.
    q = quotient()
    flops = {g.gid: sum(stats[n.name].flops for n in g.ops) for g in groups}
    glue = {g.gid for g in groups if g.functional and flops[g.gid] == 0}
    pure = {gid for gid in nx.topological_sort(q)
            if gid in glue and all(p in glue for p in q.predecessors(gid))}
    pure = {gid for gid in pure if nx.ancestors(q, gid) <= pure}
    for piece in nx.weakly_connected_components(q.subgraph(pure)):
        first, *rest = sorted(piece)
        for gid in rest:
            uf.union(first, gid)

    # -- attach zero-FLOP functional glue to its only producer or only consumer -------------
    q = quotient()
    for g in groups:
        if not g.functional or uf.find(g.gid) != g.gid or flops[g.gid] > 0:
            continue
        preds, succs = list(q.predecessors(g.gid)), list(q.successors(g.gid))
        target = preds[0] if len(preds) == 1 else succs[0] if not preds and len(succs) == 1 else None
        if target is None:
            continue
        uf.union(target, g.gid)
        q = nx.contracted_nodes(q, target, g.gid, self_loops=False, copy=False)

    return _build(model, name, granularity, owners, groups, uf, ops, graph_nodes, placeholder_kind, stats, assign,
                  ep, args, kwargs)


def _dead_name(owners: Owners, n: torch.fx.Node) -> str:
    """What a dropped operator would have been called: its module, or ``scope:op`` for glue."""
    functional, path, _ = owners.owner(n)
    return (f"{path}:{n.name}" if path else n.name) if functional else path


def _live(ops: list[torch.fx.Node], output: torch.fx.Node) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
    """Split ``ops`` into (live, dead): live operators reach the model's output or have a side
    effect (an in-place write such as ``index_put_`` into a tensor used later), or feed one that
    does.  Export keeps a module whose result is unused; it costs time but is not the model's work.
    """
    impure = [n for n in ops if n.is_impure()]
    live: set[torch.fx.Node] = set()
    stack = [*output.all_input_nodes, *impure]
    while stack:
        n = stack.pop()
        if n not in live:
            live.add(n)
            stack.extend(n.all_input_nodes)
    return [n for n in ops if n in live], [n for n in ops if n not in live]


def _is_real(n: torch.fx.Node, stats: OpStats) -> bool:
    """Skip the runtime assertions export inserts: they compute nothing and produce no tensor."""
    return stats.flops > 0 or tensor_bytes(n.meta.get("val")) > 0 or bool(n.users)


def _build(model: nn.Module, name: str, granularity: str, owners: Owners, groups: list[_Group],
           uf: _UnionFind, ops: list[torch.fx.Node], graph_nodes: list[torch.fx.Node],
           placeholder_kind: dict[str, str], stats: dict[str, OpStats], assign: dict[str, int],
           ep: torch.export.ExportedProgram, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CapturedProgram:
    position = {n: i for i, n in enumerate(graph_nodes)}
    by_name = {n.name: n for n in graph_nodes}
    members: dict[int, list[torch.fx.Node]] = defaultdict(list)
    for n in ops:
        members[uf.find(assign[n.name])].append(n)
    root_of = {n.name: uf.find(assign[n.name]) for n in ops}
    leaders = {uf.find(g.gid): g for g in groups if uf.find(g.gid) == g.gid}

    # Names: module path, "path@k" for a call kept apart, "scope:op" for functional layers.
    names: dict[int, str] = {}
    used: set[str] = set()
    for gid in sorted(members, key=lambda r: min(position[n] for n in members[r])):
        g = leaders[gid]
        if g.functional:
            base = f"{g.path}:{members[gid][0].name}" if g.path else members[gid][0].name
        else:
            base = g.path or name
            if base in used:
                base = f"{g.path}@{g.call}"
        unique, k = base, 1
        while unique in used:
            k += 1
            unique = f"{base}#{k}"
        used.add(unique)
        names[gid] = unique

    output_node = next(n for n in graph_nodes if n.op == "output")
    graph_outputs = [a for a in torch.utils._pytree.tree_leaves(output_node.args) if isinstance(a, torch.fx.Node)]
    consumers: dict[str, set[int]] = defaultdict(set)
    for n in ops:
        for a in n.all_input_nodes:
            consumers[a.name].add(root_of[n.name])

    graph = ModelGraph(name, batch_size=_batch_size(args, kwargs), granularity=granularity,
                       total_param_bytes=_distinct_bytes({**ep.state_dict, **ep.constants}.values()),
                       meta={"torch": torch.__version__})
    layers: dict[int, Layer] = {}
    for gid, nodes in members.items():
        g = leaders[gid]
        inputs = _unique(a for n in nodes for a in n.all_input_nodes
                         if placeholder_kind.get(a.name) == "input" or (a.name in root_of and root_of[a.name] != gid))
        params = _unique(a for n in nodes for a in n.all_input_nodes if placeholder_kind.get(a.name) == "param")
        outputs = [n for n in nodes if (consumers[n.name] - {gid}) or n in graph_outputs]
        op_names = [op_name(n.target) for n in nodes]
        kind = module_kind(owners.class_name(g.path), owners.is_leaf(g.path)) if not g.functional else None
        if kind is None:
            heaviest = max(nodes, key=lambda n: (stats[n.name].flops, stats[n.name].bytes_written))
            kind = op_kind(op_name(heaviest.target), stats[heaviest.name].is_view)
        layers[gid] = Layer(
            name=names[gid], kind=kind,
            module_type="functional" if g.functional else owners.class_name(g.path),
            order=0,
            flops=sum(stats[n.name].flops for n in nodes),
            bytes_read=sum(stats[n.name].bytes_read for n in nodes),
            bytes_written=sum(stats[n.name].bytes_written for n in nodes),
            param_bytes=sum(tensor_bytes(p.meta.get("val")) for p in params),
            activation_bytes=sum(tensor_bytes(n.meta.get("val")) for n in outputs),
            kernels=sum(1 for n in nodes if not stats[n.name].is_view),
            input_shapes=[_shape(a) for a in inputs], input_dtypes=[_dtype(a) for a in inputs],
            output_shapes=[_shape(n) for n in outputs], output_dtypes=[_dtype(n) for n in outputs],
            ops=op_names,
        )

    # A topological order that follows the trace where the DAG leaves a choice.
    dag = nx.DiGraph()
    dag.add_nodes_from(members)
    edge_bytes: dict[tuple[int, int], int] = defaultdict(int)
    for a_name in {a.name for n in ops for a in n.all_input_nodes if a.name in root_of}:
        src = root_of[a_name]
        node = by_name[a_name]
        for dst in consumers[a_name] - {src}:
            edge_bytes[(src, dst)] += tensor_bytes(node.meta.get("val"))
            dag.add_edge(src, dst)
    first = {gid: min(position[n] for n in nodes) for gid, nodes in members.items()}
    for i, gid in enumerate(nx.lexicographical_topological_sort(dag, key=lambda g: first[g])):
        layers[gid].order = i
        graph.add_layer(layers[gid])
    for (src, dst), nbytes in edge_bytes.items():
        graph.add_edge(names[src], names[dst], nbytes)

    user_inputs = [n for n in graph_nodes if placeholder_kind.get(n.name) == "input"]
    graph.inputs = [TensorInfo(n.name, _shape(n), _dtype(n), tensor_bytes(n.meta.get("val")),
                               sorted({names[root_of[u.name]] for u in n.users if u.name in root_of}))
                    for n in user_inputs]
    graph.outputs = [TensorInfo(n.name, _shape(n), _dtype(n), tensor_bytes(n.meta.get("val")),
                                [names[root_of[n.name]]] if n.name in root_of else [])
                     for n in graph_outputs]
    graph.validate()
    return CapturedProgram(graph, ep, {n.name: names[root_of[n.name]] for n in ops})


def _distinct_bytes(tensors: Any) -> int:
    """Bytes of distinct storages: tied weights (GPT-2's wte and lm_head) count once."""
    seen: dict[tuple[int, int], int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            # Meta tensors (models too large to build, pipeplan.costmodel.zoo.llm) all have data_ptr 0: tell
            # their storages apart by the storage object itself, which tied weights share.
            storage = t.untyped_storage()
            where = storage._cdata if t.is_meta else storage.data_ptr()
            key = (where, int(t.storage_offset())) if t.numel() else (id(t), 0)
            seen[key] = tensor_bytes(t)
    return sum(seen.values())


def _unique(nodes: Any) -> list[torch.fx.Node]:
    return list(dict.fromkeys(nodes))


def _shape(n: torch.fx.Node) -> list[int]:
    val = n.meta.get("val")
    if isinstance(val, torch.Tensor):
        return [int(d) for d in val.shape]
    return []


def _dtype(n: torch.fx.Node) -> str:
    val = n.meta.get("val")
    if isinstance(val, torch.Tensor):
        return str(val.dtype).removeprefix("torch.")
    if isinstance(val, (tuple, list)) and val and isinstance(val[0], torch.Tensor):
        return str(val[0].dtype).removeprefix("torch.")
    return type(val).__name__


def _batch_size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    for leaf in torch.utils._pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return int(leaf.shape[0])
    return 1


class _CallableModule(type(sys.modules[__name__])):  # type: ignore[misc]
    """``from costmodel import capture`` must give the function, yet importing this submodule binds
    ``pipeplan.costmodel.capture`` to the module (import order decides which one a user gets): the module
    is made callable as the function, so both spellings work in any order."""

    def __call__(self, *args: Any, **kwargs: Any) -> ModelGraph:
        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
