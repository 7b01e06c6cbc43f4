"""Which exported operators form one layer: the grouping rules of :mod:`pipeplan.costmodel.capture`.

Every live operator first joins a group (its module's call, or a run of functional glue of one
scope; a leaf module running two or more matmuls or convolutions is split as glue is, each of them
starting a group), then groups merge through a union-find while each merge keeps the quotient graph acyclic:
a module's repeated calls, glue computed from the inputs alone, zero-FLOP glue with one producer
or one consumer.  An operator that cuts or folds patches (``aten.im2col``/``col2im``) or resizes
(``aten.upsample_*``: ``F.interpolate``) starts a group of its own (it and the views after it) that
never merges, and no glue joins it nor a module's group that starts with one (``nn.Unfold``,
``nn.Upsample``): each runs at a few GB/s (overlapping patches copy the input many times over; a
bilinear resize gathers four pixels per output), and a cost model prices it as a layer of its own,
from the tensor it unfolds or resizes.  A write in place (``copy_`` into a slice, ``mul_``,
``index_put_``: export keeps them) shares a layer with each reader of the same tensor that data edges alone would
let a cut reorder against it (:mod:`pipeplan.costmodel.capture.inplace`).
:mod:`pipeplan.costmodel.capture.assemble` turns the result into layers.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

import networkx as nx
import torch

from pipeplan.costmodel.capture.features import APART_OPS, OpStats, op_kind, op_name
from pipeplan.costmodel.capture.inplace import kept_together
from pipeplan.costmodel.capture.owners import Owners
from pipeplan.costmodel.capture.union_find import UnionFind

__all__ = ["Group", "Grouping", "UnionFind", "group_operators"]


@dataclass
class Group:
    """Operators that become one layer, unless the union-find below merges the group into another."""

    gid: int
    functional: bool
    path: str  # module path for module groups, scope for functional ones
    call: int  # which call of the module (0 for the first)
    ops: list[torch.fx.Node] = field(default_factory=list)


class Grouping(NamedTuple):
    """What :func:`group_operators` decided."""

    groups: list[Group]
    union: UnionFind[int]  # group id → the group it was merged into (a layer is one root)
    assign: dict[str, int]  # operator node name → its group id, before merging


def group_operators(ops: list[torch.fx.Node], owners: Owners, stats: dict[str, OpStats]) -> Grouping:
    """Group the live operators ``ops`` as ``owners`` decides, then merge groups where the rules allow."""
    # -- assign every operator to a group ---------------------------------------------------
    groups: list[Group] = []
    module_groups: dict[tuple[str, int], Group] = {}
    assign: dict[str, int] = {}
    owner = {n.name: owners.owner(n) for n in ops}
    heavy = {n.name for n in ops if stats[n.name].flops > 0 and op_kind(op_name(n.target)) in _HEAVY_KINDS}
    split = _calls_to_split(ops, owner, owners, heavy)
    holding_heavy: set[int] = set()  # groups of a split call that hold one of its matmuls: the next starts anew
    for n in ops:
        functional, path, call = owner[n.name]
        starts_anew = False
        if not functional and (path, call) in split:
            functional, call, starts_anew = True, 0, n.name in heavy
        if not functional:
            group = module_groups.get((path, call))
            if group is None:
                group = module_groups[(path, call)] = Group(len(groups), False, path, call)
                groups.append(group)
        else:
            producers = {assign[a.name] for a in n.all_input_nodes if a.name in assign}
            single = groups[producers.pop()] if len(producers) == 1 else None
            # an unfold or resize starts a group of its own, which takes only the views after it
            if (single is not None and single.functional and single.path == path
                    and op_name(n.target) not in APART_OPS and not (starts_anew and single.gid in holding_heavy)
                    and (stats[n.name].is_view or not _kept_apart(single))):
                group = single
            else:
                group = Group(len(groups), True, path, 0)
                groups.append(group)
        group.ops.append(n)
        assign[n.name] = group.gid
        if starts_anew:
            holding_heavy.add(group.gid)

    # The groups an unfold, fold or resize starts (it and the views after it), and the modules' groups
    # that start with one (nn.Unfold, nn.Fold, nn.Upsample): glue joins none of them.
    apart = {g.gid for g in groups if _kept_apart(g)}
    uf: UnionFind[int] = UnionFind()
    raw_edges = {(assign[a.name], assign[n.name]) for n in ops for a in n.all_input_nodes
                 if a.name in assign and assign[a.name] != assign[n.name]}

    def quotient() -> nx.DiGraph:
        q = nx.DiGraph()
        q.add_nodes_from({uf.find(g.gid) for g in groups})
        q.add_edges_from((uf.find(u), uf.find(v)) for u, v in raw_edges if uf.find(u) != uf.find(v))
        return q

    # -- a module called more than once: one layer, unless that would make a cycle ----------
    calls: dict[str, list[Group]] = defaultdict(list)
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
    glue = {g.gid for g in groups if g.functional and flops[g.gid] == 0 and g.gid not in apart}
    pure = {gid for gid in nx.topological_sort(q)
            if gid in glue and all(p in glue for p in q.predecessors(gid))}
    pure = {gid for gid in pure if nx.ancestors(q, gid) <= pure}
    for piece in nx.weakly_connected_components(q.subgraph(pure)):
        _join(uf, piece)

    # -- attach zero-FLOP functional glue to its only producer or only consumer, but neither an
    # unfold or resize to anything nor anything to one: inside a linear layer (ConvBERT's 9×1 token
    # windows) an unfold would be priced as a matmul, at a quarter of its time, and a bilinear
    # upsample beside a convolution (DepthPro's decoder) at an eighth.
    q = quotient()
    for g in groups:
        if not g.functional or uf.find(g.gid) != g.gid or flops[g.gid] > 0 or g.gid in apart:
            continue
        preds, succs = list(q.predecessors(g.gid)), list(q.successors(g.gid))
        target = preds[0] if len(preds) == 1 else succs[0] if not preds and len(succs) == 1 else None
        if target is None or target in apart:
            continue
        uf.union(target, g.gid)
        q = nx.contracted_nodes(q, target, g.gid, self_loops=False, copy=False)

    # -- in-place writes: a write and a reader of the same tensor that the layers do not order as the graph
    # does share a layer (pipeplan.costmodel.capture.inplace), and so do the layers joining closes a cycle through
    grouped = functools.cache(quotient)  # built only for a graph with in-place writes
    together = kept_together(ops, lambda name: uf.find(assign[name]) if name in assign else None,
                             lambda gid: nx.ancestors(grouped(), gid))
    for names in together:
        _join(uf, {uf.find(assign[name]) for name in names if name in assign})
    if together:
        for cycle in nx.strongly_connected_components(quotient()):
            _join(uf, cycle)
    return Grouping(groups, uf, assign)


# Operators whose work is a weight's matmul or a convolution: what one layer of the cost model's rows holds one of.
_HEAVY_KINDS = frozenset({"linear", "matmul", "conv"})


def _calls_to_split(ops: list[torch.fx.Node], owner: dict[str, tuple[bool, str, int]], owners: Owners,
                    heavy: set[str]) -> set[tuple[str, int]]:
    """Calls of leaf modules that run two or more matmuls or convolutions: their operators are grouped as the
    glue of a module with children is (a layer per chain), each matmul starting a layer of its own.

    A leaf module is one layer because it is usually one operator with its glue (``nn.Linear``,
    ``nn.Conv2d``, a norm). GPT-OSS's experts are a leaf module too, yet run a whole routed mixture (sort,
    histogram, gathers, two grouped matmuls, clamps, a scatter: 35 operators): one layer of all of it
    matched no row any cost model was fitted on (every grouped-matmul row holds one grouped matmul), and
    was priced at 3.3× its time in-model on the Zen 5, where Mixtral's experts, a module with a child, come
    out as a layer per grouped matmul. Only at leaf granularity: ``block`` and ``depth:N`` ask for bigger layers.
    """
    if owners.mode != "leaf":
        return set()
    per_call: dict[tuple[str, int], int] = defaultdict(int)
    for n in ops:
        functional, path, call = owner[n.name]
        if not functional and n.name in heavy:
            per_call[(path, call)] += 1
    return {key for key, count in per_call.items() if count >= 2}


def _join(uf: UnionFind[int], gids: set[int]) -> None:
    """Merge the groups ``gids`` into the one of lowest id."""
    first, *rest = sorted(gids)
    for gid in rest:
        uf.union(first, gid)


def _kept_apart(group: Group) -> bool:
    """Whether ``group``'s first operator cuts, folds or resizes: a functional one always starts a
    group of its own, and an ``nn.Unfold``/``nn.Fold``/``nn.Upsample`` module's call starts with it."""
    return op_name(group.ops[0].target) in APART_OPS
