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
part of the answer's time.  Where CP-SAT ran, its solved model is reused (``B ≤`` added, objective
and hint replaced).  Otherwise a new model is built only if :func:`build_estimate` says that takes at
most ``_BUILD_SHARE`` of its time, else it is skipped and its note says so: building the model was
the larger part (7B decoder, leaf, 4 devices: 0.27–0.5 s to build, 0.06–0.14 s to hint, then 0.8–2.2 s
of presolve before CP-SAT reports even its hint; 8 devices 1–2.2 s to build), so on such graphs the
pass took 1–5 s, past its budget, and returned UNKNOWN.  What it returns is re-scored by the simulator and
kept only if its bottleneck is no worse in seconds and it wins on (devices, latency); with too little
time it may keep a plan that a longer search would replace (its note says FEASIBLE then).
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from ortools.sat.python import cp_model

from pipeplan.planner.ilp_constraints import ConstrainedModel, build_constrained
from pipeplan.planner.ilp_model import model_size
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import Problem
from pipeplan.planner.simulate import make_plan

__all__ = ["EXACT_TOLERANCE", "Settings", "build_estimate", "pass_limit", "plan_devices", "run_model", "tie_break"]

log = logging.getLogger(__name__)

EXACT_TOLERANCE = 1e-5  # relative gap in seconds at or below which a plan counts as optimal
_FLOAT_NOISE = 1e-12  # relative: two simulator scores this close are the same bottleneck
_TIE_SHARE = 0.1  # of the time limit, at most, for the tie-break
_TIE_RATIO = 1.0  # × the seconds the solve took before it, at most, for the tie-break …
_TIE_FLOOR = 0.5  # … but at least this many seconds (small problems finish their tie-break in far less)
_BUILD_SHARE = 0.5  # of its time, at most, for building a new model: the search needs the rest
_PROBE_TERMS = 2_000  # terms, at most, of the small model timed to estimate the build (build_estimate)
# Seconds per term of model_size when building and hinting the tie-break's model, over those of the
# probe: 0.7–3.2, median 2.0, on 16 problems (gpt2 leaf, llama-7b leaf, random DAGs of 200 and 1,000
# layers; 4 and 8 devices; overlap and serial) on the 2-core development VM (benchmarks/README.md)
_PROBE_SCALE = 2.0
_SLOW_TERM = 1.3e-4  # seconds per term of model_size, the most measured there (at load 4 on 2 cores)


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


def tie_break(problem: Problem, plan: Plan, classes: list[list[int]], settings: Settings,
              solved: ConstrainedModel | None = None, costs: Ticks | None = None) -> tuple[Plan, str]:
    """Among the plans whose bottleneck is no worse than ``plan``'s and that keep the problem's
    constraints, one with the fewest devices, then the lowest latency (found within the time
    limit), and what happened; ``classes`` as split by :func:`pipeplan.planner.ilp_constraints.split_classes`.

    ``solved``: the model CP-SAT just solved (built with ``costs``), retargeted instead of building
    another.  Without it a model is built only if :func:`build_estimate` says that takes at most
    ``_BUILD_SHARE`` of ``settings.time_limit``; else the pass is skipped and its note says why.
    """
    started = time.perf_counter()
    fine = costs or Ticks.of(problem)  # the resolution leaves room for BIG (pipeplan.planner.ilp_ticks)
    upper = fine.ceiling(plan.bottleneck)
    if solved is not None:
        built, how = solved, "the solved model"
        built.model.add(built.bottleneck <= upper)
        built.model.clear_hints()
    else:
        size, estimate = build_estimate(problem, fine)
        if estimate > _BUILD_SHARE * settings.time_limit:
            note = (f"tie-break: skipped: building its model ({size:,} terms) would take about {estimate:.2f}s "
                    f"of its {settings.time_limit:.2f}s; {len(plan.stages)} devices, latency {plan.latency:.6g} s kept")
            log.info("%s", note)
            return plan, note
        built, how = build_constrained(problem, fine, classes, upper=upper, count_used=True), "a new model"
    used = built.count_used()
    k, m = problem.n_devices, problem.options.microbatches
    latency = sum(built.stage) + (m - 1) * built.bottleneck
    big = (k + m) * 3 * fine.horizon + 1  # more than any latency in ticks: devices come first
    built.model.minimize(big * sum(used) + latency)
    built.hint(problem, fine, classes, *plan_devices(problem, plan))
    prepared = time.perf_counter() - started
    solver = _solver(replace(settings, time_limit=settings.time_limit - prepared))
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
    note = (f"tie-break: {name} in {time.perf_counter() - started:.2f}s ({how} in {prepared:.2f}s, "
            f"search {solver.wall_time:.2f}s), {len(plan.stages)} → {len(best.stages)} devices, "
            f"latency {plan.latency:.6g} → {best.latency:.6g} s")
    log.info("%s", note)
    return best, note


def build_estimate(problem: Problem, costs: Ticks) -> tuple[int, float]:
    """The size of the tie-break's model (:func:`pipeplan.planner.ilp_model.model_size`) and the
    seconds building and hinting it should take on this machine now: the size times the seconds per
    term of a small model built just before (a tenth of the size, within ``_PROBE_TERMS`` / 4 …
    ``_PROBE_TERMS`` terms, the faster of two runs), times ``_PROBE_SCALE``; a loaded or slow
    machine estimates more.  A model small enough to build in time at ``_SLOW_TERM`` is not probed."""
    size = model_size(problem, costs)
    if size * _SLOW_TERM <= _BUILD_SHARE * _TIE_FLOOR:  # small enough for any machine: no probe
        return size, size * _SLOW_TERM
    # a probe of at least _PROBE_TERMS / 4 terms, the faster of two: a short one measures noise
    probe = max(_PROBE_TERMS // 4, min(_PROBE_TERMS, size // 10))
    return size, size * min(_seconds_per_term(probe), _seconds_per_term(probe)) * _PROBE_SCALE


def _seconds_per_term(terms: int) -> float:
    """Seconds per term of building ``terms`` terms of a model as :func:`pipeplan.planner.ilp_model.build_model`
    does (booleans, clauses and implications between them, hints), timed now."""
    started = time.perf_counter()
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"x{i}") for i in range(max(2, terms // 4))]
    for a, b in itertools.pairwise(x):
        y = model.new_bool_var("y")
        model.add(y >= a + b - 1)
        model.add_implication(a, y)
        model.add_hint(y, 1)
    return (time.perf_counter() - started) / max(1, 4 * (len(x) - 1))


def pass_limit(time_limit: float, spent: float) -> float:
    """Seconds the tie-break may take: what is left of the limit, at most ``_TIE_SHARE`` of it and at
    most ``_TIE_RATIO`` × ``spent`` (the solve so far), though never less than ``_TIE_FLOOR`` for that.

    >>> pass_limit(10.0, 0.2), pass_limit(10.0, 0.8), pass_limit(10.0, 5.0), pass_limit(10.0, 9.5)
    (0.5, 0.8, 1.0, 0.5)
    """
    return max(0.0, min(time_limit - spent, _TIE_SHARE * time_limit, max(_TIE_FLOOR, _TIE_RATIO * spent)))
