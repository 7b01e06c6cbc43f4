"""Plan with borrowed memory: the solve, its certificate, and the plan's ``harvest`` section.

:func:`solve_harvest` has three steps:

1. **Memory relaxed**: :func:`pipeplan.planner.ilp.solve` on the problem with memory unconstrained
   (``_RELAXED_SHARE`` of the time limit).  Its ``best_bound`` is a valid bound for every plan that
   borrows: a borrowing plan's assignment is a plan of the relaxed problem, and its stage times are
   at least the relaxed ones (fetches only add).  The no-borrowing bound of the stage program is
   *not* (borrowing can beat it), which is why it is not used.  When the relaxed plan also fits
   without borrowing, it is optimal here too, and the solve stops.
2. **CP-SAT** on the ILP's model with the terms of :mod:`pipeplan.planner.harvest_model`, from the best
   baseline that fits without borrowing as a complete hint (when one does).
3. **Trim**: loans the plan does not need for memory are returned home, one by one, largest fetch
   first; that never raises a stage time (fetches only fall), so the bound still holds.

The plan is scored by :func:`pipeplan.planner.harvest_score.score`, in seconds; its certificate means what
the ILP's does (``docs/planner.md``): ``best_bound`` the larger of the relaxed bound and CP-SAT's
(in ticks rounded down, so valid in seconds), OPTIMAL only within ``EXACT_TOLERANCE``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from typing import Any

from ortools.sat.python import cp_model

from pipeplan.planner.baselines import best_baseline
from pipeplan.planner.harvest import Harvest, HarvestOptions
from pipeplan.planner.harvest_model import add_harvest, harvest_classes, harvest_ticks
from pipeplan.planner.harvest_score import Lending, score
from pipeplan.planner.ilp import SolverOptions, interchangeable, solve
from pipeplan.planner.ilp_constraints import build_constrained, split_classes
from pipeplan.planner.ilp_exact import EXACT_TOLERANCE, Settings, plan_devices, run_model
from pipeplan.planner.plan import Certificate, Plan, SolverDetails, relative_gap
from pipeplan.planner.problem import PlanError, Problem
from pipeplan.planner.simulate import make_plan

__all__ = ["harvest_plan", "solve_harvest"]

log = logging.getLogger(__name__)

_RELAXED_SHARE = 0.4  # of the time limit, at most, for the plan with memory unconstrained


def harvest_plan(lending: Lending, dev_of: Any, home: Any, certificate: Certificate,
                 order: list[str] | None = None, without: float | None = None, stashes: Any = ()) -> Plan:
    """A :class:`Plan` of an assignment with loans (and stashes), scored by
    :func:`pipeplan.planner.harvest_score.score` (which takes the same forms); an invalid one raises
    :class:`PlanError` naming why."""
    found = score(lending, dev_of, home, order, stashes)
    if found.violation is not None:
        raise PlanError(f"{certificate.method} produced an invalid plan: {found.violation}")
    plan = make_plan(lending.relaxed(), dev_of, certificate, order)  # structure and fields; times below
    plan.stages, plan.bottleneck, plan.latency = found.stages, found.bottleneck, found.latency
    plan.harvest = Harvest(lending.options, found.loans, found.channels, found.fetches, found.memory, without,
                           found.stashes)
    return plan


def _trim(lending: Lending, dev_of: list[int], home: list[int | None], order: list[str],
          stash: list[int | None]) -> tuple[list[int | None], list[int | None]]:
    """``home`` with every loan the plan does not need for memory returned, largest fetch first (a
    stage left with no loans stops stashing), then every stash it does not need dropped."""
    problem = lending.problem
    home, stash = list(home), [s if any(dev_of[v] == d and h is not None for v, h in enumerate(home)) else None
                               for d, s in enumerate(stash)]
    loaned = sorted((v for v, h in enumerate(home) if h is not None), key=lambda v: -problem.param_bytes[v])
    for v in loaned:
        trial = list(home)
        trial[v] = None
        borrows = any(dev_of[u] == dev_of[v] and h is not None for u, h in enumerate(trial))
        trial_stash = [s if d != dev_of[v] or borrows else None for d, s in enumerate(stash)]
        if score(lending, dev_of, trial, order, trial_stash).violation is None:
            home, stash = trial, trial_stash
    for d in [d for d, s in enumerate(stash) if s is not None]:
        trial_stash = list(stash)
        trial_stash[d] = None
        if score(lending, dev_of, home, order, trial_stash).violation is None:
            stash = trial_stash
    return home, stash


def solve_harvest(problem: Problem, harvest: HarvestOptions | None = None,
                  options: SolverOptions | None = None) -> Plan:
    """The best plan when stages may keep weights in other devices' or their host's spare memory,
    with ``plan.harvest`` saying who lends what to whom, and its certificate.

    >>> plan = solve_harvest(problem, HarvestOptions(host_memory="64GiB"))  # doctest: +SKIP
    >>> [(loan.layer, loan.lender) for loan in plan.harvest.loans]           # doctest: +SKIP
    """
    opts = options or SolverOptions()
    started = time.perf_counter()
    lending = Lending(problem, harvest or HarvestOptions())
    real, relaxed = lending.problem, lending.relaxed()
    _check_total(lending)
    workers = opts.workers or os.cpu_count() or 1

    # -- memory relaxed: a bound for every borrowing plan, and maybe the plan ---------------------------
    loose = solve(relaxed, replace(opts, time_limit=_RELAXED_SHARE * opts.time_limit))
    bound = max(loose.certificate.best_bound or 0.0, real.objective_lower_bound())
    dev_of = plan_devices(relaxed, loose)[0]
    no_loans: list[int | None] = [None] * real.n_layers
    fits = score(lending, dev_of, no_loans, loose.device_order())
    without: float | None = fits.objective if fits.violation is None else None
    details: dict[str, Any] = {"workers": workers, "seed": opts.seed, "time_limit": opts.time_limit,
                               "passes": [f"memory relaxed: {loose.certificate.status} {loose.objective_value:.6g} s, "
                                          f"bound {loose.certificate.best_bound}"]}
    if fits.violation is None:
        details.update(tick_seconds=0.0, solver_status="not run: the memory-relaxed plan fits without borrowing")
        return _finish(lending, dev_of, no_loans, loose.device_order(), bound, "memory relaxed", details,
                       started, without)

    # -- CP-SAT with loans ----------------------------------------------------------------------------
    baseline = _fitting_baseline(lending)
    if baseline is not None:
        without = baseline.objective_value
    costs = harvest_ticks(lending)
    classes = harvest_classes(lending, split_classes(interchangeable(real), real.placement))
    built = build_constrained(relaxed, costs, classes)
    terms = add_harvest(built, lending, costs)
    if baseline is not None:
        built.hint(real, costs, classes, *plan_devices(real, baseline))
        terms.hint_no_loans(built.model)
    left = max(opts.time_limit - (time.perf_counter() - started), 0.1 * opts.time_limit)
    solver, status, ran = run_model(built.model, Settings(left, workers, opts.seed), "harvest")
    name = ran["solver_status"]
    details.update(tick_seconds=1.0 / costs.scale, **ran, warm_start=baseline.method if baseline is not None else None)
    if status == cp_model.INFEASIBLE:
        batch = (f"; with fetch='batch' a borrowing stage holds the live activations of all "
                 f"{real.options.microbatches} microbatches at once (fetch='microbatch' holds one"
                 + (", stash=True lets a lender hold all but one" if not lending.options.stash else
                    "; with stash=True the lenders hold all but one, within their own spare memory") + ")"
                 if lending.options.batched else "")
        raise PlanError(f"{real.graph.model} does not fit on {real.cluster.name!r} even with harvesting: no "
                        "assignment keeps every device, lender and host within its memory (and the constraints)"
                        f"{batch}; add lenders, host_memory or devices")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if baseline is None:
            raise PlanError(f"CP-SAT found no plan with harvesting within {opts.time_limit:g}s (status {name}); "
                            "raise the time limit")
        return _finish(lending, plan_devices(real, baseline)[0], no_loans, baseline.device_order(), bound,
                       f"warm start ({baseline.method}); CP-SAT found nothing in time", details, started, without)
    bound = max(bound, solver.best_objective_bound / costs.scale)
    found_dev, found_order = built.read(solver)
    order_names = [real.devices[d] for d in found_order]
    home, stash = _trim(lending, found_dev, terms.read(solver, found_dev), order_names,
                        terms.stash.read(solver, real.n_devices))
    if baseline is not None and without is not None:
        mine = score(lending, found_dev, home, order_names, stash)
        if without < mine.objective * (1 - 1e-9):  # ticks can hide a hair; never return a worse plan
            return _finish(lending, plan_devices(real, baseline)[0], no_loans, baseline.device_order(), bound,
                           f"warm start ({baseline.method}); CP-SAT found nothing better", details, started, without)
    return _finish(lending, found_dev, home, order_names, bound, "cp-sat", details, started, without, stash)


def _finish(lending: Lending, dev_of: list[int], home: list[int | None], order: list[str], bound: float,
            source: str, details: dict[str, Any], started: float, without: float | None,
            stash: list[int | None] | None = None) -> Plan:
    """The plan with its certificate in seconds."""
    plan = harvest_plan(lending, dev_of, home, Certificate("ilp", "FEASIBLE", 0.0), order, without, stash or ())
    objective = plan.objective_value
    bound = min(bound, objective)  # valid; only float noise can put it above a plan
    optimal = relative_gap(objective, bound) <= EXACT_TOLERANCE
    plan.certificate = Certificate("ilp", "OPTIMAL" if optimal else "FEASIBLE", objective, bound,
                                   0.0 if optimal else relative_gap(objective, bound), time.perf_counter() - started,
                                   solver=SolverDetails(**details, solution=source))
    return plan


def _fitting_baseline(lending: Lending) -> Plan | None:
    """The best baseline that fits without borrowing (on the capacities left by ``reserved``), if any."""
    try:
        return best_baseline(lending.problem)
    except PlanError:
        return None


def _check_total(lending: Lending) -> None:
    """Refuse, before any solve, a model larger than all the memory the cluster and hosts offer."""
    problem = lending.problem
    need = problem.memory(list(range(problem.n_layers)))
    offered = sum(lending.capacity)
    if need > offered:
        raise PlanError(f"{problem.graph.model} needs {need} bytes but the devices, after the margin and "
                        f"reservations, and the hosts' lent memory offer {offered}: {need - offered} bytes short, "
                        "even with harvesting")

