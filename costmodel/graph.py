"""The layer DAG: what pipeplan knows about a model once it has been captured.

A :class:`ModelGraph` is a ``networkx.DiGraph`` whose nodes are layers (:class:`Layer`) and whose
edges carry the bytes of the tensors that flow between them.  It is saved as versioned JSON so that
a client can send a graph over HTTP without sending Python code; :func:`ModelGraph.from_json`
refuses a malformed document with a :class:`GraphError` that names the problem.

The JSON schema is documented in ``docs/graph-format.md``.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from pipeplan.errors import UserError

__all__ = ["GRAPH_FORMAT", "GRAPH_VERSION", "GraphError", "Layer", "ModelGraph", "TensorInfo"]

GRAPH_FORMAT = "pipeplan.graph"
GRAPH_VERSION = 1

Shape = list[int]


class GraphError(UserError, ValueError):
    """A model graph is malformed: a cycle, a missing field, an unknown version, a bad size."""


@dataclass(frozen=True)
class TensorInfo:
    """A tensor that enters or leaves the model: its name, shape, dtype and the layers at its ends."""

    name: str
    shape: Shape
    dtype: str
    bytes: int
    layers: list[str] = field(default_factory=list)  # consumers of an input, producer of an output


@dataclass
class Layer:
    """One node of the DAG: a leaf module, a block of modules, or functional glue between them.

    Sizes are for one forward pass at the captured batch size.  ``bytes_read`` and
    ``bytes_written`` count the memory traffic of the layer's operators run one by one (eager
    execution): every operator reads its tensor operands and writes its results; views move nothing.
    """

    name: str  # module path ("blocks.0.attn.qkv") or scope:op for functional glue ("blocks.0:add")
    kind: str  # normalised operator kind, see pipeplan.costmodel.capture.features.KINDS
    module_type: str  # class name of the module, or "functional"
    order: int  # position in a topological order of the graph (stable, from the export trace)
    flops: int
    bytes_read: int
    bytes_written: int
    param_bytes: int  # parameters and buffers the layer uses
    activation_bytes: int  # bytes of the tensors the layer hands to other layers or the output
    kernels: int  # operators that do work (views excluded): each costs a launch/dispatch
    input_shapes: list[Shape] = field(default_factory=list)
    input_dtypes: list[str] = field(default_factory=list)
    output_shapes: list[Shape] = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # the aten operators, in execution order
    # The first input is a 4-D map in channels-last strides (N, 1, W·C, C), as a model leaves it after turning
    # tokens back into an image by a permute; convolutions keep that layout. A resize or max-pool runs 5-20×
    # faster on it, a GELU or batch norm 1.5× slower: a cost the shapes alone do not tell.
    channels_last: bool = False
    # A layer of a coarser capture (a block): the leaf layers it is made of, for cost models that
    # price leaf layers better than whole blocks (pipeplan.costmodel.capture._attach_parts). Empty otherwise.
    parts: list[Layer] = field(default_factory=list)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte of memory traffic (0 when nothing moves)."""
        traffic = self.bytes_read + self.bytes_written
        return self.flops / traffic if traffic else 0.0


_INT_FIELDS = ("order", "flops", "bytes_read", "bytes_written", "param_bytes", "activation_bytes",
               "kernels")
_STR_FIELDS = ("name", "kind", "module_type")


