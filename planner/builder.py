"""Build a layer graph by hand: keyword-only layers with defaults, edges by name, order computed.

A captured :class:`pipeplan.costmodel.graph.ModelGraph` carries ten fields per layer and a topological order
from the export trace.  People who plan a model they describe themselves (from a paper, a profile,
another framework) give only what the planner reads: FLOPs (or nothing, with measured times from
``--costmodel table:FILE``), parameter and activation bytes, and the tensors between layers.
:class:`GraphBuilder` fills in the rest and numbers the layers in a topological order of the edges
(ties kept in the order the layers were declared), so layers may be declared in any order.

>>> b = GraphBuilder("toy")
>>> b.layer("head", flops=2_000, inputs={"body": 4_096})
>>> b.layer("body", flops=10_000, param_bytes=1 << 20, activation_bytes=4_096)
>>> g = b.build()
>>> [layer.name for layer in g.layers], g.edge_bytes("body", "head")
(['body', 'head'], 4096)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import networkx as nx

from pipeplan.costmodel.graph import GraphError, Layer, ModelGraph

__all__ = ["GraphBuilder"]


@dataclass
class _Declared:
    layer: Layer
    inputs: dict[str, int] = field(default_factory=dict)  # producer → bytes


class GraphBuilder:
    """Collects layers and edges, then :meth:`build` returns a validated :class:`ModelGraph`."""

    def __init__(self, model: str, *, batch_size: int = 1) -> None:
        if batch_size < 1:
            raise GraphError(f"batch_size must be at least 1, got {batch_size}")
        self.model, self.batch_size = model, batch_size
        self._layers: dict[str, _Declared] = {}

    def layer(self, name: str, *, flops: int = 0, param_bytes: int = 0, activation_bytes: int = 0,
              workspace_bytes: int = 0, inputs: Mapping[str, int] | None = None, kind: str = "linear",
              module_type: str = "handmade", kernels: int = 1) -> None:
        """Declare a layer.  ``activation_bytes``: what it hands on (kept per microbatch in flight);
        ``workspace_bytes``: transient memory while it runs; ``inputs``: producer name → bytes of
        the tensor it reads from that producer (the producer may be declared later)."""
        if not name:
            raise GraphError("a layer needs a non-empty name")
        if name in self._layers:
            raise GraphError(f"layer {name!r} is declared twice")
        sizes = {"flops": flops, "param_bytes": param_bytes, "activation_bytes": activation_bytes,
                 "workspace_bytes": workspace_bytes, "kernels": kernels}
        for key, value in {**sizes, **{f"inputs[{k!r}]": v for k, v in (inputs or {}).items()}}.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise GraphError(f"layer {name!r}: {key} must be a non-negative integer, got {value!r}")
        # bytes_written beyond the activations is the workspace a cost model's layer_memory reads back
        read = param_bytes + sum((inputs or {}).values())
        layer = Layer(name, kind, module_type, -1, flops, read, activation_bytes + workspace_bytes, param_bytes,
                      activation_bytes, kernels)
        self._layers[name] = _Declared(layer, dict(inputs or {}))

    def build(self) -> ModelGraph:
        """The graph, layers numbered in a topological order (declaration order among equals);
        :class:`GraphError` names an unknown input or a cycle."""
        dag = nx.DiGraph()
        rank = {name: i for i, name in enumerate(self._layers)}
        dag.add_nodes_from(self._layers)
        for name, declared in self._layers.items():
            for src in declared.inputs:
                if src not in self._layers:
                    raise GraphError(f"layer {name!r} reads from {src!r}, which is not declared")
                dag.add_edge(src, name)
        if not nx.is_directed_acyclic_graph(dag):
            cycle = [u for u, _ in nx.find_cycle(dag)]
            raise GraphError(f"the layers' inputs form a cycle: {' -> '.join([*cycle, cycle[0]])}")
        graph = ModelGraph(self.model, batch_size=self.batch_size, granularity="handmade")
        for order, name in enumerate(nx.lexicographical_topological_sort(dag, key=rank.__getitem__)):
            graph.add_layer(replace(self._layers[name].layer, order=order))  # a fresh layer per build
        for name, declared in self._layers.items():
            for src, nbytes in declared.inputs.items():
                graph.add_edge(src, name, nbytes)
        graph.validate()
        return graph
