"""Plans and certificates for problems beyond the stage program and CP-SAT (10,000 operators on 64
devices): a fill heuristic for the plan, layer prices for the bound (for :func:`pipeplan.planner.ilp.solve`).

At that size neither exact method can start: the stage program's states count the devices used per
class of interchangeable devices (9⁸ for 8 hosts of 8), the CP-SAT model has a boolean per layer and
device (640,000) before any crossing, and the chain-DP baseline's tables are n² per device.  What
scales:

- **Bound**: the layer prices of :mod:`pipeplan.planner.bound.prices` over the devices grouped by speed column
  and capacity (links play no part in it): no plan's bottleneck is below the least limit under which
  the devices cover every layer's price.  One small linear program (repeated blocks share rows).
- **Plan**: a fill of the devices in cluster order (a host's devices are listed together, so most
  neighbouring stages share a host's fast links).  Under an assumed bottleneck B, each device takes,
  from the layers whose producers are all placed, lowest index first, every one that keeps its
  compute within B and its memory within its capacity; a layer that does not fit waits for the
  next device.  Each device's layers are then a convex stage after those before it.  The same fill
  runs backward too (last device first, layers whose consumers are all placed), which leaves the
  rounding loss on the first stages instead of the last: on the decoder below it is 0.65% above
  the bound where the forward fill is 1.1%.  B is bisected between the bound and the least B that
  places every layer; the better plan as the simulator scores it (communication included) is kept.
  O(n log n) per fill, about 2 × 16 fills.

The certificate is exact as documented (:mod:`pipeplan.planner.plan`): the bound is valid in seconds (every
time is rounded down to integer ticks before pricing), the gap is the simulator's bottleneck over
it, and the status is OPTIMAL only when the gap is within ``EXACT_TOLERANCE``.  What it does not
see: operator granularity and communication.  On the 10,103-operator mixture-of-experts decoder of
``benchmarks/scale_graph.py`` over 64 A100s each stage holds about 29 ms of work and its expert
matmuls are 0.66 ms each (the LM head 5.3 ms); where links, not compute, set the bottleneck, the
fill (which sees compute and memory only) can be far from the bound, and the gap says so.

Only the throughput objective and problems without placement constraints take this path; the
others go to the stage program and CP-SAT whatever their size.
"""

from __future__ import annotations

import heapq
import logging
import time

import numpy as np

from pipeplan.planner.bound.prices import Prices
from pipeplan.planner.ilp_exact import EXACT_TOLERANCE
from pipeplan.planner.plan import Certificate, Plan, SolverDetails, relative_gap
from pipeplan.planner.problem import PlanError, Problem
from pipeplan.planner.simulate import make_plan

__all__ = ["SCALE_CELLS", "at_scale", "solve_at_scale"]

log = logging.getLogger(__name__)

SCALE_CELLS = 100_000  # layers × devices from which a problem takes this path
_RESOLUTION = 2.0**40  # ticks across the total compute of the slowest device: far below any gap shown
_SHRINK = 1.0 - 2.0**-50  # rounding down stays down in floating point (as pipeplan.planner.ilp_ticks does)
_STEPS = 14  # bisection steps: the bottleneck within 2⁻¹⁴ of the interval


def at_scale(problem: Problem) -> bool:
    """Whether ``problem`` takes this path: large, throughput, and no placement constraints."""
    return (problem.n_layers * problem.n_devices >= SCALE_CELLS and problem.options.objective == "throughput"
            and not problem.placement.restricted)


def _speed_classes(times: np.ndarray, capacity: list[int]) -> list[list[int]]:
    """Devices grouped by speed column and capacity."""
    keys: dict[bytes, list[int]] = {}
    for d in range(times.shape[1]):
        keys.setdefault(times[:, d].tobytes() + capacity[d].to_bytes(16, "little"), []).append(d)
    return list(keys.values())


