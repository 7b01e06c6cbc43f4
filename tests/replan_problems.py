"""The two-layer re-planning problem the replan tests share: a current plan and a loaded cluster."""

from __future__ import annotations

import itertools

from pipeplan.costmodel.cluster import Cluster
from pipeplan.planner.builder import GraphBuilder
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.simulate import make_plan
from tests.planner_problems import ROOFLINE

GB = 10**9  # each layer's weights: 1 s over a 1 GB/s link
FAST, SLOW = 1e9, 1e8  # bytes/s


def cluster(speeds: dict[str, float], links: dict[tuple[str, str], float]) -> Cluster:
    """Devices of the given GFLOP/s (1e6 FLOPs take 1 ms at 1 GFLOP/s), 4 GB each; links at the
    given bytes/s, no latency."""
    devices = [{"id": d, "type": "generic", "memory": 4 * GB, "peak_flops": s * 1e9, "mem_bandwidth": 1e15}
               for d, s in speeds.items()]
    return Cluster.from_dict({"name": "hand", "devices": devices, "links": [
        {"a": a, "b": b, "bandwidth": links.get((a, b), links.get((b, a))), "latency": 0.0}
        for a, b in itertools.combinations(speeds, 2)]})


def two_layers() -> GraphBuilder:
    """l0 → l1, 1 ms each at 1 GFLOP/s, 1 GB of weights each, nothing handed on (transfers are free)."""
    b = GraphBuilder("two")
    b.layer("l0", flops=10**6, param_bytes=GB)
    b.layer("l1", flops=10**6, param_bytes=GB, inputs={"l0": 0})
    return b


def current_plan() -> Plan:
    """l0 on d0 and l1 on d1, both idle: 1 ms."""
    old = Problem(two_layers().build(), cluster({"d0": 1.0, "d1": 1.0}, {("d0", "d1"): SLOW}), ROOFLINE,
                  PlanOptions(microbatches=1))
    return make_plan(old, {"l0": "d0", "l1": "d1"}, Certificate("hand", "HEURISTIC", 0.0))


LOADED = cluster({"d0": 1.0, "d1": 0.5, "d2": 1.0}, {("d0", "d1"): SLOW, ("d0", "d2"): SLOW, ("d1", "d2"): FAST})
