"""Optimal pipeline partitioning of a layer DAG over heterogeneous, contended devices (CP-SAT).

A solve has three steps; none changes what the optimum is:

1. **Warm start**: the best baseline (:func:`pipeplan.planner.baselines.best_baseline`).
2. **Stage program** (:mod:`pipeplan.planner.ilp_bound`): a dynamic program over the graph's ideals (the
   sets of layers on the first i stages of a plan) gives a lower bound on the bottleneck that no
   plan beats, and plans near it.  It runs in rounds (:func:`_rounds`), cheap ones first (plain
   link charges; then, where links differ between hosts, exact receipts from the host that holds
   each tensor (:mod:`pipeplan.planner.ilp_held`), then link groups, then an assumed bottleneck), and
   stops as soon as the best plan known is within ``gap_limit`` of the bound (equal to it in
   ticks when the limit is 0): that plan is then proven, and returned without CP-SAT.  Each plan
   it finds narrows the candidate stages of the rounds after it.  It gets at most
   ``_PROGRAM_SHARE`` of the time limit; for the latency objective it only bounds the bottleneck
   and offers plans.
3. **CP-SAT** on the model of :mod:`pipeplan.planner.ilp_model` (assignment booleans, a device permutation,
   crossing booleans grouped by link), with ``bound ≤ B ≤ best known`` added and the best plan
   known as a complete hint.
4. **Tie-break** (:mod:`pipeplan.planner.ilp_exact`): among plans of the optimal bottleneck, the one with
   the fewest devices, then the lowest latency.

The user's constraints (pins, keep-together groups, forbidden devices; :mod:`pipeplan.planner.constraints`)
and the per-edge transfer rule enter the CP-SAT model only (:mod:`pipeplan.planner.ilp_constraints`).  Steps
1 and 2 stay as they are: the stage program bounds the unconstrained problem, which is still a bound
since constraints only remove plans, and a plan of theirs is used only if the simulator finds it
valid, so the warm start, the hint and ``B ≤`` the best known are always those of a valid plan.

Problems past ``pipeplan.planner.ilp_scale.SCALE_CELLS`` layers × devices (10,000 operators on 64 devices),
with the throughput objective and no placement constraints, skip all four: a fill heuristic gives
the plan and layer prices the bound (:mod:`pipeplan.planner.ilp_scale`), with the same kind of certificate.

Seconds are scaled to integer ticks, about 2⁻³⁰ of the largest possible stage time, each term
rounded down (:class:`pipeplan.planner.ilp_ticks.Ticks`), so every bound in ticks is a bound in seconds; the
bound, the model and the scoring of warm starts share them.  Every solve reports status, objective,
best bound and gap in seconds and time; OPTIMAL means optimal in seconds within
``EXACT_TOLERANCE`` (gap 0), anything else is FEASIBLE with its gap.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from ortools.sat.python import cp_model

from pipeplan.planner.baselines import best_baseline
from pipeplan.planner.ilp_bound import BoundProgram, StageBound
from pipeplan.planner.ilp_constraints import build_constrained, split_classes
from pipeplan.planner.ilp_exact import EXACT_TOLERANCE, Settings, pass_limit, plan_devices, tie_break
from pipeplan.planner.ilp_scale import at_scale, solve_at_scale
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.plan import Certificate, Plan, SolverDetails, relative_gap
from pipeplan.planner.problem import PlanError, Problem
from pipeplan.planner.simulate import evaluate, make_plan

__all__ = ["SolverOptions", "solve"]

log = logging.getLogger(__name__)

_PROGRAM_SHARE = 0.5  # of the time limit, at most, for the stage program before CP-SAT
# From this many layers × devices, an unconstrained throughput solve runs the stage program before
# the baselines: it starts at the price bound and finds a plan, while the chain DP among the
# baselines is O(n²K) (1.2–2 s of a 70B decoder's solve); the baselines run if it finds none.
_COLD_FIRST_CELLS = 2_000
_HELD_REACH = 1.25  # exact receipts first assume a bottleneck this far above the bound


@dataclass(frozen=True)
class SolverOptions:
    time_limit: float = 10.0  # seconds for the whole solve (CP-SAT gets what the steps before it leave)
    workers: int | None = None  # None → this machine's CPU count
    seed: int = 0
    gap_limit: float = 0.0  # stop when (objective − bound) / objective ≤ this
    warm_start: bool = True  # start from the best baseline (the stage program's plan is always used)
    tie_break: bool = True  # among optimal plans, prefer fewer devices, then lower latency (pipeplan.planner.ilp_exact)


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


def _rounds(refine: bool, throughput: bool,
            now: Callable[[], tuple[int, int | None, StageBound | None]]) -> Iterator[dict[str, Any]]:
    """The stage program's runs, cheap bounds and plans first, then finer ones; ``now()`` says the
    bound, the bound that would prove the best plan known (:func:`_needed`) and the last run's
    result when the next run is due.

    With links that differ between groups of devices (``refine``), the exact receipts of
    :mod:`pipeplan.planner.ilp_held` come right after the plain runs.  They take only the stages whose
    compute and receipts cost at most θ, a little above the bound (few expanded stages do), and
    raise θ while every chain of them costs more than θ, up to the best plan known: the bound is
    then only θ + 1.  A chain that costs at most θ gives the bound, and a larger θ cannot raise it
    (the stages it adds cost more than that chain)."""

    def near_best() -> int | None:  # rules out every plan within the gap limit of the best one known
        needed = now()[1]
        return None if needed is None else needed - 1

    yield {}
    yield {"pessimistic": True}
    if refine and throughput:
        while (top := near_best()) is not None:
            theta = min(top, math.ceil(now()[0] * _HELD_REACH))
            yield {"refined": True, "held": theta}
            found = now()[2]
            if theta >= top or found is None or found.bound <= theta:
                break
        yield {"refined": True}
        yield {"pessimistic": True, "refined": True}
        yield {"refined": True, "likely": True}
    if throughput and (last := near_best()) is not None:
        yield {"refined": refine, "spread": last}


def _needed(reached: int, objective: float, gap_limit: float) -> int:
    """The least bound in ticks that proves a plan of bottleneck ``reached`` ticks (``objective``
    when its seconds are scaled) within the gap limit: in ticks, as CP-SAT tests it, and in
    seconds, as the certificate reports it.  The two differ a little, since each term of the ticks
    is rounded on its own; with no gap limit the ticks decide."""
    if gap_limit <= 0:
        return reached
    return min(reached, max(math.ceil(reached * (1 - gap_limit)), math.ceil(objective * (1 - gap_limit) * (1 + 1e-9))))


def _program_plan(problem: Problem, found: StageBound) -> Plan | None:
    """The stage program's chain as a plan, scored by the simulator; None when it breaks memory
    (the program drops the workspace term) or the latency objective's throughput floor."""
    order = [problem.devices[d] for d in found.order]
    ev = evaluate(problem, found.dev_of, order)
    if ev.violation is not None or ev.bottleneck > problem.max_bottleneck:
        return None
    return make_plan(problem, found.dev_of, Certificate("ilp", "FEASIBLE", 0.0), order=order)


