"""Certificates exact in seconds, and the tie-break among plans of equal bottleneck.

The search of :mod:`pipeplan.planner.ilp` works in integer ticks, each cost term rounded down to a tick of
about 2⁻³⁰ of the largest stage time (:mod:`pipeplan.planner.ilp_ticks`).  Its bounds are therefore valid in
seconds, and :func:`pipeplan.planner.ilp.solve` reports the gap in seconds: the plan's bottleneck (or latency)
as the simulator scores it against the best bound.  A plan is ``OPTIMAL`` only when that gap is at
most ``EXACT_TOLERANCE`` (10⁻⁵ relative: no valid plan is faster by more than that; the reported gap
is then 0, and ``best_bound`` keeps the exact residual), else ``FEASIBLE`` with its gap, even where
CP-SAT said OPTIMAL in ticks.  Why 10⁻⁵: a tick-optimal plan may lose up to a tick per term of its
bottleneck stage; on the zoo's leaf graphs (150–175 layers) that is 10⁻⁸–1.2·10⁻⁶ of the bottleneck.

**Tie-break** (:func:`tie_break`, throughput objective, ``SolverOptions.tie_break``): among the plans
whose bottleneck is no worse than the optimal one's, prefer fewer devices, then lower latency.  One
CP-SAT solve of the lexicographic objective ``BIG · devices + Σ stage + (M − 1) · B`` (``BIG`` more
than any latency in ticks) under ``B ≤`` the optimal bottleneck, from the optimal plan as a complete
hint, within ``_TIE_SHARE`` of the time limit and no longer than the solve before it took
(``_TIE_RATIO``, at least ``_TIE_FLOOR``): it refines a proven plan, so it should not be the larger
part of the answer's time (on 7B–70B decoders it took 0.5–2.4 s after a 0.1–1 s solve and changed
no plan).  What it returns is re-scored by the simulator and
kept only if its bottleneck is no worse in seconds and it wins on (devices, latency); with too little
time it may keep a plan that a longer search would replace (its note says FEASIBLE then).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from ortools.sat.python import cp_model

from pipeplan.planner.ilp_constraints import build_constrained
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import Problem
from pipeplan.planner.simulate import make_plan

__all__ = ["EXACT_TOLERANCE", "Settings", "pass_limit", "plan_devices", "run_model", "tie_break"]

log = logging.getLogger(__name__)

EXACT_TOLERANCE = 1e-5  # relative gap in seconds at or below which a plan counts as optimal
_FLOAT_NOISE = 1e-12  # relative: two simulator scores this close are the same bottleneck
_TIE_SHARE = 0.1  # of the time limit, at most, for the tie-break
_TIE_RATIO = 1.0  # × the seconds the solve took before it, at most, for the tie-break …
_TIE_FLOOR = 0.5  # … but at least this many seconds (small problems finish their tie-break in far less)


@dataclass(frozen=True)
class Settings:
    """How to run a pass: seconds it may take, CP-SAT threads and seed."""

    time_limit: float
    workers: int
    seed: int


def plan_devices(problem: Problem, plan: Plan) -> tuple[list[int], list[int]]:
    """A plan's layer → device index, and its used devices in pipeline order."""
    index = {d: i for i, d in enumerate(problem.devices)}
    owner = plan.assignment()
    return [index[owner[name]] for name in problem.layers], [index[d] for d in plan.device_order()]


def _solver(settings: Settings) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(settings.time_limit, 0.01)
    solver.parameters.num_workers = settings.workers
    solver.parameters.random_seed = settings.seed
    return solver


def run_model(model: cp_model.CpModel, settings: Settings, label: str) -> tuple[cp_model.CpSolver, Any, dict[str, Any]]:
    """Solve ``model`` (a planner built on the ILP's model: re-planning, harvesting), log it as
    ``label``, and the solver details every such solve records (:class:`planner.plan.SolverDetails`)."""
    solver = _solver(settings)
    status = solver.solve(model)
    name = solver.status_name(status)
    log.info("%s CP-SAT %s in %.2fs: objective %s, bound %s", label, name, solver.wall_time, solver.objective_value,
             solver.best_objective_bound)
    return solver, status, {"solver_status": name, "variables": len(model.proto.variables),
                            "constraints": len(model.proto.constraints), "cp_sat_seconds": solver.wall_time}


def tie_break(problem: Problem, plan: Plan, classes: list[list[int]], settings: Settings) -> tuple[Plan, str]:
    """Among the plans whose bottleneck is no worse than ``plan``'s and that keep the problem's
    constraints, one with the fewest devices, then the lowest latency (found within the time
    limit), and what happened; ``classes`` as split by :func:`pipeplan.planner.ilp_constraints.split_classes`."""
    started = time.perf_counter()
    fine = Ticks.of(problem)  # the resolution leaves room for BIG (pipeplan.planner.ilp_ticks)
    k, m = problem.n_devices, problem.options.microbatches
    built = build_constrained(problem, fine, classes, upper=fine.ceiling(plan.bottleneck), count_used=True)
    assert built.used is not None
    latency = sum(built.stage) + (m - 1) * built.bottleneck
    big = (k + m) * 3 * fine.horizon + 1  # more than any latency in ticks: devices come first
    built.model.minimize(big * sum(built.used) + latency)
    built.hint(problem, fine, classes, *plan_devices(problem, plan))
    solver = _solver(settings)
    status = solver.solve(built.model)
    name = solver.status_name(status)
    best = plan
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        dev_of, order = built.read(solver)
        found = make_plan(problem, dev_of, Certificate("ilp", name, 0.0), order=[problem.devices[d] for d in order])
        # The fine ticks may admit a plan a hair slower in seconds: the simulator decides.
        no_worse = found.bottleneck <= plan.bottleneck * (1 + _FLOAT_NOISE)
        if no_worse and (len(found.stages), found.latency) < (len(plan.stages), plan.latency * (1 - _FLOAT_NOISE)):
            best = found
    note = (f"tie-break: {name} in {time.perf_counter() - started:.2f}s, "
            f"{len(plan.stages)} → {len(best.stages)} devices, latency {plan.latency:.6g} → {best.latency:.6g} s")
    log.info("%s", note)
    return best, note


def pass_limit(time_limit: float, spent: float) -> float:
    """Seconds the tie-break may take: what is left of the limit, at most ``_TIE_SHARE`` of it and at
    most ``_TIE_RATIO`` × ``spent`` (the solve so far), though never less than ``_TIE_FLOOR`` for that.

    >>> pass_limit(10.0, 0.2), pass_limit(10.0, 0.8), pass_limit(10.0, 5.0), pass_limit(10.0, 9.5)
    (0.5, 0.8, 1.0, 0.5)
    """
    return max(0.0, min(time_limit - spent, _TIE_SHARE * time_limit, max(_TIE_FLOOR, _TIE_RATIO * spent)))
