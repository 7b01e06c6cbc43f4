"""Small planning problems with known answers for the planner's tests: graphs, clusters, brute force."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.planner.ilp import SolverOptions
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.simulate import evaluate

EXACT = SolverOptions(time_limit=30.0, workers=2, seed=0)
ROOFLINE = RooflineModel(overhead=0.0)
REL = 1e-5  # the solver works in integer ticks of ~1e-7 of the largest stage time


def graph_of(flops: list[int], edges: list[tuple[int, int, int]], params: list[int] | None = None,
             acts: list[int] | None = None) -> ModelGraph:
    """Layers with ``flops`` (1e6 FLOPs = 1 ms on a 1 GFLOP/s device), no bytes, no overhead."""
    g = ModelGraph("toy", batch_size=1)
    for i, f in enumerate(flops):
        p = params[i] if params else 0
        a = acts[i] if acts else 0
        g.add_layer(Layer(f"l{i}", "linear", "Linear", i, f, 0, a, p, a, 0))
    for u, v, b in edges:
        g.add_edge(f"l{u}", f"l{v}", b)
    return g


def cluster_of(speeds: list[float], bandwidth: float | list[list[float]] = 1e9, latency: float = 0.0,
               memory: int = 2**30) -> Cluster:
    devices = [{"id": f"d{i}", "memory": memory, "peak_flops": s * 1e9, "mem_bandwidth": 1e12}
               for i, s in enumerate(speeds)]
    links: list[dict[str, Any]] = []
    for a, b in itertools.combinations(range(len(speeds)), 2):
        bw = bandwidth if isinstance(bandwidth, float) else bandwidth[a][b]
        links.append({"a": f"d{a}", "b": f"d{b}", "bandwidth": bw, "latency": latency})
    return Cluster.from_dict({"name": "toy", "devices": devices, "links": links})


def brute_force(problem: Problem) -> float:
    """The best objective over every assignment of layers to devices (order does not change it)."""
    best = float("inf")
    for dev_of in itertools.product(range(problem.n_devices), repeat=problem.n_layers):
        ev = evaluate(problem, list(dev_of))
        if ev.violation is None:
            best = min(best, ev.latency if problem.options.objective == "latency" else ev.bottleneck)
    return best


def score(problem: Problem, plan: Any) -> float:
    return plan.latency if problem.options.objective == "latency" else plan.bottleneck


def draw_dag(draw: st.DrawFn) -> tuple[list[int], list[tuple[int, int, int]]]:
    """A random DAG of 2–6 layers: FLOPs per layer, and edges (u, v, bytes) from earlier to later."""
    n = draw(st.integers(2, 6))
    flops = [draw(st.integers(0, 9)) * 1_000_000 for _ in range(n)]
    edges = [(u, v, draw(st.sampled_from([0, 250_000, 1_000_000, 3_000_000])))
             for u in range(n) for v in range(u + 1, n) if draw(st.booleans())]
    return flops, edges


@st.composite
def chain_problems(draw: st.DrawFn) -> Problem:
    """A chain of 2–9 layers on 2–4 identical devices, where the chain DP is exact."""
    work = draw(st.lists(st.integers(1, 9), min_size=2, max_size=9))
    k = draw(st.integers(2, 4))
    nbytes = draw(st.sampled_from([0, 500_000, 2_000_000]))
    g = graph_of([w * 1_000_000 for w in work], [(i, i + 1, nbytes) for i in range(len(work) - 1)])
    options = PlanOptions(comm=draw(st.sampled_from(["overlap", "serial"])), microbatches=2)
    return Problem(g, cluster_of([1.0] * k, latency=1e-4), ROOFLINE, options)


def tick_optimum(problem: Problem, costs: Ticks) -> int:
    """The least bottleneck in ticks over every valid assignment: the model's optimum."""
    best = None
    for dev_of in itertools.product(range(problem.n_devices), repeat=problem.n_layers):
        if evaluate(problem, list(dev_of)).violation is None:
            value = costs.bottleneck(problem, dev_of)
            best = value if best is None else min(best, value)
    assert best is not None
    return best


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    """Random DAGs on clusters with several link classes, tight memory and device limits."""
    flops, edges = draw_dag(draw)
    k = draw(st.integers(2, 4))
    params = [draw(st.sampled_from([0, 100, 300])) * 2**20 for _ in flops]
    speeds = [draw(st.sampled_from([1.0, 2.0])) for _ in range(k)]
    hosts = [draw(st.integers(0, 1)) for _ in range(k)]  # same host: fast link, else slow
    bw = [[4e9 if hosts[a] == hosts[b] else 0.5e9 for b in range(k)] for a in range(k)]
    max_devices = draw(st.sampled_from([None, None, 1, 2]))
    options = PlanOptions(comm=draw(st.sampled_from(["overlap", "serial"])), microbatches=2,
                          memory_margin=0.0, max_devices=max_devices)
    return Problem(graph_of(flops, edges, params=params), cluster_of(speeds, bw, latency=1e-4, memory=2**29),
                   ROOFLINE, options)


