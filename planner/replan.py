"""Re-planning: from the plan serving now to the one that minimises ``B + M / N`` on a new cluster.

B is a plan's bottleneck on the new cluster (the simulator's), M the seconds its migration takes
from the current plan and N the horizon in microbatches (:mod:`pipeplan.planner.migration`).  Keeping the
current plan costs no migration, so it wins whenever no move pays over the horizon; the result then
says ``stay`` and gives both figures.

A solve has four steps:

1. **Stay**: the current assignment in its device order, scored on the new problem; it cannot stay
   when one of its devices has left, or when it breaks memory or a constraint there.
2. **Fresh**: :func:`pipeplan.planner.ilp.solve` on the new problem (``_FRESH_SHARE`` of the time limit): the
   plan of least bottleneck, migration ignored, and its certificate's ``best_bound``, which no
   plan's bottleneck beats.  Every plan's migration is at least :meth:`MigrationCost.lower_bound`
   (state on departed devices must be reloaded), so ``bound = best_bound + that / N``.
3. **CP-SAT**, unless the better of the two is within ``EXACT_TOLERANCE`` of that bound: the model
   of :mod:`pipeplan.planner.ilp_constraints` with the migration terms of :mod:`pipeplan.planner.replan_model`,
   minimising ``B + M`` in ticks, from the better plan as a complete hint, ``B + M ≤`` it.
4. **Choice**: the best of the three by :func:`score`, in seconds; staying wins ties (a move that
   gains no more than ``EXACT_TOLERANCE`` is not worth making).

The certificate is the ILP's (``docs/planner.md``) for this objective: ``objective`` and
``best_bound`` are seconds of ``B + M / N``, OPTIMAL only when their gap is within
``EXACT_TOLERANCE``.  Only the throughput objective is re-planned.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from ortools.sat.python import cp_model

from pipeplan.planner.ilp import SolverOptions, interchangeable, solve
from pipeplan.planner.ilp_constraints import build_constrained
from pipeplan.planner.ilp_exact import EXACT_TOLERANCE, Settings, plan_devices, run_model
from pipeplan.planner.migration import DEFAULT_RELOAD, Alternative, Horizon, Migration, MigrationCost, Reload
from pipeplan.planner.plan import Certificate, Plan, SolverDetails, relative_gap
from pipeplan.planner.problem import PlanError, Problem
from pipeplan.planner.replan_model import add_migration, migration_classes, migration_ticks
from pipeplan.planner.simulate import Assignment, evaluate, make_plan

__all__ = ["ReplanScore", "replan", "score"]

log = logging.getLogger(__name__)

_FRESH_SHARE = 0.4  # of the time limit, at most, for the plan of least bottleneck


class ReplanScore(NamedTuple):
    """A plan's figures under the re-planning objective, in seconds."""

    bottleneck: float  # the simulator's, on the new cluster
    migration: float  # seconds the move from the current plan takes
    objective: float  # bottleneck + migration / horizon microbatches
    violation: str | None  # why the plan is invalid (None: valid)


def score(problem: Problem, cost: MigrationCost, microbatches: float, assignment: Assignment,
          order: Sequence[str] | None = None) -> ReplanScore:
    """Score a plan as re-planning does: :func:`pipeplan.planner.simulate.evaluate` plus the migration, e.g.
    ``score(problem, MigrationCost(problem, current.assignment()), 1000, {"l0": "d1", "l1": "d2"})``."""
    ev = evaluate(problem, assignment, order)
    index = {d: i for i, d in enumerate(problem.devices)}
    owner = {s.device: s.layers for s in ev.stages}
    dev_of = [0] * problem.n_layers
    for device, layers in owner.items():
        for name in layers:
            dev_of[problem.index[name]] = index[device]
    seconds = cost.seconds(dev_of)
    return ReplanScore(ev.bottleneck, seconds, ev.bottleneck + seconds / microbatches, ev.violation)


@dataclass
class _Candidate:
    plan: Plan
    score: ReplanScore
    source: str  # "stay", "fresh" or "cp-sat"


def _stay(problem: Problem, cost: MigrationCost, microbatches: float,
          current: Plan) -> tuple[_Candidate | None, str | None]:
    """The current plan on the new cluster, or why it cannot stay."""
    if cost.departed:
        return None, f"its device{'s' if len(cost.departed) > 1 else ''} {', '.join(cost.departed)} left the cluster"
    found = score(problem, cost, microbatches, cost.current, current.device_order())
    if found.violation is not None:
        return None, found.violation
    plan = make_plan(problem, cost.current, Certificate("replan", "FEASIBLE", 0.0), order=current.device_order())
    return _Candidate(plan, found, "stay"), None


def _candidate(problem: Problem, cost: MigrationCost, microbatches: float, plan: Plan, source: str) -> _Candidate:
    return _Candidate(plan, score(problem, cost, microbatches, plan.assignment(), plan.device_order()), source)


def _alternative(found: ReplanScore) -> Alternative:
    return Alternative(found.bottleneck, found.migration, found.objective)


def _break_even(stay: ReplanScore | None, other: ReplanScore) -> float | None:
    """The horizon (microbatches) from which moving to ``other`` beats staying: M / (B_stay − B)."""
    if stay is None or other.bottleneck >= stay.bottleneck:
        return None
    return other.migration / (stay.bottleneck - other.bottleneck)


