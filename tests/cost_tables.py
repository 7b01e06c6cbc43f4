"""Cost tables written as a user would write them, shared by the table tests."""

from __future__ import annotations

from pipeplan.costmodel.cluster import Cluster


def two_types() -> Cluster:
    devices = [{"id": "fast", "type": "A100", "memory": 2**30, "peak_flops": 1e9, "mem_bandwidth": 1e12},
               {"id": "slow", "type": "T4", "memory": 2**30, "peak_flops": 1e9, "mem_bandwidth": 1e12}]
    return Cluster.from_dict({"name": "pair", "devices": devices,
                              "links": [{"a": "fast", "b": "slow", "bandwidth": 1e9, "latency": 0.0}]})