class ModelGraph:
    """A captured model: layers in topological order, edges weighted by tensor bytes.

    >>> g = ModelGraph("toy", batch_size=1)
    >>> g.add_layer(Layer("a", "linear", "Linear", 0, 10, 8, 4, 4, 4, 1))
    >>> g.add_layer(Layer("b", "activation", "ReLU", 1, 1, 4, 4, 0, 4, 1))
    >>> g.add_edge("a", "b", 4)
    >>> [layer.name for layer in g.layers], g.total_flops
    (['a', 'b'], 11)
    """

    def __init__(
        self,
        model: str,
        batch_size: int,
        granularity: str = "leaf",
        inputs: list[TensorInfo] | None = None,
        outputs: list[TensorInfo] | None = None,
        total_param_bytes: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.batch_size = batch_size
        self.granularity = granularity
        self.inputs = list(inputs or [])
        self.outputs = list(outputs or [])
        self._total_param_bytes = total_param_bytes
        self.meta: dict[str, Any] = dict(meta or {})
        self.nx = nx.DiGraph()

    # -- building ---------------------------------------------------------------------------

    def add_layer(self, layer: Layer) -> None:
        if layer.name in self.nx:
            raise GraphError(f"duplicate layer name {layer.name!r}")
        self.nx.add_node(layer.name, layer=layer)

    def add_edge(self, src: str, dst: str, nbytes: int) -> None:
        """Add ``nbytes`` flowing from ``src`` to ``dst`` (summed when the edge already exists)."""
        for end in (src, dst):
            if end not in self.nx:
                raise GraphError(f"edge {src} -> {dst}: unknown layer {end!r}")
        if src == dst:
            raise GraphError(f"edge {src} -> {dst}: a layer cannot feed itself")
        if self.nx.has_edge(src, dst):
            self.nx.edges[src, dst]["bytes"] += nbytes
        else:
            self.nx.add_edge(src, dst, bytes=nbytes)

    # -- reading ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.nx.number_of_nodes()

    def __contains__(self, name: object) -> bool:
        return name in self.nx

    def __getitem__(self, name: str) -> Layer:
        try:
            layer: Layer = self.nx.nodes[name]["layer"]
        except KeyError:
            raise KeyError(f"no layer named {name!r} in graph of {self.model}") from None
        return layer

    @property
    def layers(self) -> list[Layer]:
        """Layers in their recorded topological order."""
        return sorted((d["layer"] for _, d in self.nx.nodes(data=True)), key=lambda lay: lay.order)

    def edges(self) -> Iterator[tuple[str, str, int]]:
        """(source, destination, bytes) for every edge."""
        for u, v, d in self.nx.edges(data=True):
            yield u, v, int(d["bytes"])

    def edge_bytes(self, src: str, dst: str) -> int:
        return int(self.nx.edges[src, dst]["bytes"])

    def predecessors(self, name: str) -> list[str]:
        return list(self.nx.predecessors(name))

    def successors(self, name: str) -> list[str]:
        return list(self.nx.successors(name))

    @property
    def total_flops(self) -> int:
        return sum(layer.flops for layer in self.layers)

    @property
    def total_param_bytes(self) -> int:
        """Distinct parameter bytes of the model (a weight shared by two layers counted once)."""
        if self._total_param_bytes is not None:
            return self._total_param_bytes
        return sum(layer.param_bytes for layer in self.layers)

    @property
    def is_chain(self) -> bool:
        """True when the layers form a single path (no branches, no skips)."""
        order = [layer.name for layer in self.layers]
        return self.nx.number_of_edges() == len(order) - 1 and all(
            self.nx.has_edge(a, b) for a, b in itertools.pairwise(order)
        )

    def validate(self) -> None:
        """Raise :class:`GraphError` naming the first problem; return None for a sound graph."""
        if len(self) == 0:
            raise GraphError("graph has no layers")
        if not nx.is_directed_acyclic_graph(self.nx):
            cycle = nx.find_cycle(self.nx)
            path = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
            raise GraphError(f"graph has a cycle: {path}")
        orders: dict[int, str] = {}
        for layer in self.layers:
            for name in _INT_FIELDS:
                value = getattr(layer, name)
                if not isinstance(value, int) or value < 0:
                    raise GraphError(f"layer {layer.name!r}: {name} must be a non-negative integer, got {value!r}")
            if layer.order in orders:
                raise GraphError(f"layers {orders[layer.order]!r} and {layer.name!r} share order {layer.order}")
            orders[layer.order] = layer.name
        for u, v, nbytes in self.edges():
            if nbytes < 0:
                raise GraphError(f"edge {u} -> {v}: bytes must be non-negative, got {nbytes}")
            if self[u].order >= self[v].order:
                raise GraphError(f"edge {u} -> {v} goes against the layers' order ({self[u].order} >= {self[v].order})")
        for tensor in self.inputs + self.outputs:
            for name in tensor.layers:
                if name not in self.nx:
                    raise GraphError(f"model tensor {tensor.name!r} names unknown layer {name!r}")

    # -- JSON -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": GRAPH_FORMAT,
            "version": GRAPH_VERSION,
            "model": self.model,
            "batch_size": self.batch_size,
            "granularity": self.granularity,
            "total_param_bytes": self.total_param_bytes,
            "meta": self.meta,
            "inputs": [asdict(t) for t in self.inputs],
            "outputs": [asdict(t) for t in self.outputs],
            "layers": [_layer_dict(layer) for layer in self.layers],
            "edges": [{"src": u, "dst": v, "bytes": b} for u, v, b in sorted(self.edges())],
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def from_dict(cls, doc: Any) -> ModelGraph:
        """Build and validate a graph from its JSON form; :class:`GraphError` names any problem."""
        if not isinstance(doc, dict):
            raise GraphError(f"a graph document must be a JSON object, got {type(doc).__name__}")
        if doc.get("format") != GRAPH_FORMAT:
            raise GraphError(f"not a pipeplan graph: 'format' must be {GRAPH_FORMAT!r}, got {doc.get('format')!r}")
        version = doc.get("version")
        if version != GRAPH_VERSION:
            raise GraphError(f"unknown graph version {version!r}: this pipeplan reads version {GRAPH_VERSION}")
        for key in ("model", "batch_size", "layers", "edges"):
            if key not in doc:
                raise GraphError(f"graph is missing field {key!r}")
        batch = doc["batch_size"]
        if not isinstance(batch, int) or isinstance(batch, bool) or batch <= 0:
            raise GraphError(f"batch_size must be a positive integer, got {batch!r}")
        meta = doc.get("meta") or {}
        if not isinstance(meta, dict):
            raise GraphError(f"meta must be an object, got {type(meta).__name__}")
        graph = cls(
            model=str(doc["model"]),
            batch_size=batch,
            granularity=str(doc.get("granularity", "leaf")),
            inputs=[_tensor(t, "inputs") for t in _list(doc.get("inputs", []), "inputs")],
            outputs=[_tensor(t, "outputs") for t in _list(doc.get("outputs", []), "outputs")],
            total_param_bytes=_opt_nonneg(doc.get("total_param_bytes"), "total_param_bytes"),
            meta=meta,
        )
        for i, raw in enumerate(_list(doc["layers"], "layers")):
            graph.add_layer(_layer(raw, i))
        for i, raw in enumerate(_list(doc["edges"], "edges")):
            if not isinstance(raw, dict):
                raise GraphError(f"edges[{i}] must be an object")
            for key in ("src", "dst", "bytes"):
                if key not in raw:
                    raise GraphError(f"edges[{i}] is missing field {key!r}")
            nbytes = raw["bytes"]
            if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
                raise GraphError(f"edges[{i}] ({raw['src']} -> {raw['dst']}): "
                                 f"bytes must be a non-negative integer, got {nbytes!r}")
            graph.add_edge(str(raw["src"]), str(raw["dst"]), nbytes)
        graph.validate()
        return graph

    @classmethod
    def from_json(cls, text: str) -> ModelGraph:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GraphError(f"graph is not valid JSON: {exc}") from None
        return cls.from_dict(doc)

    @classmethod
    def load(cls, path: str | Path) -> ModelGraph:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise GraphError(f"cannot read graph file {path}: {exc.strerror}") from None
        try:
            return cls.from_json(text)
        except GraphError as exc:
            raise GraphError(f"{path}: {exc}") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModelGraph) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return (f"ModelGraph({self.model!r}, batch={self.batch_size}, layers={len(self)}, "
                f"edges={self.nx.number_of_edges()}, flops={self.total_flops})")


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise GraphError(f"{where} must be a list, got {type(value).__name__}")
    return value


