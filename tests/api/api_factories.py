"""Test data: layer graphs as JSON documents, cluster specs, request bodies."""

from __future__ import annotations

import math
import random
from typing import Any

__all__ = ["chain_graph", "cluster_spec", "dag_graph", "plan_body"]


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


def dag_graph(n: int = 120, seed: int = 0, name: str = "dag") -> dict[str, Any]:
    """A random network-like DAG (a backbone with residual skips); at 120 layers CP-SAT runs to its
    time limit on eight devices (seeds 0 and 1, limits of a few seconds)."""
    rng = random.Random(seed)

    def log_uniform(lo: float, hi: float) -> int:
        return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))

    layers, edges = [], []
    for v in range(n):
        act = log_uniform(1e5, 1e7)
        layers.append(_layer(v, log_uniform(1e7, 1e10), log_uniform(1e5, 1e8), log_uniform(1e4, 5e7), act))
        if v:
            edges.append((v - 1, v, layers[v - 1]["activation_bytes"]))
        if v >= 3 and rng.random() < 0.3:
            edges.append((v - rng.randint(2, 3), v, layers[v - 2]["activation_bytes"]))
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
