"""The CP-SAT model of pipeline partitioning, and a complete hint for it (see :mod:`pipeplan.planner.ilp`).

Variables (n layers, K devices; costs in ticks, :class:`pipeplan.planner.ilp_ticks.Ticks`):

- ``x[v][d]`` — layer v runs on device d; each layer on exactly one device.
- ``pos[d]`` — device d's place in the pipeline, all different; ``P[v] = pos[d]`` when ``x[v,d]``.
  Every edge (u, v) has ``P[u] ≤ P[v]``, so each stage is convex and the stages form a pipeline in
  ``pos`` order.  Any acyclic stage graph can be listed in such an order, so nothing is lost by
  this.  The solver chooses the order, because links differ; it may leave devices empty.
- ``y[u,a,b] ≥ x[u,a] + x[v,b] − 1`` for each consumer v of u, a ≠ b: layer u's output crosses
  from a to b once, however many layers on b read it, at ``transfer(u, a, b)`` to a's send time
  and to b's receive time.  No variable where that costs 0 ticks.
- Grouped crossings (``aggregate``, the default): a layer u with one consumer v gets, for each
  device b and each group g of devices whose links into b cost the same (same host, other host),
  ``yr ≥ x[v,b] + Σ_(a∈g) x[u,a] − 1`` for b's receive time, and symmetrically ``ys`` for the
  sender.  Since u is on exactly one device and v has one device, each is 1 exactly when a crossing
  of that price happens, so the costs are those of the per-pair model with n·K·(groups) variables
  instead of n·K·(K−1).  A layer with several consumers (which may send to several devices, each
  transfer paid by the sender) keeps one ``y`` per device pair, but reads ``q[u,b] ≥ x[v,b]``
  (some consumer of u on b) instead of one clause per consumer.
- ``T[d]`` is ``max(compute, recv, send)`` (``overlap``) or their sum (``serial``); memory is
  parameters + activations × microbatches kept + the largest workspace, under the capacity.
- ``B ≥ T[d]``: the bottleneck.

Redundant constraints, each implied by the others and so leaving the optimum alone:
``B ≥ lower`` for a proven lower bound (:mod:`pipeplan.planner.bound`), ``B ≥ max_v min_d time``, and
``m·B ≥ Σ_d compute`` for m usable devices.  Devices that are interchangeable (same speed column,
capacity and links) keep a fixed relative order (``pos[a] < pos[b]``): swapping two of them in any
plan gives a plan of the same cost, so one of each set of mirror images survives.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ortools.sat.python import cp_model

from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import Problem

__all__ = ["EdgeCrossing", "Model", "build_model", "edge_crossings", "model_size"]

IntVar = cp_model.IntVar
Crossing = tuple[IntVar, int, frozenset[int], frozenset[int]]  # y is 1 when u is on one of the sources
# and a consumer of u on one of the targets (the hint's reading)


@dataclass
class Model:
    """A built model and the variables :meth:`hint` and the caller read."""

    model: cp_model.CpModel
    x: list[list[IntVar]]
    pos: list[IntVar]
    place: list[IntVar]
    compute: list[IntVar]
    recv: list[IntVar]
    send: list[IntVar]
    stage: list[IntVar]
    bottleneck: IntVar
    workspace: list[IntVar]
    used: list[IntVar] | None
    crossings: list[Crossing]

    def hint(self, problem: Problem, costs: Ticks, classes: list[list[int]], dev_of: Sequence[int],
             order: Sequence[int]) -> None:
        """Hint a whole plan (layer → device index, used devices in pipeline order), relabelled
        within each class of interchangeable devices so that it obeys the symmetry-breaking order
        (the relabelled plan costs exactly the same).  Every variable gets a value, so CP-SAT takes
        the plan as it is instead of completing it by search."""
        k = problem.n_devices
        full_order = [*order, *(d for d in range(k) if d not in order)]
        position = {d: p for p, d in enumerate(full_order)}
        relabel: dict[int, int] = {}
        for cls in classes:
            for target, source in zip(cls, sorted(cls, key=lambda d: position[d]), strict=True):
                relabel[source] = target
        devs = [relabel[d] for d in dev_of]
        slot = {relabel[d]: position[d] for d in range(k)}
        model = self.model
        for v, hinted in enumerate(devs):
            for d in range(k):
                model.add_hint(self.x[v][d], hinted == d)
            model.add_hint(self.place[v], slot[hinted])
        for d in range(k):
            model.add_hint(self.pos[d], slot[d])
        for y, u, sources, targets in self.crossings:
            model.add_hint(y, devs[u] in sources and any(devs[v] in targets for v in problem.succ[u]))
        compute, recv, send = costs.stage_costs(problem, devs)
        serial = problem.options.comm == "serial"
        stage = [int(compute[d] + recv[d] + send[d]) if serial else int(max(compute[d], recv[d], send[d]))
                 for d in range(k)]
        for d in range(k):
            model.add_hint(self.compute[d], int(compute[d]))
            model.add_hint(self.recv[d], int(recv[d]))
            model.add_hint(self.send[d], int(send[d]))
            model.add_hint(self.stage[d], stage[d])
            model.add_hint(self.workspace[d], max((problem.workspace[v] for v in range(len(devs)) if devs[v] == d),
                                                  default=0))
            if self.used is not None:
                model.add_hint(self.used[d], d in devs)
        model.add_hint(self.bottleneck, max(stage))


    def count_used(self) -> list[IntVar]:
        """The ``used`` booleans (device d holds a layer), added to the model if it has none yet:
        what the tie-break of :mod:`pipeplan.planner.ilp_exact` counts when it reuses a solved model."""
        if self.used is None:
            self.used = _used_booleans(self.model, self.x, len(self.pos))
        return self.used

    def read(self, solver: cp_model.CpSolver) -> tuple[list[int], list[int]]:
        """The solver's plan: layer → device index, and the used devices in pipeline order."""
        k = len(self.pos)
        dev_of = [next(d for d in range(k) if solver.boolean_value(self.x[v][d])) for v in range(len(self.x))]
        return dev_of, sorted(set(dev_of), key=lambda d: solver.value(self.pos[d]))


