"""Optimal pipeline partitioning of a layer DAG over heterogeneous, contended devices (CP-SAT).

A solve has four steps, each a method of ``_Solve``; none changes what the optimum is:

1. **Warm start**: the best baseline (:func:`pipeplan.planner.baselines.best_baseline`).
2. **Stage program** (:mod:`pipeplan.planner.bound`): a dynamic program over the graph's ideals (the
   sets of layers on the first i stages of a plan) gives a lower bound on the bottleneck that no
   plan beats, and plans near it.  It runs in rounds (:mod:`pipeplan.planner.bound.rounds`), cheap
   ones first (plain link charges; then, where links differ between hosts, exact receipts from the
   host that holds each tensor (:mod:`pipeplan.planner.bound.held`), then link groups, then an
   assumed bottleneck), and
   stops as soon as the best plan known is within ``gap_limit`` of the bound (equal to it in
   ticks when the limit is 0): that plan is then proven, and returned without CP-SAT.  Each plan
   it finds narrows the candidate stages of the rounds after it.  It gets at most
   ``_PROGRAM_SHARE`` of the time limit; for the latency objective it only bounds the bottleneck
   and offers plans.  (From ``_COLD_FIRST_CELLS`` layers × devices, unconstrained throughput
   solves run it before step 1, which then runs only if it finds no plan.)
3. **CP-SAT** on the model of :mod:`pipeplan.planner.ilp_model` (assignment booleans, a device permutation,
   crossing booleans grouped by link), with ``bound ≤ B ≤ best known`` added and the best plan
   known as a complete hint.
4. **Tie-break** (:mod:`pipeplan.planner.ilp_exact`): among plans of the optimal bottleneck, the one with
   the fewest devices, then the lowest latency: step 3's model with a new objective where CP-SAT
   ran, else a new model unless building it would take more than half its time.  Where CP-SAT did
   not run, the stage program's own tie-break comes first (fewest devices, then the least sum of
   high charges, over chains of stages each within the bottleneck:
   :meth:`pipeplan.planner.bound.BoundProgram.fewest`), cheap enough for leaf graphs, whose CP-SAT
   model is usually too slow to build.

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
import os
import time
from dataclasses import dataclass, replace
from typing import Any

from ortools.sat.python import cp_model

from pipeplan.planner.baselines import best_baseline
from pipeplan.planner.bound import BoundProgram, Incumbent, Search
from pipeplan.planner.ilp_constraints import ConstrainedModel, build_constrained, split_classes
from pipeplan.planner.ilp_exact import EXACT_TOLERANCE, Settings, pass_limit, plan_devices, tie_break
from pipeplan.planner.ilp_scale import at_scale, solve_at_scale
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.plan import Certificate, Plan, SolverDetails, relative_gap
from pipeplan.planner.problem import PlanError, Problem
from pipeplan.planner.simulate import evaluate, make_plan

__all__ = ["SolverOptions", "interchangeable", "solve"]

log = logging.getLogger(__name__)

_PROGRAM_SHARE = 0.5  # of the time limit, at most, for the stage program before CP-SAT
# From this many layers × devices, an unconstrained throughput solve runs the stage program before
# the baselines: it starts at the price bound and finds a plan, while the chain DP among the
# baselines is O(n·w·K), w the longest chunk that fits (0.3–0.8 s on a 70B decoder's 1,605 leaf
# layers); the baselines run if it finds none.
_COLD_FIRST_CELLS = 2_000


@dataclass(frozen=True)
class SolverOptions:
    time_limit: float = 10.0  # seconds for the whole solve (CP-SAT gets what the steps before it leave)
    workers: int | None = None  # None → this machine's CPU count
    seed: int = 0
    gap_limit: float = 0.0  # stop when (objective − bound) / objective ≤ this
    warm_start: bool = True  # start from the best baseline (the stage program's plan is always used)
    tie_break: bool = True  # among optimal plans, prefer fewer devices, then lower latency (pipeplan.planner.ilp_exact)


def interchangeable(problem: Problem) -> list[list[int]]:
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
    """The best plan found within the time limit, with its certificate.

    Raises :class:`PlanError` when no plan fits (naming the shortfall) or none was found in time.
    """
    opts = options or SolverOptions()
    problem.check_fits()
    if at_scale(problem):  # too large for the stage program and CP-SAT
        return solve_at_scale(problem, opts.time_limit)
    run = _Solve(problem, opts)
    run.warm_start()
    run.bound()
    if run.proven():
        return run.finish_unsolved("not run: the stage program's bound proves the plan")
    return run.cp_sat()


class _Solve:
    """One solve's phases (see the module docstring) and what they share: the tick tables, the
    device classes, the best plan known and the solver details so far."""

    def __init__(self, problem: Problem, opts: SolverOptions) -> None:
        self.started = time.perf_counter()
        self.problem, self.opts = problem, opts
        self.throughput = problem.options.objective == "throughput"
        self.costs = Ticks.of(problem)
        self.classes = interchangeable(problem)  # for the stage program, which ignores the constraints (a relaxation)
        self.model_classes = split_classes(self.classes, problem.placement)  # for CP-SAT's symmetry breaking and hints
        self.cold_first = (opts.warm_start and self.throughput and not problem.placement.restricted
                           and problem.n_layers * problem.n_devices >= _COLD_FIRST_CELLS)
        self.baseline: Plan | None = None
        self.incumbent = Incumbent()  # the best plan known and its bottleneck in ticks
        self.search: Search | None = None  # the stage program's rounds; None when it is too large
        self.model: ConstrainedModel | None = None  # CP-SAT's model once solved, for the tie-break to reuse
        self.details: dict[str, Any] = {"workers": opts.workers or os.cpu_count() or 1, "seed": opts.seed,
                                        "time_limit": opts.time_limit, "tick_seconds": 1.0 / self.costs.scale,
                                        "warm_start": None}

    @property
    def lower(self) -> int:
        """The stage program's bound on the bottleneck in ticks (0 before it runs, or without it)."""
        return self.search.lower if self.search is not None else 0

    def _take_baseline(self) -> None:
        """The best baseline as the warm start and the best plan known (none when none fits)."""
        self.baseline = _baseline(self.problem)
        self.incumbent.plan = self.baseline
        self.incumbent.ticks = None if self.baseline is None else self.costs.bottleneck(
            self.problem, plan_devices(self.problem, self.baseline)[0])
        self.details["warm_start"] = self.baseline.method if self.baseline is not None else None

    # -- 1. the warm start -----------------------------------------------------------------------------

    def warm_start(self) -> None:
        """The best baseline, unless the stage program goes first (large unconstrained throughput
        problems: it starts at the price bound and finds a plan, and the baselines' chain DP is
        O(n·w·K))."""
        if self.opts.warm_start and not self.cold_first:
            self._take_baseline()

    # -- 2. the stage program ----------------------------------------------------------------------------

    def bound(self) -> None:
        """The stage program's rounds (:mod:`pipeplan.planner.bound.rounds`), within their share of the
        time: its bound, and its plans where they beat the best known; then the baselines, if the
        program went first and found no plan."""
        # The program may take part of the time: a run that would pass its share is abandoned.
        deadline = self.started + _PROGRAM_SHARE * self.opts.time_limit
        program = BoundProgram.of(self.problem, self.costs, self.classes, self.incumbent.ticks, deadline)
        if program is not None:
            self.details.update(ideals=program.ideals, stage_pairs=program.pairs)
            self.search = Search(self.problem, self.costs, program, self.incumbent, self.opts.gap_limit, deadline)
            self.search.run(self.started)
            self.details["stage_bound"] = self.lower / self.costs.scale
        if self.cold_first and self.incumbent.plan is None:  # the program found no plan: the baselines' turn
            self._take_baseline()
        log.info("stage program: bound %s ticks (%s ideals, %s stages) after %.2fs", self.lower,
                 program.ideals if program else "too many", program.pairs if program else "-",
                 time.perf_counter() - self.started)

    def proven(self) -> bool:
        """Whether the stage program's bound proves the best plan known within the gap limit."""
        return self.incumbent.plan is not None and self.search is not None and self.search.gap_closed()

    # -- 3. CP-SAT -----------------------------------------------------------------------------------------

    def cp_sat(self) -> Plan:
        """CP-SAT on the model, with the bound and the best plan known as a hint; the better of its
        plan and the best known, certified."""
        problem, costs, opts = self.problem, self.costs, self.opts
        built = build_constrained(problem, costs, self.model_classes, self.lower, self.incumbent.ticks)
        incumbent = self.incumbent.plan
        if incumbent is not None:
            built.hint(problem, costs, self.model_classes, *plan_devices(problem, incumbent))
        solver = cp_model.CpSolver()
        spent = time.perf_counter() - self.started
        solver.parameters.max_time_in_seconds = max(opts.time_limit - spent, 0.1 * opts.time_limit)
        solver.parameters.num_workers = self.details["workers"]
        solver.parameters.random_seed = opts.seed
        solver.parameters.relative_gap_limit = opts.gap_limit
        status = solver.solve(built.model)
        self.model = built
        name = solver.status_name(status)
        log.info("CP-SAT %s in %.2fs: objective %s, bound %s", name, solver.wall_time, solver.objective_value,
                 solver.best_objective_bound)
        self.details.update(solver_status=name, variables=len(built.model.proto.variables),
                            constraints=len(built.model.proto.constraints), cp_sat_seconds=solver.wall_time)

        # -- read the status -------------------------------------------------------------------------------
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
            return self.finish(incumbent, bound, self._origin(incumbent) + "; CP-SAT found nothing better in time")
        if plan is None:
            raise PlanError(f"CP-SAT found no plan within {opts.time_limit:g}s (status {name}); "
                            "raise the time limit")
        return self.finish(plan, bound, None)

    # -- 4. the certificate, after the tie-break ---------------------------------------------------------

    def finish_unsolved(self, status: str) -> Plan:
        """The best plan known, certified by the stage program's bound alone (CP-SAT did not run)."""
        plan = self.incumbent.plan
        assert plan is not None
        self.details["solver_status"] = status
        return self.finish(plan, self.lower / self.costs.scale, self._origin(plan))

    def finish(self, plan: Plan, bound: float, source: str | None) -> Plan:
        """``plan`` with the certificate of this solve in seconds, after the tie-break
        (:mod:`pipeplan.planner.ilp_exact`); ``source``: where a plan CP-SAT did not find came from."""
        problem, opts = self.problem, self.opts
        info = SolverDetails(**self.details, solution=source or "cp-sat")
        bound = max(bound, problem.objective_lower_bound(), self.lower / self.costs.scale if self.throughput else 0.0)
        settings = Settings(0.0, info.workers, opts.seed)

        def limit() -> Settings:
            return replace(settings, time_limit=pass_limit(opts.time_limit, time.perf_counter() - self.started))

        objective = plan.objective_value
        optimal = relative_gap(objective, bound) <= EXACT_TOLERANCE
        if optimal and opts.tie_break and self.throughput and self.model is None and len(plan.stages) > 1:
            better, note = self._fewest(plan)  # cheap, and CP-SAT's own tie-break may skip the graph
            info.passes.append(note)
            if better is not plan:
                plan, info.solution = better, info.solution + "; tie-break"
                objective = plan.objective_value
        if optimal and opts.tie_break and self.throughput and len(plan.stages) > 1 and limit().time_limit > 0:
            better, note = tie_break(problem, plan, self.model_classes, limit(), self.model, self.costs)
            info.passes.append(note)
            if better is not plan:
                plan, info.solution = better, info.solution + "; tie-break"
                objective = plan.objective_value
        bound = min(bound, objective)  # a valid bound; only float noise can put it above a plan
        plan.certificate = Certificate("ilp", "OPTIMAL" if optimal else "FEASIBLE", objective, bound,
                                       0.0 if optimal else relative_gap(objective, bound),
                                       time.perf_counter() - self.started, solver=info)
        return plan

    def _fewest(self, plan: Plan) -> tuple[Plan, str]:
        """The stage program's tie-break (:meth:`pipeplan.planner.bound.BoundProgram.fewest`): its
        plan if the simulator finds it valid, its bottleneck no worse, and it uses fewer devices or
        as many at a lower latency; and a note of what happened."""
        started = time.perf_counter()
        problem, search = self.problem, self.search
        if search is None or self.incumbent.ticks is None:
            return plan, "stage-program tie-break: skipped: no stage program"
        found = search.program.fewest(self.incumbent.ticks, self.started + self.opts.time_limit)
        best, outcome = plan, "none"
        if found is not None and found.dev_of:
            order = [problem.devices[d] for d in found.order]
            ev = evaluate(problem, found.dev_of, order)
            outcome = f"{len(order)} devices, latency {ev.latency:.6g} s{'; ' + ev.violation if ev.violation else ''}"
            if (ev.violation is None and ev.bottleneck <= plan.bottleneck
                    and (len(order), ev.latency) < (len(plan.stages), plan.latency * (1 - 1e-9))):
                best = make_plan(problem, found.dev_of, Certificate("ilp", "OPTIMAL", 0.0), order=order)
        note = (f"stage-program tie-break: {'FOUND' if found is not None else 'TIMEOUT'} in "
                f"{time.perf_counter() - started:.2f}s ({outcome}), {len(plan.stages)} → {len(best.stages)} devices, "
                f"latency {plan.latency:.6g} → {best.latency:.6g} s")
        log.info("%s", note)
        return best, note

    def _origin(self, plan: Plan) -> str:
        return f"warm start ({plan.method})" if plan is self.baseline else "stage program"


def _baseline(problem: Problem) -> Plan | None:
    """The best baseline plan (the warm start), or None when none fits."""
    try:
        return best_baseline(problem)
    except PlanError as exc:
        log.info("no baseline fits, solving cold: %s", exc)
        return None