def replan(problem: Problem, current: Plan, horizon: Horizon | str, *, reload: Reload = DEFAULT_RELOAD,
           options: SolverOptions | None = None) -> Plan:
    """The plan for ``problem`` (the new cluster state) that minimises bottleneck + migration / N
    from ``current``, with ``plan.migration`` saying what moves and why, and its certificate.

    ``horizon``: :class:`pipeplan.planner.migration.Horizon` or its text (``"10m"``, ``"5000mb"``);
    ``reload``: where the state of layers whose device left comes from.  For example
    ``replan(Problem(graph, new_cluster), Plan.load("current.json"), "10m").migration.decision``.
    """
    opts = options or SolverOptions()
    started = time.perf_counter()
    if problem.options.objective != "throughput":
        raise PlanError("re-planning minimises the bottleneck plus the migration: use objective='throughput'")
    span = Horizon.parse(horizon) if isinstance(horizon, str) else horizon
    if not isinstance(span, Horizon):
        raise PlanError(f"horizon must be a Horizon or text such as '10m' or '5000mb', got {horizon!r}")
    cost = MigrationCost(problem, current.assignment(), reload)
    n = span.in_microbatches(current.bottleneck)

    # -- stay, and the plan of least bottleneck -------------------------------------------------------
    stay, stay_invalid = _stay(problem, cost, n, current)
    fresh_plan = solve(problem, replace(opts, time_limit=_FRESH_SHARE * opts.time_limit))
    fresh = _candidate(problem, cost, n, fresh_plan, "fresh")
    fresh_bound = fresh_plan.certificate.best_bound
    bound = (fresh_bound if fresh_bound is not None else problem.lower_bound()) + cost.lower_bound() / n
    candidates = [c for c in (stay, fresh) if c is not None]
    best = min(candidates, key=lambda c: c.score.objective)
    details: dict[str, Any] = {"workers": opts.workers or os.cpu_count() or 1, "seed": opts.seed,
                               "time_limit": opts.time_limit, "tick_seconds": 0.0,
                               "warm_start": best.source,
                               "passes": [f"fresh: {fresh_plan.certificate.status} bottleneck "
                                          f"{fresh.score.bottleneck:.6g} s, bound {fresh_bound}"]}

    # -- CP-SAT on bottleneck + migration, unless the bound proves the best plan known ----------------
    if relative_gap(best.score.objective, bound) <= EXACT_TOLERANCE:
        details["solver_status"] = "not run: the fresh plan's bound proves the plan"
    else:
        found, cp_bound = _search(problem, cost, n, best, opts, started, details)
        bound = max(bound, cp_bound)
        if found is not None:
            candidates.append(found)

    # -- choose: the best in seconds, staying on ties --------------------------------------------------
    chosen = min(candidates, key=lambda c: c.score.objective)
    if stay is not None and stay.score.objective <= chosen.score.objective * (1 + EXACT_TOLERANCE):
        chosen = stay
    objective = chosen.score.objective
    bound = min(bound, objective)  # a valid bound; only float noise can put it above a plan
    optimal = relative_gap(objective, bound) <= EXACT_TOLERANCE
    plan = chosen.plan
    plan.certificate = Certificate("replan", "OPTIMAL" if optimal else "FEASIBLE", objective, bound,
                                   0.0 if optimal else relative_gap(objective, bound),
                                   time.perf_counter() - started, solver=SolverDetails(**details,
                                                                                       solution=chosen.source))
    dev_of = plan_devices(problem, plan)[0]
    staying = plan.assignment() == cost.current
    compared = chosen if not staying else fresh
    channels = cost.channels(dev_of)
    plan.migration = Migration(
        decision="stay" if staying else "move", horizon_microbatches=n, horizon_seconds=span.seconds,
        seconds=chosen.score.migration, bytes=sum(c.bytes for c in channels), model_bytes=cost.model_bytes,
        objective=objective, reload=reload, moves=cost.moves(dev_of), channels=channels,
        stay=_alternative(stay.score) if stay is not None else None, stay_invalid=stay_invalid,
        fresh=_alternative(fresh.score),
        break_even_microbatches=_break_even(stay.score if stay is not None else None, compared.score),
        compared="fresh" if staying else "this plan")
    log.info("replan: %s, objective %.6g s (bound %.6g), %d moves", plan.migration.decision, objective, bound,
             len(plan.migration.moves))
    return plan


def _search(problem: Problem, cost: MigrationCost, n: float, best: _Candidate, opts: SolverOptions,
            started: float, details: dict[str, Any]) -> tuple[_Candidate | None, float]:
    """CP-SAT on ``B + M`` from ``best``: its plan (None when it found none) and its bound in seconds."""
    costs = migration_ticks(problem, cost, n)
    classes = migration_classes(problem, cost, interchangeable(problem))
    upper = costs.ceiling(best.score.objective)
    built = build_constrained(problem, costs, classes, 0, upper)
    terms = add_migration(built, problem, cost, costs, n, upper)
    dev_of, order = plan_devices(problem, best.plan)
    built.hint(problem, costs, classes, dev_of, order)
    terms.hint(built, cost, costs, n)
    left = max(opts.time_limit - (time.perf_counter() - started), 0.1 * opts.time_limit)
    solver, status, ran = run_model(built.model, Settings(left, details["workers"], opts.seed), "replan")
    name = ran["solver_status"]
    details.update(tick_seconds=1.0 / costs.scale, **ran)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        # INFEASIBLE cannot be proven with the hinted plan inside B + M ≤ upper; UNKNOWN: out of time
        return None, 0.0
    # Every term is rounded down to ticks, so the bound in ticks is a bound in seconds.
    bound = solver.best_objective_bound / costs.scale
    found_dev, found_order = built.read(solver)
    plan = make_plan(problem, found_dev, Certificate("replan", name, 0.0),
                     order=[problem.devices[d] for d in found_order])
    return _candidate(problem, cost, n, plan, "cp-sat"), bound
