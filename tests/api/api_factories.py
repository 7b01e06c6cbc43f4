"""Test data: layer graphs as JSON documents, cluster specs, request bodies."""

from __future__ import annotations

import random
from typing import Any

__all__ = ["chain_graph", "cluster_spec", "plan_body", "wide_graph"]


def _layer(i: int, flops: int, nbytes: int, params: int, act: int) -> dict[str, Any]:
    return {"name": f"l{i}", "kind": "linear", "module_type": "Linear", "order": i, "flops": flops,
            "bytes_read": nbytes, "bytes_written": max(act, nbytes // 2), "param_bytes": params,
            "activation_bytes": act, "kernels": 1}


def _doc(name: str, layers: list[dict[str, Any]], edges: list[tuple[int, int, int]]) -> dict[str, Any]:
    return {"format": "pipeplan.graph", "version": 1, "model": name, "batch_size": 1, "layers": layers,
            "edges": [{"src": f"l{u}", "dst": f"l{v}", "bytes": b} for u, v, b in edges]}


def chain_graph(n: int = 6, name: str = "chain") -> dict[str, Any]:
    """``n`` layers in a line, heavy enough that splitting them pays."""
    layers = [_layer(i, 10**9 * (1 + i % 3), 10**6, 10**6, 10**5) for i in range(n)]
    return _doc(name, layers, [(i, i + 1, 10**5) for i in range(n - 1)])


def wide_graph(branches: int = 16, depth: int = 8, seed: int = 0, name: str = "wide") -> dict[str, Any]:
    """A stem, ``branches`` parallel chains of ``depth`` layers, and a join: a graph too wide for the
    ILP's stage bound (its ideals number (depth + 1) ** branches), so CP-SAT searches until its time
    limit on eight devices: a solve that is still running when a test needs one."""
    rng = random.Random(seed)
    layers = [_layer(0, 10**9, 10**6, 10**6, 10**6)]
    edges = []
    for _ in range(branches):
        prev = 0
        for _step in range(depth):
            v = len(layers)
            layers.append(_layer(v, int(10 ** rng.uniform(8, 10)), 10**6, 10**6, 10**6))
            edges.append((prev, v, 10**6))
            prev = v
        edges.append((prev, branches * depth + 1, 10**6))
    layers.append(_layer(branches * depth + 1, 10**9, 10**6, 10**6, 10**6))
    return _doc(name, layers, edges)


def cluster_spec(n: int = 4, name: str | None = None) -> dict[str, Any]:
    """``n`` identical GPUs on one host, joined by PCIe."""
    spec: dict[str, Any] = {
        "devices": [{"id": f"gpu{i}", "type": "A100", "memory": "80GiB", "peak_flops": "312TFLOPS",
                     "mem_bandwidth": "2039GB/s"} for i in range(n)],
        "topology": {"intra_host": {"bandwidth": "25GB/s", "latency": "10us"}},
    }
    if name is not None:
        spec["name"] = name
    return spec


def plan_body(graph: dict[str, Any] | None = None, cluster: Any = "hetero-a100-t4", **extra: Any) -> dict[str, Any]:
    return {"model": {"graph": graph if graph is not None else chain_graph()}, "cluster": cluster, **extra}