def solve(problem: Problem, options: SolverOptions | None = None) -> Plan:
    """The best plan found within the time limit, with its certificate.

    Raises :class:`PlanError` when no plan fits (naming the shortfall) or none was found in time.
    """
    opts = options or SolverOptions()
    problem.check_fits()
    if at_scale(problem):  # too large for the stage program and CP-SAT
        return solve_at_scale(problem, opts.time_limit)
    started = time.perf_counter()
    throughput = problem.options.objective == "throughput"
    costs = Ticks.of(problem)
    classes = _interchangeable(problem)  # for the stage program, which ignores the constraints (a relaxation)
    model_classes = split_classes(classes, problem.placement)  # for CP-SAT's symmetry breaking and hints

    # -- the best plan known before CP-SAT, and the stage program's bound ----------------------------
    cold_first = (opts.warm_start and throughput and not problem.placement.restricted
                  and problem.n_layers * problem.n_devices >= _COLD_FIRST_CELLS)
    baseline = _baseline(problem) if opts.warm_start and not cold_first else None
    incumbent = baseline
    details: dict[str, Any] = {"workers": opts.workers or os.cpu_count() or 1, "seed": opts.seed,
                               "time_limit": opts.time_limit, "tick_seconds": 1.0 / costs.scale,
                               "warm_start": baseline.method if baseline is not None else None}

    def ticks_of(plan: Plan | None) -> int | None:
        """A plan's bottleneck in ticks, as the model counts it."""
        return None if plan is None else costs.bottleneck(problem, plan_devices(problem, plan)[0])

    reached = ticks_of(incumbent)  # the incumbent's bottleneck in ticks, kept beside it
    # The program may take part of the time: a run that would pass its share is abandoned.
    deadline = started + _PROGRAM_SHARE * opts.time_limit
    program = BoundProgram.of(problem, costs, classes, reached, deadline)
    lower = 0

    def needed() -> int | None:
        """The bound that proves the incumbent (see :func:`_needed`)."""
        if not throughput or incumbent is None or reached is None:
            return None
        return _needed(reached, incumbent.objective_value * costs.scale, opts.gap_limit)

    def gap_closed() -> bool:
        """Whether the incumbent is within the gap limit of the bound."""
        return program is not None and (need := needed()) is not None and lower >= need

    found: StageBound | None = None
    if program is not None:
        details.update(ideals=program.ideals, stage_pairs=program.pairs)
        refine = len(set(program.group_of)) > 1  # links differ between groups of devices (hosts)

        def now() -> tuple[int, int | None, StageBound | None]:
            return lower, needed(), found

        for step in _rounds(refine, throughput, now):
            if gap_closed():
                break
            if reached is not None:
                program.tighten(reached)
            found = program.run(deadline=deadline, **step)
            log.debug("stage program %s: %s after %.2fs", step, found and found.bound, time.perf_counter() - started)
            if found is None:
                if time.perf_counter() > deadline:
                    break
                continue  # too many expanded stages: the bound so far stands
            assumed = step.get("spread", step.get("held"))  # a bottleneck at most this: plans above cost more
            if not step.get("pessimistic") and not step.get("likely"):
                lower = max(lower, found.bound if assumed is None else min(found.bound, assumed + 1))
            candidate = _program_plan(problem, found) if found.dev_of else None
            if candidate is not None and (incumbent is None
                                          or candidate.objective_value < incumbent.objective_value * (1 - 1e-9)):
                incumbent, reached = candidate, ticks_of(candidate)
        details["stage_bound"] = lower / costs.scale
    if cold_first and incumbent is None:  # the program found no plan: the baselines' turn
        baseline = incumbent = _baseline(problem)
        reached = ticks_of(incumbent)
        details["warm_start"] = baseline.method if baseline is not None else None
    log.info("stage program: bound %s ticks (%s ideals, %s stages) after %.2fs", lower,
             program.ideals if program else "too many", program.pairs if program else "-",
             time.perf_counter() - started)

    def finish(plan: Plan, bound: float, source: str | None) -> Plan:
        """``plan`` with the certificate of this solve in seconds, after the tie-break
        (:mod:`pipeplan.planner.ilp_exact`); ``source``: where a plan CP-SAT did not find came from."""
        info = SolverDetails(**details, solution=source or "cp-sat")
        bound = max(bound, problem.objective_lower_bound(), lower / costs.scale if throughput else 0.0)
        settings = Settings(0.0, info.workers, opts.seed)

        def limit() -> Settings:
            return replace(settings, time_limit=pass_limit(opts.time_limit, time.perf_counter() - started))

        objective = plan.objective_value
        optimal = relative_gap(objective, bound) <= EXACT_TOLERANCE
        if optimal and opts.tie_break and throughput and len(plan.stages) > 1 and limit().time_limit > 0:
            better, note = tie_break(problem, plan, model_classes, limit())
            info.passes.append(note)
            if better is not plan:
                plan, info.solution = better, info.solution + "; tie-break"
                objective = plan.objective_value
        bound = min(bound, objective)  # a valid bound; only float noise can put it above a plan
        plan.certificate = Certificate("ilp", "OPTIMAL" if optimal else "FEASIBLE", objective, bound,
                                       0.0 if optimal else relative_gap(objective, bound),
                                       time.perf_counter() - started, solver=info)
        return plan

    def origin(plan: Plan) -> str:
        return f"warm start ({plan.method})" if plan is baseline else "stage program"

    # -- proven before CP-SAT? -------------------------------------------------------------------------
    if incumbent is not None and gap_closed():
        details["solver_status"] = "not run: the stage program's bound proves the plan"
        return finish(incumbent, lower / costs.scale, origin(incumbent))

    # -- CP-SAT ------------------------------------------------------------------------------------------
    built = build_constrained(problem, costs, model_classes, lower, reached)
    if incumbent is not None:
        built.hint(problem, costs, model_classes, *plan_devices(problem, incumbent))
    solver = cp_model.CpSolver()
    spent = time.perf_counter() - started
    solver.parameters.max_time_in_seconds = max(opts.time_limit - spent, 0.1 * opts.time_limit)
    solver.parameters.num_workers = details["workers"]
    solver.parameters.random_seed = opts.seed
    solver.parameters.relative_gap_limit = opts.gap_limit
    status = solver.solve(built.model)
    name = solver.status_name(status)
    log.info("CP-SAT %s in %.2fs: objective %s, bound %s", name, solver.wall_time, solver.objective_value,
             solver.best_objective_bound)
    details.update(solver_status=name, variables=len(built.model.proto.variables),
                   constraints=len(built.model.proto.constraints), cp_sat_seconds=solver.wall_time)

    # -- read the status -----------------------------------------------------------------------------------
    if status == cp_model.INFEASIBLE:
        rules = " together with the pins, keep_together and forbid_devices" if problem.placement.restricted else ""
        raise PlanError(f"no plan of {problem.graph.model} fits on {problem.cluster.name!r}: every split "
                        f"breaks a device's memory capacity (or max_devices){rules}; add devices or memory, "
                        "lower the microbatches in flight, or relax the constraints")
    solved = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    # CP-SAT's bound is valid in seconds: every term is rounded down to ticks (pipeplan.planner.ilp_ticks).
    bound = solver.best_objective_bound / costs.scale if solved else 0.0
    plan: Plan | None = None
    if solved:
        dev_of, used_devices = built.read(solver)
        plan = make_plan(problem, dev_of, Certificate("ilp", name, 0.0),
                         order=[problem.devices[d] for d in used_devices])
    # CP-SAT works on rounded ticks and may stop before it improves on its hint: never hand back
    # something worse than the best plan known before it, but say where the plan came from.
    if incumbent is not None and (plan is None or incumbent.objective_value < plan.objective_value * (1 - 1e-9)):
        return finish(incumbent, bound, origin(incumbent) + "; CP-SAT found nothing better in time")
    if plan is None:
        raise PlanError(f"CP-SAT found no plan within {opts.time_limit:g}s (status {name}); "
                        "raise the time limit")
    return finish(plan, bound, None)


def _baseline(problem: Problem) -> Plan | None:
    """The best baseline plan (the warm start), or None when none fits."""
    try:
        return best_baseline(problem)
    except PlanError as exc:
        log.info("no baseline fits, solving cold: %s", exc)
        return None
