"""A cost model read from a table of measured times: ``--costmodel table:FILE``.

For people whose per-layer times come from another profiler (PyTorch profiler, PipeDream profiles,
vendor tools): seconds per layer and device, and optionally the bytes each edge carries.  A layer is
looked up by name; a device by its id first, then by its type, so one column per device *type*
covers a cluster of many devices of few kinds.  The time is used as it is: the table is taken to
have been measured under the loads the devices have now (a device's ``load`` is not applied).  A
layer or device missing from the table is an error naming both, never a silent guess.

Two formats (``docs/planner.md``):

- CSV, one row per layer, one column per device type or id, seconds in the cells::

      layer,A100-80GB,T4
      embed,0.00021,0.00090
      blocks.0,0.00110,0.00512

- JSON, the same times and optionally the edges' bytes::

      {"format": "pipeplan.costs", "version": 1,
       "times": {"embed": {"A100-80GB": 0.00021, "T4": 0.0009}, ...},
       "edges": [{"src": "embed", "dst": "blocks.0", "bytes": 1048576}, ...]}

With edges, :meth:`TableCostModel.graph` builds the layer graph the table describes, for planning
without a captured model (``pipeplan plan FILE.json --costmodel table:FILE.json``).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from pathlib import Path
from typing import Any

from costmodel.base import CostModel
from costmodel.graph import Layer, ModelGraph
from costmodel.hardware import Contention, Device

__all__ = ["PREFIX", "TABLE_FORMAT", "TableCostModel", "TableError", "load_table"]

PREFIX = "table:"
TABLE_FORMAT = "pipeplan.costs"


class TableError(ValueError):
    """A cost table is malformed, or lacks a layer or device the planner asks about."""


class TableCostModel(CostModel):
    """Seconds per (layer, device id or type) from a table; memory as the base model counts it."""

    name = "table"

    def __init__(self, times: dict[str, dict[str, float]], edges: list[tuple[str, str, int]] | None = None,
                 source: str = "table") -> None:
        for layer, row in times.items():
            for device, seconds in row.items():
                if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0):
                    raise TableError(f"{source}: layer {layer!r} on {device!r}: seconds must be a non-negative "
                                     f"number, got {seconds!r}")
        self.times = times
        self.edges = list(edges or [])
        self.source = source

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
        allow) and edges, with no FLOPs or memory (only the table's times are known)."""
        import networkx as nx

        dag = nx.DiGraph()
        dag.add_nodes_from(self.times)
        for src, dst, _ in self.edges:
            for end in (src, dst):
                if end not in self.times:
                    raise TableError(f"{self.source}: edge {src} -> {dst} names {end!r}, which has no times")
            dag.add_edge(src, dst)
        if not nx.is_directed_acyclic_graph(dag):
            raise TableError(f"{self.source}: the edges form a cycle through {nx.find_cycle(dag)[0][0]!r}")
        rank = {name: i for i, name in enumerate(self.times)}
        graph = ModelGraph(model, batch_size=batch_size, granularity="table")
        for order, name in enumerate(nx.lexicographical_topological_sort(dag, key=rank.__getitem__)):
            graph.add_layer(Layer(name, "table", "table", order, 0, 0, 0, 0, 0, 1))
        for src, dst, nbytes in self.edges:
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
    devices = [d.strip() for d in rows[0][1:]]
    times: dict[str, dict[str, float]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(devices) + 1:
            raise TableError(f"{path}:{line}: {len(row)} cells, the header has {len(devices) + 1}")
        name = row[0].strip()
        if name in times:
            raise TableError(f"{path}:{line}: layer {name!r} appears twice")
        times[name] = {d: _number(cell, f"{path}:{line} ({d})") for d, cell in zip(devices, row[1:], strict=True)
                       if cell.strip()}
    return TableCostModel(times, source=str(path))


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
    return TableCostModel({str(k): dict(v) for k, v in times.items()}, edges, source=str(path))


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
