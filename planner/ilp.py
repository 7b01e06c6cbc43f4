"""Optimal pipeline partitioning of a layer DAG over heterogeneous, contended devices (CP-SAT).

Model (n layers, K devices; every cost from :class:`planner.problem.Problem`):

- ``x[v,d]`` — layer v runs on device d; each layer on exactly one device.
- ``pos[d]`` — device d's place in the pipeline, all different; ``P[v] = pos[d]`` when ``x[v,d]``.
  Every edge (u, v) has ``P[u] ≤ P[v]``.  So each stage is a convex set of layers and the stages form
  a pipeline in ``pos`` order.  Any acyclic stage graph can be listed in such an order, so nothing is
  lost by this.  The solver chooses the order, because links differ; it may leave devices empty.
- ``y[u,a,b] ≥ x[u,a] + x[v,b] − 1`` for each consumer v of u, a ≠ b.  Layer u's output crosses
  from a to b once, however many layers on b read it.  It costs ``transfer(u, a, b)`` = latency +
  bytes / bandwidth, to a's send time and to b's receive time.
- The stage time ``T[d]`` is ``max(compute, recv, send)`` when ``comm="overlap"`` and their sum when
  ``comm="serial"``.  Memory is parameters + activations × microbatches in flight + the largest
  workspace, and it must stay under the device's capacity.
- The objective is either the bottleneck ``B ≥ T[d]`` (throughput), or the latency
  ``Σ T[d] + (M − 1)·B`` subject to ``B ≤ batch / min_throughput`` (latency).

Strengthening: the bound ``B ≥ max_v min_d time[v,d]`` and ``K·B ≥ Σ_d compute[d]``.  Devices
that are interchangeable (same speed column, capacity and links) are kept in a fixed order, which
breaks symmetry.  The solver is warm-started from the best baseline.  Seconds are scaled to
integer ticks, about 10⁻⁷ of the largest possible stage time.

Size: n·K assignment booleans, plus one y for each (layer with consumers) × K·(K−1).  Every
solve reports status, objective, best bound, gap and time; it never assumes OPTIMAL.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from planner.baselines import best_baseline
from planner.plan import Certificate, Plan, relative_gap
from planner.problem import PlanError, Problem
from planner.simulate import make_plan

__all__ = ["SolverOptions", "solve"]

log = logging.getLogger(__name__)

_RESOLUTION = 1e7  # integer ticks across the largest possible stage time


@dataclass(frozen=True)
class SolverOptions:
    time_limit: float = 10.0  # seconds
    workers: int | None = None  # None → this machine's CPU count
    seed: int = 0
    gap_limit: float = 0.0  # stop when (objective − bound) / objective ≤ this
    warm_start: bool = True


def _interchangeable(problem: Problem) -> list[list[int]]:
    """Classes of devices that any plan can swap without changing its cost."""
    k = problem.n_devices
    classes: list[list[int]] = []
    for d in range(k):
        for cls in classes:
            e = cls[0]
            same = (problem.capacity[d] == problem.capacity[e]
                    and all(problem.time[v][d] == problem.time[v][e] for v in range(problem.n_layers))
                    and all(problem.cluster.link(problem.devices[d], problem.devices[o])
                            == problem.cluster.link(problem.devices[e], problem.devices[o])
                            for o in range(k) if o not in (d, e)))
            if same:
                cls.append(d)
                break
        else:
            classes.append([d])
    return classes


def solve(problem: Problem, options: SolverOptions | None = None) -> Plan:
    """The best plan CP-SAT finds within the time limit, with its certificate.

    Raises :class:`PlanError` when no plan fits (naming the shortfall) or none was found in time.
    """
    opts = options or SolverOptions()
    problem.check_fits()
    started = time.perf_counter()
    n, k = problem.n_layers, problem.n_devices
    serial = problem.options.comm == "serial"
    latency_objective = problem.options.objective == "latency"

    worst = sum(max(row) for row in problem.time) + sum(
        max((problem.transfer(u, a, b) for a in range(k) for b in range(k)), default=0.0)
        for u in range(n) if problem.succ[u]) * (2 if serial else 1)
    scale = _RESOLUTION / worst if worst > 0 else 1.0

    def ticks(seconds: float) -> int:
        return round(seconds * scale)

    # -- model and variables ----------------------------------------------------------------
    model = cp_model.CpModel()
    x = [[model.new_bool_var(f"x[{v},{d}]") for d in range(k)] for v in range(n)]
    pos = [model.new_int_var(0, k - 1, f"pos[{d}]") for d in range(k)]
    place = [model.new_int_var(0, k - 1, f"P[{v}]") for v in range(n)]
    horizon = sum(ticks(max(row)) for row in problem.time) + ticks(worst) + 1
    compute = [model.new_int_var(0, horizon, f"C[{d}]") for d in range(k)]
    recv = [model.new_int_var(0, horizon, f"R[{d}]") for d in range(k)]
    send = [model.new_int_var(0, horizon, f"S[{d}]") for d in range(k)]
    stage = [model.new_int_var(0, 3 * horizon, f"T[{d}]") for d in range(k)]
    bottleneck = model.new_int_var(0, 3 * horizon, "B")

    # -- constraints: assignment, pipeline order, convexity ---------------------------------
    for v in range(n):
        model.add_exactly_one(x[v])
        for d in range(k):
            model.add(place[v] == pos[d]).only_enforce_if(x[v][d])
    model.add_all_different(pos)
    for u, v in problem.edges:
        model.add(place[u] <= place[v])
    classes = _interchangeable(problem)
    for cls in classes:
        for a, b in itertools.pairwise(cls):
            model.add(pos[a] < pos[b])
    if problem.options.max_devices is not None:
        used = [model.new_bool_var(f"used[{d}]") for d in range(k)]
        for d in range(k):
            for v in range(n):
                model.add_implication(x[v][d], used[d])
        model.add(sum(used) <= problem.options.max_devices)

    # -- constraints: compute, communication, memory ----------------------------------------
    send_terms: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(k)]
    recv_terms: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(k)]
    crossings: dict[tuple[int, int, int], cp_model.IntVar] = {}
    for u in range(n):
        if not problem.succ[u] or problem.out_bytes[u] == 0:
            continue
        for a in range(k):
            for b in range(k):
                if a == b:
                    continue
                cost = ticks(problem.transfer(u, a, b))
                if cost == 0:
                    continue
                y = crossings[u, a, b] = model.new_bool_var(f"y[{u},{a},{b}]")
                for v in problem.succ[u]:
                    model.add_bool_or([x[u][a].Not(), x[v][b].Not(), y])
                send_terms[a].append((cost, y))
                recv_terms[b].append((cost, y))
    kept = problem.options.kept_microbatches
    for d in range(k):
        model.add(compute[d] == sum(ticks(problem.time[v][d]) * x[v][d] for v in range(n)))
        model.add(send[d] >= sum(c * y for c, y in send_terms[d]))
        model.add(recv[d] >= sum(c * y for c, y in recv_terms[d]))
        if serial:
            model.add(stage[d] >= compute[d] + recv[d] + send[d])
        else:
            model.add(stage[d] >= compute[d])
            model.add(stage[d] >= recv[d])
            model.add(stage[d] >= send[d])
        model.add(bottleneck >= stage[d])
        workspace = model.new_int_var(0, max(problem.workspace, default=0), f"W[{d}]")
        for v in range(n):
            if problem.workspace[v]:
                model.add(workspace >= problem.workspace[v]).only_enforce_if(x[v][d])
        model.add(sum((problem.param_bytes[v] + kept * problem.act_bytes[v]) * x[v][d] for v in range(n))
                  + workspace <= problem.capacity[d])
    # redundant cuts that tighten the relaxation
    model.add(bottleneck >= max(min(ticks(t) for t in row) for row in problem.time))
    model.add((problem.options.max_devices or k) * bottleneck >= sum(compute))

    # -- objective ----------------------------------------------------------------------------
    if latency_objective:
        if problem.max_bottleneck < math.inf:
            # A floor so low that it can never bind would overflow CP-SAT's int64 constants.
            model.add(bottleneck <= min(3 * horizon, math.floor(problem.max_bottleneck * scale)))
        model.minimize(sum(stage) + (problem.options.microbatches - 1) * bottleneck)
    else:
        model.minimize(bottleneck)

    # -- warm start -----------------------------------------------------------------------------
    baseline: Plan | None = None
    if opts.warm_start:
        try:
            baseline = best_baseline(problem)
        except PlanError as exc:
            log.info("no baseline fits, solving cold: %s", exc)
    if baseline is not None:
        _hint(model, problem, baseline, classes, x, pos, place, crossings)

    # -- solve ----------------------------------------------------------------------------------
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = opts.time_limit
    solver.parameters.num_workers = opts.workers or os.cpu_count() or 1
    solver.parameters.random_seed = opts.seed
    solver.parameters.relative_gap_limit = opts.gap_limit
    status = solver.solve(model)
    elapsed = time.perf_counter() - started
    name = solver.status_name(status)
    log.info("CP-SAT %s in %.2fs: objective %s, bound %s", name, elapsed, solver.objective_value,
             solver.best_objective_bound)

    # -- read the status --------------------------------------------------------------------------
    if status == cp_model.INFEASIBLE:
        raise PlanError(f"no plan of {problem.graph.model} fits on {problem.cluster.name!r}: every split "
                        "breaks a device's memory capacity (or max_devices); add devices or memory, or "
                        "lower the microbatches in flight")
    bound = solver.best_objective_bound / scale if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else 0.0
    bound = max(bound, problem.objective_lower_bound())
    details = {"solver_status": name, "workers": solver.parameters.num_workers, "seed": opts.seed,
               "time_limit": opts.time_limit, "variables": len(model.proto.variables),
               "constraints": len(model.proto.constraints),
               "warm_start": baseline.method if baseline is not None else None, "tick_seconds": 1.0 / scale}
    plan: Plan | None = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assignment = [next(d for d in range(k) if solver.boolean_value(x[v][d])) for v in range(n)]
        used_devices = sorted(set(assignment), key=lambda d: solver.value(pos[d]))
        objective = solver.objective_value / scale
        # With a gap limit CP-SAT reports OPTIMAL once within it: the gap is what the bound says.
        certificate = Certificate("ilp", name, objective, min(bound, objective),
                                  relative_gap(objective, bound), elapsed, details)
        plan = make_plan(problem, assignment, certificate, order=[problem.devices[d] for d in used_devices])
    # The solver works on rounded ticks and may stop before it improves on its warm start: never hand
    # back something worse than the best baseline, but say where the plan came from.
    if baseline is not None and (plan is None or baseline.objective_value < plan.objective_value * (1 - 1e-9)):
        objective = baseline.objective_value
        details["solution"] = f"warm start ({baseline.method}); the solver found nothing better in time"
        proven = status == cp_model.OPTIMAL
        baseline.certificate = Certificate("ilp", "OPTIMAL" if proven else "FEASIBLE", objective,
                                           min(bound, objective), relative_gap(objective, bound), elapsed,
                                           details)
        return baseline
    if plan is None:
        raise PlanError(f"CP-SAT found no plan within {opts.time_limit:g}s (status {name}); "
                        "raise the time limit")
    return plan




def _hint(model: cp_model.CpModel, problem: Problem, plan: Plan, classes: list[list[int]],
          x: list[list[cp_model.IntVar]], pos: list[cp_model.IntVar], place: list[cp_model.IntVar],
          crossings: dict[tuple[int, int, int], cp_model.IntVar]) -> None:
    """Hint ``plan``, relabelled within each class of interchangeable devices so that it obeys the
    symmetry-breaking order (the relabelled plan costs exactly the same)."""
    k = problem.n_devices
    dev_index = {d: i for i, d in enumerate(problem.devices)}
    order = [dev_index[d] for d in plan.device_order()]
    order += [d for d in range(k) if d not in order]
    position = {d: p for p, d in enumerate(order)}
    relabel: dict[int, int] = {}
    for cls in classes:
        for target, source in zip(cls, sorted(cls, key=lambda d: position[d]), strict=True):
            relabel[source] = target
    owner = plan.assignment()
    dev_of = [relabel[dev_index[owner[name]]] for name in problem.layers]
    slot = {relabel[d]: position[d] for d in range(k)}
    for v, hinted in enumerate(dev_of):
        for d in range(k):
            model.add_hint(x[v][d], hinted == d)
        model.add_hint(place[v], slot[hinted])
    for d in range(k):
        model.add_hint(pos[d], slot[d])
    # A complete hint: CP-SAT otherwise has to rebuild the crossings of the warm start itself.
    for (u, a, b), y in crossings.items():
        model.add_hint(y, dev_of[u] == a and any(dev_of[v] == b for v in problem.succ[u]))
