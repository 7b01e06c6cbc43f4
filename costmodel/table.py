"""A cost model read from a table of measured times: ``--costmodel table:FILE``.

For people whose per-layer times come from another profiler (PyTorch profiler, PipeDream profiles,
vendor tools): seconds per layer and device, and optionally the bytes each edge carries.  A layer is
looked up by name; a device by its id first, then by its type, so one column per device *type*
covers a cluster of many devices of few kinds.  The time is used as it is: the table is taken to
have been measured under the loads the devices have now (a device's ``load`` is not applied).  A
layer or device missing from the table is an error naming both, never a silent guess.

Two formats (``docs/planner.md``):

- CSV, one row per layer, one column per device type or id, seconds in the cells, and optionally
  the columns ``output_bytes`` (what the layer hands to the next) and ``param_bytes``::

      layer,A100-80GB,T4,output_bytes,param_bytes
      embed,0.00021,0.00090,1048576,262144000
      blocks.0,0.00110,0.00512,1048576,404750336

- JSON, the same times, optionally the edges' bytes and each layer's sizes::

      {"format": "pipeplan.costs", "version": 1,
       "times": {"embed": {"A100-80GB": 0.00021, "T4": 0.0009}, ...},
       "edges": [{"src": "embed", "dst": "blocks.0", "bytes": 1048576}, ...],
       "sizes": {"embed": {"output_bytes": 1048576, "param_bytes": 262144000}, ...}}

:meth:`TableCostModel.graph` builds the layer graph the table describes, for planning a model never
captured (``pipeplan plan table:FILE --cluster SPEC``): the edges given, or without them a chain in
the rows' order, each layer handing its ``output_bytes`` to the next; each layer's parameters and
output as its memory.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import math
from pathlib import Path
from typing import Any, NamedTuple

from pipeplan.costmodel.base import CostModel
from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.costmodel.hardware import Contention, Device
from pipeplan.errors import UserError

__all__ = ["PREFIX", "TABLE_FORMAT", "LayerSizes", "TableCostModel", "TableError", "load_table"]

PREFIX = "table:"
TABLE_FORMAT = "pipeplan.costs"


class TableError(UserError, ValueError):
    """A cost table is malformed, or lacks a layer or device the planner asks about."""


class LayerSizes(NamedTuple):
    """What a table may say of a layer besides its times."""

    output_bytes: int = 0  # the tensor it hands on (to the next row, in a chain)
    param_bytes: int = 0


_SIZE_COLUMNS = LayerSizes._fields  # CSV columns that hold sizes, not a device's seconds


class TableCostModel(CostModel):
    """Seconds per (layer, device id or type) from a table; memory as the base model counts it."""

    name = "table"

    def __init__(self, times: dict[str, dict[str, float]], edges: list[tuple[str, str, int]] | None = None,
                 source: str = "table", sizes: dict[str, LayerSizes] | None = None) -> None:
        for layer, row in times.items():
            for device, seconds in row.items():
                if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0):
                    raise TableError(f"{source}: layer {layer!r} on {device!r}: seconds must be a non-negative "
                                     f"number, got {seconds!r}")
        self.times = times
        self.edges = list(edges or [])
        self.source = source
        self.sizes = dict(sizes or {})
        unknown = sorted(set(self.sizes) - set(times))
        if unknown:
            raise TableError(f"{source}: sizes name layer {unknown[0]!r}, which has no times")

    def layer_time(self, layer: Layer, device: Device, load: Contention | None = None) -> float:
        row = self.times.get(layer.name)
        if row is None:
            raise TableError(f"{self.source} has no times for layer {layer.name!r}; it has "
                             f"{len(self.times)} layers, e.g. {', '.join(list(self.times)[:3])}")
        for key in (device.id, device.type):
            if key in row:
                return float(row[key])
        raise TableError(f"{self.source}: layer {layer.name!r} has no time for device {device.id!r} "
                         f"(type {device.type!r}); it has {', '.join(row)}")

    def graph(self, model: str = "table", batch_size: int = 1) -> ModelGraph:
        """The layer graph the table describes: its layers (in the table's order where the edges
        allow) and edges, or without edges a chain in the table's order, each layer handing its
        ``output_bytes`` to the next; no FLOPs (only the times are known), memory from the sizes."""
        import networkx as nx

        names = list(self.times)
        edges = self.edges or [(a, b, self.sizes.get(a, LayerSizes()).output_bytes)
                               for a, b in itertools.pairwise(names)]
        dag = nx.DiGraph()
        dag.add_nodes_from(self.times)
        for src, dst, _ in edges:
            for end in (src, dst):
                if end not in self.times:
                    raise TableError(f"{self.source}: edge {src} -> {dst} names {end!r}, which has no times")
            dag.add_edge(src, dst)
        if not nx.is_directed_acyclic_graph(dag):
            raise TableError(f"{self.source}: the edges form a cycle through {nx.find_cycle(dag)[0][0]!r}")
        rank = {name: i for i, name in enumerate(self.times)}
        graph = ModelGraph(model, batch_size=batch_size, granularity="table")
        for order, name in enumerate(nx.lexicographical_topological_sort(dag, key=rank.__getitem__)):
            out, params = self.sizes.get(name, LayerSizes())
            graph.add_layer(Layer(name, "table", "table", order, 0, params, out, params, out, 1))
        for src, dst, nbytes in edges:
            graph.add_edge(src, dst, nbytes)
        graph.validate()
        return graph


def _number(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise TableError(f"{where}: {text!r} is not a number of seconds") from None


def _from_csv(path: Path) -> TableCostModel:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if not rows or not rows[0] or rows[0][0].strip().lower() != "layer" or len(rows[0]) < 2:
        raise TableError(f"{path}: the first row must be 'layer' followed by device types or ids, "
                         "e.g. layer,A100-80GB,T4")
    columns = [d.strip() for d in rows[0][1:]]
    devices = [c for c in columns if c.lower() not in _SIZE_COLUMNS]
    times: dict[str, dict[str, float]] = {}
    sizes: dict[str, LayerSizes] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(columns) + 1:
            raise TableError(f"{path}:{line}: {len(row)} cells, the header has {len(columns) + 1}")
        name = row[0].strip()
        if name in times:
            raise TableError(f"{path}:{line}: layer {name!r} appears twice")
        cells = dict(zip(columns, row[1:], strict=True))
        times[name] = {d: _number(cells[d], f"{path}:{line} ({d})") for d in devices if cells[d].strip()}
        given = {c.lower(): cells[c] for c in columns if c.lower() in _SIZE_COLUMNS and cells[c].strip()}
        if given:
            sizes[name] = LayerSizes(**{k: _size(v, f"{path}:{line} ({k})") for k, v in given.items()})
    return TableCostModel(times, source=str(path), sizes=sizes)


def _size(value: Any, where: str) -> int:
    """A non-negative whole number of bytes, from a CSV cell or a JSON value."""
    try:
        number = int(value) if isinstance(value, str) else value
    except ValueError:
        number = None
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        raise TableError(f"{where}: bytes must be a non-negative integer, got {value!r}")
    return number


def _from_json(path: Path, doc: Any) -> TableCostModel:
    if not isinstance(doc, dict) or doc.get("format") != TABLE_FORMAT:
        raise TableError(f"{path}: not a cost table: 'format' must be {TABLE_FORMAT!r}")
    if doc.get("version") != 1:
        raise TableError(f"{path}: unknown cost table version {doc.get('version')!r}: this pipeplan reads version 1")
    times = doc.get("times")
    if not isinstance(times, dict) or not all(isinstance(row, dict) for row in times.values()):
        raise TableError(f"{path}: 'times' must map each layer to an object of device type or id → seconds")
    edges: list[tuple[str, str, int]] = []
    for i, edge in enumerate(doc.get("edges") or []):
        if not isinstance(edge, dict) or not {"src", "dst", "bytes"} <= set(edge):
            raise TableError(f"{path}: edges[{i}] must be an object with src, dst and bytes")
        nbytes = edge["bytes"]
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
            raise TableError(f"{path}: edges[{i}] ({edge['src']} -> {edge['dst']}): bytes must be a "
                             f"non-negative integer, got {nbytes!r}")
        edges.append((str(edge["src"]), str(edge["dst"]), nbytes))
    sizes = doc.get("sizes") or {}
    if not isinstance(sizes, dict) or not all(isinstance(row, dict) and set(row) <= set(_SIZE_COLUMNS)
                                              for row in sizes.values()):
        raise TableError(f"{path}: 'sizes' must map layers to objects of {' and '.join(_SIZE_COLUMNS)}")
    read = {str(k): LayerSizes(**{f: _size(b, f"{path}: sizes[{k!r}].{f}") for f, b in row.items()})
            for k, row in sizes.items()}
    return TableCostModel({str(k): dict(v) for k, v in times.items()}, edges, source=str(path), sizes=read)


def load_table(spec: str) -> TableCostModel:
    """The model of ``table:FILE`` (CSV by suffix, else JSON), stamped with its spec and digest."""
    path = Path(spec.removeprefix(PREFIX))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TableError(f"cost table {path}: {exc.strerror}") from None
    if path.suffix.lower() == ".csv":
        model = _from_csv(path)
    else:
        try:
            doc = json.loads(data)
        except json.JSONDecodeError as exc:
            raise TableError(f"cost table {path} is neither CSV (by suffix) nor valid JSON: {exc}") from None
        model = _from_json(path, doc)
    model.spec = PREFIX + str(path.resolve())  # absolute: a run may start elsewhere
    model.digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return model
