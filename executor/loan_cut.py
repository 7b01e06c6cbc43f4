"""Take a borrowing stage's lent weights out of its module, and hand them to their lenders.

A plan's ``harvest.loans`` say which layers' weights a stage keeps in a lender's memory.  For each
such layer, :func:`cut_loans` finds the stage module's weights (``get_attr`` nodes) that only that
layer's operators read (:data:`pipeplan.executor.stages.LAYER_META` names each operator's layer),
deletes them from the module, and rewrites the graph so that the layer fetches them when it runs::

    fetch_j = self.fetch_j()                 # blocks until the streamer has the weights (prefetched)
    w, b = fetch_j[0], fetch_j[1]
    ... the layer's operators, on w and b ...
    self.release_j(<the layer's last operator>) # the buffers go: the next layer's can arrive

The borrower's process then never holds those weights except while the layer runs (the streamer,
:mod:`pipeplan.executor.harvest_stream`, fetches the next one meanwhile); the removed tensors go to
the lender as :class:`Lent`.  A weight that another layer of the stage also reads (a tied weight)
stays at home: the stage needs it anyway.

Complexity: linear in the stage graph's nodes and uses.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import NamedTuple

import torch
from torch import fx

from pipeplan.executor.harvest_stream import Fetched, Released
from pipeplan.executor.stages import LAYER_META, Boundary
from pipeplan.executor.weight_pack import pack, packed_size

__all__ = ["FetchSpec", "Lent", "cut_loans", "live_loans"]


class FetchSpec(NamedTuple):
    """One borrowed layer of a stage, in the order its stage runs them."""

    slot: int  # position in the stage's fetch order: what it asks its lender for
    layer: str
    lender: int  # rank of the lender's process
    lender_name: str  # a device id, or host:NAME
    tensors: tuple[Boundary, ...]  # what arrives, in order: the receive buffers' shapes and dtypes

    @property
    def nbytes(self) -> int:
        """Bytes of the packed buffer a fetch receives (:func:`pack`)."""
        return packed_size(self.tensors)


class Lent(NamedTuple):
    """Weights a lender holds for one borrowed layer of one stage."""

    borrower: int  # the borrowing stage's rank
    slot: int  # its FetchSpec.slot
    layer: str
    flat: torch.Tensor  # the layer's tensors packed in one byte buffer (pack), sent as one message


def _lendable(module: fx.GraphModule, borrowed: Mapping[str, object]) -> dict[str, list[fx.Node]]:
    """The ``get_attr`` nodes of tensors only one borrowed layer reads, by layer."""
    out: dict[str, list[fx.Node]] = {}
    for node in module.graph.nodes:
        if node.op != "get_attr" or not isinstance(getattr(module, str(node.target), None), torch.Tensor):
            continue
        layers = {user.meta.get(LAYER_META) for user in node.users}
        if len(layers) == 1:
            layer = next(iter(layers))
            if isinstance(layer, str) and layer in borrowed:
                out.setdefault(layer, []).append(node)
    return out


def cut_loans(module: fx.GraphModule, borrower: int, borrowed: Mapping[str, tuple[int, str]]
              ) -> tuple[list[FetchSpec], list[Lent], list[str]]:
    """Rewrite ``module`` (stage ``borrower``'s, in place) to fetch the weights of each layer in
    ``borrowed`` (layer → (lender rank, lender name)); return the fetches in the order the stage
    runs them, the weights each lender must hold, and the borrowed layers that had no weight of
    their own to lend (their weights are tied to another layer's, or they have none).

    >>> import torch.nn as nn
    >>> from pipeplan.costmodel.capture import capture_program
    >>> from pipeplan.executor.stages import split_program
    >>> cp = capture_program(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), (torch.randn(2, 4),))
    >>> stage = split_program(cp, [["0", "1", "2"]])[0].module
    >>> fetches, lent, kept = cut_loans(stage, 0, {"2": (1, "cpu1")})
    >>> [(f.layer, [b.shape for b in f.tensors]) for f in fetches], lent[0].flat.numel(), kept, live_loans(stage)
    ([('2', [(2, 4), (2,)])], 40, [], 1)
    """
    graph = module.graph
    position = {node: i for i, node in enumerate(graph.nodes)}
    lendable = _lendable(module, borrowed)
    kept = sorted(set(borrowed) - set(lendable))
    # Fetch in the order the layers first run, so the streamer's order is the forward's.
    order = sorted(lendable, key=lambda layer: min(position[u] for n in lendable[layer] for u in n.users))
    fetches: list[FetchSpec] = []
    lent: list[Lent] = []
    for j, layer in enumerate(order):
        nodes = lendable[layer]
        users = sorted({u for n in nodes for u in n.users}, key=position.__getitem__)
        tensors = [getattr(module, str(n.target)) for n in nodes]
        rank, name = borrowed[layer]
        fetches.append(FetchSpec(j, layer, rank, name, tuple(Boundary(str(n.target), tuple(t.shape), t.dtype)
                                                             for n, t in zip(nodes, tensors, strict=True))))
        lent.append(Lent(borrower, j, layer, pack(tuple(tensors))))
        module.add_submodule(f"fetch_{j}", Fetched(j, layer))
        module.add_submodule(f"release_{j}", Released(j, layer))
        with graph.inserting_before(users[0]):
            fetched = graph.call_module(f"fetch_{j}", ())
            items = [graph.call_function(operator.getitem, (fetched, i)) for i in range(len(nodes))]
        for node, item in zip(nodes, items, strict=True):
            item.meta = dict(node.meta)
            node.replace_all_uses_with(item)
            graph.erase_node(node)
            delattr(module, str(node.target))
        with graph.inserting_after(users[-1]):
            graph.call_module(f"release_{j}", (users[-1],))
    graph.lint()
    module.recompile()
    return fetches, lent, kept


def live_loans(module: fx.GraphModule) -> int:
    """The most borrowed layers whose weights a cut module holds at once: layers whose operators
    interleave (branches the export ordered side by side) hold theirs together, and the streamer
    must have that many buffers or the forward would wait for a layer it has not released."""
    live = most = 0
    for node in module.graph.nodes:
        if node.op == "call_module":
            target = module.get_submodule(str(node.target))
            live += 1 if isinstance(target, Fetched) else -1 if isinstance(target, Released) else 0
            most = max(most, live)
    return most