@st.composite
def broadcast_problems(draw: st.DrawFn) -> Problem:
    """A chain read by one broadcast layer (position ids, a mask) at several points, on two hosts."""
    n = draw(st.integers(5, 7))
    k = draw(st.integers(3, 4))
    flops = [draw(st.integers(1, 9)) * 1_000_000 for _ in range(n)]
    chain = [(v, v + 1, draw(st.sampled_from([250_000, 1_000_000, 3_000_000]))) for v in range(1, n - 1)]
    readers = draw(st.lists(st.integers(1, n - 1), min_size=3, max_size=n - 1, unique=True))
    nbytes = draw(st.sampled_from([100_000, 1_000_000]))
    skips = [(u, u + 2, 500_000) for u in range(1, n - 2) if draw(st.booleans())]
    speeds = [draw(st.sampled_from([1.0, 2.0])) for _ in range(k)]
    hosts = [d % 2 for d in range(k)]
    bw = [[4e9 if hosts[a] == hosts[b] else 0.5e9 for b in range(k)] for a in range(k)]
    options = PlanOptions(comm=draw(st.sampled_from(["overlap", "serial"])), microbatches=2)
    return Problem(graph_of(flops, chain + [(0, r, nbytes) for r in readers] + skips),
                   cluster_of(speeds, bw, latency=1e-4), ROOFLINE, options)


G = 10**9
TIMES = [1, 2, 3, 1, 1, 4]  # seconds per layer
DATA = [1, 7, 1, 1, 1]  # seconds for each layer's output to cross a link; cutting b|c is expensive
PARAMS = [1, 1, 1, 1, 1, 8]
NAMES = "abcdef"


def make_chain(times: list[int], data: list[int], params: list[int] | None = None) -> ModelGraph:
    graph = ModelGraph("chain", batch_size=1)
    for i, seconds in enumerate(times):
        graph.add_layer(Layer(NAMES[i] if len(times) <= len(NAMES) else f"l{i}", "linear", "Linear", i,
                              flops=seconds * G, bytes_read=0, bytes_written=0,
                              param_bytes=(params or [0] * len(times))[i], activation_bytes=0, kernels=0))
    names = [layer.name for layer in graph.layers]
    for i, seconds in enumerate(data):
        graph.add_edge(names[i], names[i + 1], seconds * G)
    return graph


def make_cluster(peaks: tuple[float, ...] = (1e9, 1e9, 1e9), memory: int = 10**6,
                 links: list[dict[str, object]] | None = None) -> Cluster:
    return Cluster.from_dict({
        "name": "toy-cluster",
        "devices": [{"id": f"d{i}", "memory": memory, "peak_flops": p, "mem_bandwidth": 1e18}
                    for i, p in enumerate(peaks)],
        "topology": {"intra_host": {"bandwidth": 1e9, "latency": 0}},
        "links": links or [],
    })


def make_problem(graph: ModelGraph | None = None, cluster: Cluster | None = None, **options: object) -> Problem:
    opts = PlanOptions(**{"memory_margin": 0.0, **options})  # type: ignore[arg-type]
    return Problem(graph or make_chain(TIMES, DATA, PARAMS), cluster or make_cluster(),
                   RooflineModel(overhead=0.0), opts)