def _used_booleans(model: cp_model.CpModel, x: list[list[IntVar]], k: int) -> list[IntVar]:
    """``used[d]`` ≥ every ``x[v][d]`` of the k devices: 1 when device d holds a layer (free to be 1
    otherwise, which only a minimised count cares about)."""
    used = [model.new_bool_var(f"used[{d}]") for d in range(k)]
    for d in range(k):
        for row in x:
            model.add_implication(row[d], used[d])
    return used


def _link_groups(costs: Ticks) -> tuple[list[list[list[int]]], list[list[list[int]]]]:
    """For each device b, the other devices grouped by the cost of every transfer into b (equal
    within a group, layer by layer); likewise for the transfers out of each device."""
    k = costs.transfer.shape[1]

    def groups(column: Callable[[int, int], bytes]) -> list[list[list[int]]]:
        out: list[list[list[int]]] = []
        for d in range(k):
            found: dict[bytes, list[int]] = {}
            for o in range(k):
                if o != d:
                    found.setdefault(column(o, d), []).append(o)
            out.append(list(found.values()))
        return out

    return (groups(lambda a, b: costs.transfer[:, a, b].tobytes()),
            groups(lambda b, a: costs.transfer[:, a, b].tobytes()))


class EdgeCrossing(NamedTuple):
    """A boolean that is 1 when layer u's output crosses to its consumer v over links of one price."""

    y: IntVar
    cost: int  # ticks
    sender: bool  # charged to the sending device's send time, else to the receiver's receive time
    device: int  # the device charged
    sources: frozenset[int]  # y is 1 when u is on one of these and v on one of the targets
    targets: frozenset[int]