def _opt_nonneg(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise GraphError(f"{where} must be a non-negative integer, got {value!r}")
    return value


def _shapes(value: Any, where: str) -> list[Shape]:
    shapes = _list(value, where)
    for shape in shapes:
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise GraphError(f"{where} must be lists of non-negative integers, got {shape!r}")
    return shapes


def _tensor(raw: Any, where: str) -> TensorInfo:
    if not isinstance(raw, dict):
        raise GraphError(f"each of {where} must be an object")
    for key in ("name", "shape", "dtype", "bytes"):
        if key not in raw:
            raise GraphError(f"{where} entry is missing field {key!r}")
    nbytes = _opt_nonneg(raw["bytes"], f"{where} {raw['name']!r} bytes")
    return TensorInfo(str(raw["name"]), _shapes([raw["shape"]], where)[0], str(raw["dtype"]),
                      int(nbytes or 0), [str(x) for x in _list(raw.get("layers", []), where)])


def _layer_dict(layer: Layer) -> dict[str, Any]:
    """A layer's JSON form: its fields, the derived intensity, its parts only when it has some and
    ``channels_last`` only when true (a graph's JSON, and so its digest and the keys of plans stored for
    it, stays what it was before those fields existed)."""
    out = {**asdict(layer), "intensity": round(layer.intensity, 6)}
    if not layer.channels_last:
        del out["channels_last"]
    if layer.parts:
        out["parts"] = [_layer_dict(part) for part in layer.parts]
    else:
        del out["parts"]
    return out


def _layer(raw: Any, index: int) -> Layer:
    if not isinstance(raw, dict):
        raise GraphError(f"layers[{index}] must be an object")
    name = raw.get("name", f"layers[{index}]")
    for key in _STR_FIELDS + _INT_FIELDS:
        if key not in raw:
            raise GraphError(f"layer {name!r} is missing field {key!r}")
    for key in _STR_FIELDS:
        if not isinstance(raw[key], str) or not raw[key]:
            raise GraphError(f"layer {name!r}: {key} must be a non-empty string, got {raw[key]!r}")
    for key in _INT_FIELDS:
        value = raw[key]
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise GraphError(f"layer {name!r}: {key} must be a non-negative integer, got {value!r}")
        raw = {**raw, key: value}
    known = set(Layer.__dataclass_fields__) | {"intensity"}  # intensity is derived, written for readers
    unknown = sorted(set(raw) - known)
    if unknown:
        raise GraphError(f"layer {name!r} has unknown field(s): {', '.join(unknown)}")
    for key in ("input_shapes", "output_shapes"):
        _shapes(raw.get(key, []), f"layer {name!r} {key}")
    if not isinstance(raw.get("channels_last", False), bool):
        raise GraphError(f"layer {name!r}: channels_last must be true or false, got {raw['channels_last']!r}")
    parts = [_layer(part, j) for j, part in enumerate(_list(raw.get("parts", []), f"layer {name!r} parts"))]
    return Layer(**{k: raw[k] for k in raw if k not in ("intensity", "parts")}, parts=parts)