class _Filler:
    """The fill heuristic of the module docstring over one problem; ``backward``: the same from the
    last device back, taking the layers whose consumers are all placed, highest index first."""

    def __init__(self, problem: Problem, times: np.ndarray, backward: bool = False) -> None:
        self.problem, self.times = problem, times
        self.n = problem.n_layers
        self.next = [[] for _ in range(self.n)] if backward else problem.succ
        self.indegree = [0] * self.n
        for u, v in problem.edges:
            if backward:
                self.next[v].append(u)
                self.indegree[u] += 1
            else:
                self.indegree[v] += 1
        self.sign = -1 if backward else 1  # the heap pops the lowest key: the highest index when backward
        kept = problem.options.kept_microbatches
        self.memory = [problem.param_bytes[v] + kept * problem.act_bytes[v] for v in range(self.n)]
        lanes = list(range(min(problem.n_devices, problem.options.max_devices or problem.n_devices)))
        self.lanes = lanes[::-1] if backward else lanes

    def fill(self, limit: float) -> list[int] | None:
        """Layer → device under the bottleneck ``limit``; None when some layer is left over."""
        problem, times, sign = self.problem, self.times, self.sign
        indegree = self.indegree[:]
        ready = [sign * v for v in range(self.n) if indegree[v] == 0]
        heapq.heapify(ready)
        dev_of = [-1] * self.n
        placed = 0
        for d in self.lanes:
            budget, used, workspace, waiting = limit, 0, 0, []
            column = times[:, d]
            while ready:
                key = heapq.heappop(ready)
                v = sign * key
                need = used + self.memory[v] + max(workspace, problem.workspace[v])
                if column[v] > budget or need > problem.capacity[d]:
                    waiting.append(key)
                    continue
                budget -= column[v]
                used += self.memory[v]
                workspace = max(workspace, problem.workspace[v])
                dev_of[v] = d
                placed += 1
                for w in self.next[v]:
                    indegree[w] -= 1
                    if indegree[w] == 0:
                        heapq.heappush(ready, sign * w)
            for key in waiting:
                heapq.heappush(ready, key)
            if placed == self.n:
                return dev_of
        return None


def _bisect(filler: _Filler, bound: float, deadline: float) -> list[int] | None:
    """The fill under the least bottleneck found by bisection from ``bound`` up; None when no
    bottleneck up to twice the slowest device's total places every layer (memory)."""
    times = filler.times
    low, high = bound, max(bound, float(times.max())) * 1.0001
    best = filler.fill(high)
    while best is None:  # memory or granularity: widen until every layer is placed
        if high > times.sum(axis=0).max() * 2:
            return None
        low, high = high, high * 2
        best = filler.fill(high)
    for _ in range(_STEPS):
        if time.perf_counter() > deadline:
            break
        mid = (low + high) / 2
        found = filler.fill(mid)
        if found is None:
            low = mid
        else:
            high, best = mid, found
    return best


def solve_at_scale(problem: Problem, time_limit: float) -> Plan:
    """The fill's best plan with the price bound as its certificate (see the module docstring);
    :class:`PlanError` when no fill places every layer (memory)."""
    started = time.perf_counter()
    problem.check_fits()
    times = np.asarray(problem.time, dtype=np.float64)
    classes = _speed_classes(times, problem.capacity)
    rep = [c[0] for c in classes]
    scale = _RESOLUTION / float(times.sum(axis=0).max() or 1.0)
    ticks = np.floor(times[:, rep] * scale * _SHRINK)
    bound = Prices.from_times(problem, ticks, classes).bound() / scale
    priced = time.perf_counter()

    deadline = started + time_limit
    plans = [make_plan(problem, dev_of, Certificate("ilp", "FEASIBLE", 0.0),
                       order=[problem.devices[d] for d in sorted(set(dev_of))])
             for backward in (False, True)
             if (dev_of := _bisect(_Filler(problem, times, backward), bound, deadline)) is not None]
    if not plans:
        raise PlanError(f"no fill of {problem.graph.model} onto {problem.cluster.name!r} places every "
                        "layer within the devices' memory; add devices or memory")
    plan = min(plans, key=lambda found: found.objective_value)
    objective = plan.objective_value
    bound = min(bound, objective)  # only float noise could put it above a plan
    gap = relative_gap(objective, bound)
    optimal = gap <= EXACT_TOLERANCE
    info = SolverDetails(tick_seconds=1.0 / scale, solution="fill (pipeplan.planner.ilp_scale)",
                         solver_status="not run: too large for CP-SAT (pipeplan.planner.ilp_scale)",
                         stage_bound=None, workers=1, time_limit=time_limit)
    info.passes.append(f"price bound {bound:.6g} s in {priced - started:.2f}s; "
                       f"fill {plan.bottleneck:.6g} s in {time.perf_counter() - priced:.2f}s")
    plan.certificate = Certificate("ilp", "OPTIMAL" if optimal else "FEASIBLE", objective, bound,
                                   0.0 if optimal else gap, time.perf_counter() - started, solver=info)
    log.info("at scale: %s", info.passes[-1])
    return plan