def edge_crossings(model: cp_model.CpModel, x: list[list[IntVar]], table: list[list[list[int]]],
                   links: tuple[list[list[list[int]]], list[list[list[int]]]], u: int, v: int,
                   tag: str) -> Iterator[EdgeCrossing]:
    """The crossings of edge (u, v), grouped by link (``links``: :func:`_link_groups`): u crosses
    into b from some device of group g (all of whose links to b cost the same) exactly when v is on
    b and u on g; likewise out of a into a group.  Variables are named ``{tag}r`` / ``{tag}s``."""
    into, out_of = links
    for b in range(len(into)):
        for g in into[b]:
            if cost := table[u][g[0]][b]:
                y = model.new_bool_var(f"{tag}r[{u},{b},{g[0]}]")
                model.add(y >= x[v][b] + sum(x[u][a] for a in g) - 1)
                yield EdgeCrossing(y, cost, False, b, frozenset(g), frozenset([b]))
    for a in range(len(out_of)):
        for g in out_of[a]:
            if cost := table[u][a][g[0]]:
                y = model.new_bool_var(f"{tag}s[{u},{a},{g[0]}]")
                model.add(y >= x[u][a] + sum(x[v][b] for b in g) - 1)
                yield EdgeCrossing(y, cost, True, a, frozenset([a]), frozenset(g))


def model_size(problem: Problem, costs: Ticks) -> int:
    """About how many variables, constraints and terms :func:`build_model` (``count_used``) and its
    hint create, counted without creating them: O(n + K² groups), where the build is O(n·K·groups)
    calls into OR-Tools.  What the tie-break's estimate of its build time reads
    (:mod:`pipeplan.planner.ilp_exact`)."""
    n, k = problem.n_layers, problem.n_devices
    into, out_of = _link_groups(costs)
    grouped = sum(map(len, into)) + sum(map(len, out_of))  # the crossings of a layer with one consumer
    size = 6 * n * k + len(problem.edges)  # x, its place link, used, workspace, memory and compute terms
    for u in range(n):
        succ = problem.succ[u]
        if succ and costs.transfer[u].any():
            size += grouped if len(succ) == 1 else k * (len(succ) + k)
    if problem.options.transfer == "per-edge":
        size += len(problem.edges) * grouped
    return size


