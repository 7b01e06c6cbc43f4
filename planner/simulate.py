"""Score any plan under a problem's cost model, and check that it is a valid pipeline.

A plan is given as an assignment (layer → device) and, optionally, the order of the devices in the
pipeline.  :func:`evaluate` computes per-stage compute, receive and send time, memory, the
bottleneck, and a GPipe fill-drain schedule of all microbatches; :func:`violation` names the first
thing that makes a plan invalid (an unassigned layer, a stage that is not convex, stages that
depend on each other in a cycle, an order that sends data backwards, memory over capacity, more
devices than ``max_devices``, a layer where a pin or ``forbid_devices`` rules it out, a keep-together
group split: :mod:`pipeplan.planner.constraints`).

Schedule: stage k starts microbatch m when it has finished microbatch m−1 and stage k−1 has
finished microbatch m, so the makespan is Σₖ Tₖ + (M − 1)·maxₖ Tₖ (a flow shop with identical jobs).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

from pipeplan.planner.plan import Certificate, Plan, Stage, source_of
from pipeplan.planner.problem import PlanError, Problem

__all__ = ["Assignment", "Evaluation", "evaluate", "make_plan", "stage_times", "violation"]


@dataclass
class Evaluation:
    order: list[int]  # device indices in pipeline order (used devices only)
    stages: list[Stage]
    bottleneck: float
    latency: float
    schedule: list[list[tuple[float, float]]]  # [stage][microbatch] -> (start, finish)
    violation: str | None

    @property
    def valid(self) -> bool:
        return self.violation is None


Assignment = Mapping[str, str] | Mapping[str, int] | Sequence[int] | Sequence[str]


def _device_of(problem: Problem, assignment: Assignment) -> list[int]:
    """Layer index → device index, from a mapping of layer names or a per-layer sequence (in
    ``problem.layers`` order), either giving device ids (``"gpu0"``) or device indices."""
    dev_index = {d: i for i, d in enumerate(problem.devices)}

    def index_of(device: object, layer: str) -> int:
        if isinstance(device, str):
            if device not in dev_index:
                raise PlanError(f"unknown device {device!r} for layer {layer!r}: cluster {problem.cluster.name!r} "
                                f"has {', '.join(problem.devices)}")
            return dev_index[device]
        if isinstance(device, numbers.Integral) and not isinstance(device, bool):
            d = int(device)  # numpy integers too
            if 0 <= d < problem.n_devices:
                return d
        raise PlanError(f"layer {layer!r} is assigned {device!r}: give a device id "
                        f"({', '.join(problem.devices)}) or an index below {problem.n_devices}")

    if isinstance(assignment, Mapping):
        missing = [name for name in problem.layers if name not in assignment]
        if missing:
            raise PlanError(f"layer {missing[0]!r} is not assigned to any device"
                            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        extra = sorted(set(assignment) - set(problem.index))
        if extra:
            raise PlanError(f"plan names layer {extra[0]!r}, which model {problem.graph.model!r} does not have")
        return [index_of(assignment[name], name) for name in problem.layers]
    if isinstance(assignment, str) or not isinstance(assignment, Sequence):
        raise PlanError(f"an assignment is a mapping layer → device or a sequence of one device per layer, "
                        f"got {type(assignment).__name__}")
    if len(assignment) != problem.n_layers:
        raise PlanError(f"assignment must give a device for every layer: it gives {len(assignment)} for "
                        f"{problem.n_layers} layers (one per layer, in problem.layers order)")
    return [index_of(device, name) for device, name in zip(assignment, problem.layers, strict=True)]


def stage_times(problem: Problem, dev_of: Sequence[int]) -> tuple[list[float], list[float], list[float]]:
    """Per-device (compute, receive, send) seconds per microbatch for an assignment."""
    k = problem.n_devices
    compute, recv, send = [0.0] * k, [0.0] * k, [0.0] * k
    for v, d in enumerate(dev_of):
        compute[d] += problem.time[v][d]
    for d in set(dev_of):
        compute[d] += problem.stage_overhead[d]  # once per stage, not per layer
    for u, a in enumerate(dev_of):
        for b in problem.receivers(u, dev_of):
            t = problem.transfer(u, a, b)
            send[a] += t
            recv[b] += t
    return compute, recv, send


def _stage_graph(problem: Problem, dev_of: Sequence[int]) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(sorted(set(dev_of)))
    g.add_edges_from((dev_of[u], dev_of[v]) for u, v in problem.edges if dev_of[u] != dev_of[v])
    return g


def _order(problem: Problem, dev_of: Sequence[int], order: Sequence[str] | None) -> tuple[list[int], str | None]:
    g = _stage_graph(problem, dev_of)
    if not nx.is_directed_acyclic_graph(g):
        cycle = [problem.devices[a] for a, _ in nx.find_cycle(g)]
        # a cycle of length 2 through one stage is exactly a non-convex stage
        return sorted(set(dev_of)), (f"stages on {' -> '.join([*cycle, cycle[0]])} depend on each other "
                                     "in a cycle (a stage is not convex, or the stage graph is cyclic)")
    if order is None:
        first = {d: min(v for v, dv in enumerate(dev_of) if dv == d) for d in g.nodes}
        return list(nx.lexicographical_topological_sort(g, key=lambda d: first[d])), None
    dev_index = {d: i for i, d in enumerate(problem.devices)}
    unknown = [d for d in order if d not in dev_index]
    if unknown:
        return sorted(g.nodes), f"device order names {unknown[0]!r}, which the cluster does not have"
    used = [dev_index[d] for d in order if dev_index[d] in g]
    if len(used) != len(set(used)) or set(used) != set(g.nodes):
        return sorted(g.nodes), "device order does not list every used device exactly once"
    pos = {d: i for i, d in enumerate(used)}
    for u, v in problem.edges:
        if pos[dev_of[u]] > pos[dev_of[v]]:
            return used, (f"edge {problem.layers[u]} -> {problem.layers[v]} goes backwards from "
                          f"{problem.devices[dev_of[u]]} to {problem.devices[dev_of[v]]}")
    return used, None


def violation(problem: Problem, assignment: Assignment,
              order: Sequence[str] | None = None) -> str | None:
    """The first reason the plan is invalid, or ``None``."""
    return evaluate(problem, assignment, order).violation


def evaluate(problem: Problem, assignment: Assignment,
             order: Sequence[str] | None = None) -> Evaluation:
    """Score an assignment; a structurally impossible one raises :class:`PlanError`."""
    dev_of = _device_of(problem, assignment)
    seq, problem_found = _order(problem, dev_of, order)
    compute, recv, send = stage_times(problem, dev_of)
    serial = problem.options.comm == "serial"
    stages: list[Stage] = []
    for i, d in enumerate(seq):
        layers = [v for v, dv in enumerate(dev_of) if dv == d]
        t = compute[d] + recv[d] + send[d] if serial else max(compute[d], recv[d], send[d])
        mem = problem.memory(layers)
        stages.append(Stage(i, problem.devices[d], [problem.layers[v] for v in layers], compute[d], recv[d],
                            send[d], t, mem, problem.capacity[d]))
        if problem_found is None and mem > problem.capacity[d]:
            problem_found = (f"device {problem.devices[d]!r} needs {mem} bytes but offers {problem.capacity[d]} "
                             f"after the margin: {mem - problem.capacity[d]} bytes short")
    if problem_found is None and problem.options.max_devices is not None and len(seq) > problem.options.max_devices:
        problem_found = f"plan uses {len(seq)} devices, more than max_devices={problem.options.max_devices}"
    if problem_found is None:
        problem_found = problem.placement.violation(dev_of)
    m = problem.options.microbatches
    schedule: list[list[tuple[float, float]]] = []
    for k, stage in enumerate(stages):
        row: list[tuple[float, float]] = []
        for j in range(m):
            ready = max(row[j - 1][1] if j else 0.0, schedule[k - 1][j][1] if k else 0.0)
            row.append((ready, ready + stage.time))
        schedule.append(row)
    bottleneck = max((s.time for s in stages), default=0.0)
    latency = schedule[-1][-1][1] if schedule else 0.0
    return Evaluation(seq, stages, bottleneck, latency, schedule, problem_found)


def make_plan(problem: Problem, assignment: Assignment, certificate: Certificate,
              order: Sequence[str] | None = None) -> Plan:
    """Build a :class:`Plan` scored by the simulator; an invalid assignment raises PlanError."""
    ev = evaluate(problem, assignment, order)
    if ev.violation is not None:
        raise PlanError(f"{certificate.method} produced an invalid plan: {ev.violation}")
    return Plan(model=problem.graph.model, cluster=problem.cluster.name,
                costmodel=problem.costmodel.spec or problem.costmodel.name,
                costmodel_digest=problem.costmodel.digest, options=problem.options, stages=ev.stages,
                bottleneck=ev.bottleneck, latency=ev.latency,
                certificate=certificate, batch_size=problem.graph.batch_size, source=source_of(problem.graph))
