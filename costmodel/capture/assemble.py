"""A :class:`~pipeplan.costmodel.graph.ModelGraph` from grouped operators: one layer per merged group.

Each layer is named (module path, ``path@k`` for a call kept apart, ``scope:op`` for glue), gets
the summed features of its operators (:mod:`pipeplan.costmodel.capture.features`), and the graph
gets an edge for every tensor one layer hands another, in a topological order that follows the trace.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import networkx as nx
import torch

from pipeplan.costmodel.capture.features import OpStats, module_kind, op_kind, op_label, op_name, tensor_bytes
from pipeplan.costmodel.capture.grouping import Grouping
from pipeplan.costmodel.capture.owners import Owners
from pipeplan.costmodel.graph import Layer, ModelGraph, TensorInfo

__all__ = ["CapturedProgram", "assemble_graph"]


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



def assemble_graph(name: str, granularity: str, owners: Owners, grouping: Grouping, ops: list[torch.fx.Node],
                   graph_nodes: list[torch.fx.Node], placeholder_kind: dict[str, str], stats: dict[str, OpStats],
                   ep: torch.export.ExportedProgram, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CapturedProgram:
    """The layer graph of the merged groups: names, features, edges, inputs and outputs."""
    groups, uf, assign = grouping
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
        op_names = [op_label(n) for n in nodes]
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
            kernels=sum(stats[n.name].kernels for n in nodes),
            input_shapes=[_shape(a) for a in inputs], input_dtypes=[_dtype(a) for a in inputs],
            output_shapes=[_shape(n) for n in outputs], output_dtypes=[_dtype(n) for n in outputs],
            ops=op_names, channels_last=_works_on_channels_last(nodes, stats),
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


def _works_on_channels_last(nodes: list[torch.fx.Node], stats: dict[str, Any]) -> bool:
    """Whether the layer's first operator that does work (not a view) reads a 4-D map laid out
    channels-last and not also contiguous (one channel, or 1×1 maps, are both: nothing tells the layouts
    apart there). That operator's input, not the layer's: glue that turns tokens into a map by a permute
    and a reshape joins the convolution after it, and only the convolution's input is the map."""
    first = next((n for n in nodes if not stats[n.name].is_view), None)
    arg = first.args[0] if first is not None and first.args else None
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return (isinstance(val, torch.Tensor) and val.dim() == 4 and not val.is_contiguous()
            and val.is_contiguous(memory_format=torch.channels_last))


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