def build_model(problem: Problem, costs: Ticks, classes: list[list[int]], lower: int = 0, upper: int | None = None,
                aggregate: bool = True, count_used: bool = False) -> Model:
    """The model of ``problem`` with ``lower ≤ B ≤ upper`` (both must be valid in ticks: ``lower``
    a bound, ``upper`` the bottleneck of a plan), crossings grouped by link when ``aggregate``;
    ``used`` booleans (a device holds a layer) with ``max_devices`` or when ``count_used``."""
    n, k = problem.n_layers, problem.n_devices
    serial = problem.options.comm == "serial"
    horizon = costs.horizon

    # -- variables ------------------------------------------------------------------------------
    model = cp_model.CpModel()
    x = [[model.new_bool_var(f"x[{v},{d}]") for d in range(k)] for v in range(n)]
    pos = [model.new_int_var(0, k - 1, f"pos[{d}]") for d in range(k)]
    place = [model.new_int_var(0, k - 1, f"P[{v}]") for v in range(n)]
    compute = [model.new_int_var(0, horizon, f"C[{d}]") for d in range(k)]
    recv = [model.new_int_var(0, horizon, f"R[{d}]") for d in range(k)]
    send = [model.new_int_var(0, horizon, f"S[{d}]") for d in range(k)]
    stage = [model.new_int_var(0, 3 * horizon, f"T[{d}]") for d in range(k)]
    bottleneck = model.new_int_var(0, 3 * horizon, "B")
    workspace = [model.new_int_var(0, max(problem.workspace, default=0), f"W[{d}]") for d in range(k)]

    # -- constraints: assignment, pipeline order, convexity ---------------------------------------
    for v in range(n):
        model.add_exactly_one(x[v])
        for d in range(k):
            model.add(place[v] == pos[d]).only_enforce_if(x[v][d])
    model.add_all_different(pos)
    for u, v in problem.edges:
        model.add(place[u] <= place[v])
    for cls in classes:
        for a, b in itertools.pairwise(cls):
            model.add(pos[a] < pos[b])
    used: list[IntVar] | None = None
    overhead = costs.overhead.tolist()
    if problem.options.max_devices is not None or count_used or any(overhead):
        used = _used_booleans(model, x, k)
        if problem.options.max_devices is not None:
            model.add(sum(used) <= problem.options.max_devices)

    # -- constraints: compute, communication, memory ------------------------------------------------
    send_terms: list[list[tuple[int, IntVar]]] = [[] for _ in range(k)]
    recv_terms: list[list[tuple[int, IntVar]]] = [[] for _ in range(k)]
    crossings: list[Crossing] = []
    table = costs.transfer.tolist()
    into, out_of = _link_groups(costs) if aggregate else ([], [])
    for u in range(n):
        succ = problem.succ[u]
        if not succ or not costs.transfer[u].any():
            continue
        if aggregate and len(succ) == 1:
            for c in edge_crossings(model, x, table, (into, out_of), u, succ[0], "y"):
                (send_terms if c.sender else recv_terms)[c.device].append((c.cost, c.y))
                crossings.append((c.y, u, c.sources, c.targets))
            continue
        if aggregate:
            # q[b]: some consumer of u is on b, so each crossing needs one clause, not one per consumer
            reads = [model.new_bool_var(f"q[{u},{b}]") for b in range(k)]
            for b in range(k):
                for v in succ:
                    model.add_implication(x[v][b], reads[b])
                crossings.append((reads[b], u, frozenset(range(k)), frozenset([b])))
        for a in range(k):
            for b in range(k):
                cost = table[u][a][b]
                if cost == 0:
                    continue
                y = model.new_bool_var(f"y[{u},{a},{b}]")
                not_u = x[u][a].Not()
                for read in ([reads[b]] if aggregate else [x[v][b] for v in succ]):
                    model.add_bool_or([not_u, read.Not(), y])
                send_terms[a].append((cost, y))
                recv_terms[b].append((cost, y))
                crossings.append((y, u, frozenset([a]), frozenset([b])))
    kept = problem.options.kept_microbatches
    ticks = costs.compute.tolist()
    for d in range(k):
        held = [overhead[d] * used[d]] if overhead[d] and used is not None else []
        model.add(compute[d] == sum(ticks[v][d] * x[v][d] for v in range(n)) + sum(held))
        model.add(send[d] >= sum(c * y for c, y in send_terms[d]))
        model.add(recv[d] >= sum(c * y for c, y in recv_terms[d]))
        if serial:
            model.add(stage[d] >= compute[d] + recv[d] + send[d])
        else:
            model.add(stage[d] >= compute[d])
            model.add(stage[d] >= recv[d])
            model.add(stage[d] >= send[d])
        model.add(bottleneck >= stage[d])
        for v in range(n):
            if problem.workspace[v]:
                model.add(workspace[d] >= problem.workspace[v]).only_enforce_if(x[v][d])
        model.add(sum((problem.param_bytes[v] + kept * problem.act_bytes[v]) * x[v][d] for v in range(n))
                  + workspace[d] <= problem.capacity[d])

    # -- redundant cuts that tighten the relaxation ---------------------------------------------------
    model.add(bottleneck >= max(lower, max(min(row) for row in ticks)))
    if upper is not None and problem.options.objective == "throughput":
        model.add(bottleneck <= upper)
    model.add((problem.options.max_devices or k) * bottleneck >= sum(compute))

    # -- objective ----------------------------------------------------------------------------------
    if problem.options.objective == "latency":
        if problem.max_bottleneck < math.inf:
            # A floor so low that it can never bind would overflow CP-SAT's int64 constants (or, scaled,
            # the float itself: min_throughput=1e-300): capped before it is made an integer.
            model.add(bottleneck <= math.floor(min(problem.max_bottleneck * costs.scale, 3 * horizon)))
        model.minimize(sum(stage) + (problem.options.microbatches - 1) * bottleneck)
    else:
        model.minimize(bottleneck)
    return Model(model, x, pos, place, compute, recv, send, stage, bottleneck, workspace, used, crossings)
