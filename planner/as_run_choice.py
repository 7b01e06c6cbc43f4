"""Choose between pipelining across a loaded CPU core and leaving it out, by how each plan will run.

The ILP is exact for the costs it is given, and those are back-to-back layer times plus transfers.
On CPU cores shared with co-runners that misses what decides the matter for short stages: a stage
on a loaded core wakes for each message only when the scheduler lets it, and hands its outputs over
only when its threads get the core (measured in ``benchmarks/README.md``, issue 16: a two-stage
GPT-NeoX at batch 2 with one core under two compute co-runners ran at 194–290 samples/s whatever
the split, and at 388–463 on the idle core alone).  Those costs are neither linear in a stage's
layers nor the same for every stage, so they are not put in the ILP; instead each candidate device
set is planned by the ILP and the candidates are compared *as run*: each plan replayed on the
executor's schedule with this CPU's wake model (:func:`pipeplan.executor.as_run.plan_as_run`), which
prices its waits and every message to or from a loaded core.

The candidates are the devices the problem may use, and the same without the loaded ones (where an
idle one is left).  Only for the throughput objective (the replay gives a throughput), and only
where the replay applies (this host's pinned CPU cores, a wake model for this CPU, no borrowed
memory).  A plan without the loaded devices is returned scored on the problem as asked — the
user's ``forbid_devices`` stay the user's, so a later re-plan may use those devices again — with a
``FEASIBLE`` certificate (the ILP proved it best only among plans that leave the loaded devices
out) whose ``details["as_run"]`` records the choice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pipeplan.planner.plan import Certificate
from pipeplan.planner.problem import PlanError, Problem

if TYPE_CHECKING:
    from pipeplan.planner.ilp import SolverOptions
    from pipeplan.planner.plan import Plan

__all__ = ["AsRunCandidate", "AsRunChoice", "choose_as_run", "loaded_devices"]


@dataclass(frozen=True)
class AsRunCandidate:
    """One candidate: what it leaves out, the ILP's plan for the rest, and its samples/s as run."""

    label: str
    problem: Problem
    plan: Plan
    throughput_as_run: float


@dataclass(frozen=True)
class AsRunChoice:
    """The candidates in the order tried (every usable device first), the one chosen, and the plan to
    use: the chosen candidate's, on the problem as asked.  ``skipped`` says why there is no second
    candidate where one was tried (the model does not fit the idle devices, a pin on a loaded one)."""

    candidates: list[AsRunCandidate]
    chosen: AsRunCandidate
    plan: Plan
    wake_cpu: str
    schedule: str
    skipped: str | None = None

    def summary(self) -> str:
        """One line for people: each candidate's throughput as run, and which was chosen."""
        shown = "; ".join(f"{c.label}: {len(c.plan.stages)} stage{'s' * (len(c.plan.stages) != 1)} "
                          f"({', '.join(s.device for s in c.plan.stages)}), about {c.throughput_as_run:,.1f} "
                          f"samples/s" for c in self.candidates)
        skipped = f"; {self.skipped}" if self.skipped else ""
        return (f"as run here ({self.schedule}, waits priced by the wake model of {self.wake_cpu}): {shown}"
                f"{skipped} → chose {self.chosen.label}")


def loaded_devices(problem: Problem) -> list[str]:
    """Devices the problem may use that are under a load sharing their time (co-runners or a measured
    utilisation)."""
    return [problem.devices[d] for d in problem.placement.usable if not problem.cluster.devices[d].load.idle]


def choose_as_run(problem: Problem, solver: SolverOptions | None = None, schedule: str = "gpipe",
                  first: Plan | None = None) -> AsRunChoice | None:
    """Plan ``problem`` with the ILP on every usable device (or take ``first``, that plan already made)
    and, where some usable devices are loaded and some idle, on the idle ones alone; return the
    candidate predicted faster as run.  None where the replay does not apply (see the module
    docstring): plan as before."""
    from pipeplan.executor.as_run import plan_as_run
    from pipeplan.planner.ilp import solve

    if problem.options.objective != "throughput":
        return None
    plan = first if first is not None else solve(problem, solver)
    scored = plan_as_run(problem, plan, schedule)
    if scored is None:
        return None
    replay, wake = scored
    candidates = [AsRunCandidate("all devices", problem, plan, _samples_per_second(plan, replay.batch_seconds))]
    loaded, skipped = loaded_devices(problem), None
    if loaded and len(loaded) < len(problem.placement.usable):
        label = f"without the loaded {', '.join(loaded)}"
        options = replace(problem.options, forbid_devices=(*problem.options.forbid_devices, *loaded))
        try:
            without = Problem(problem.graph, problem.cluster, problem.costmodel, options)
            alternative = solve(without, solver)
            found = plan_as_run(without, alternative, schedule)
        except PlanError as exc:  # the model does not fit on the idle devices, or a pin names a loaded one
            skipped = f"{label}: no plan ({exc})"
        else:
            if found is not None:
                candidates.append(AsRunCandidate(label, without, alternative,
                                                 _samples_per_second(alternative, found[0].batch_seconds)))
    chosen = max(candidates, key=lambda c: c.throughput_as_run)  # ties keep the first plan
    final = plan if chosen is candidates[0] else _on_problem_as_asked(problem, plan, chosen, candidates, schedule)
    return AsRunChoice(candidates, chosen, final, wake.cpu, schedule, skipped)


def _on_problem_as_asked(problem: Problem, first: Plan, chosen: AsRunCandidate, candidates: list[AsRunCandidate],
                         schedule: str) -> Plan:
    """The chosen candidate's assignment scored on ``problem`` itself (its options, not the
    candidate's extra ``forbid_devices``), certified as what it is: a feasible plan, with the first
    plan's bound, and the choice in its details."""
    from pipeplan.planner.simulate import make_plan

    found = chosen.plan
    order = found.device_order()
    # the candidate's problem differs only in forbidden devices, which constrain a plan but price
    # nothing: its bottleneck is the one on the problem as asked
    objective = found.bottleneck
    bound = first.certificate.best_bound
    details: dict[str, Any] = {**found.certificate.details, "as_run": {
        "chosen": chosen.label, "schedule": schedule,
        "samples_per_second": {c.label: round(c.throughput_as_run, 3) for c in candidates}}}
    certificate = Certificate(
        method=found.certificate.method, status="FEASIBLE", objective=objective, best_bound=bound,
        gap=(objective - bound) / objective if bound is not None and objective > 0 else None,
        solve_time=first.certificate.solve_time + found.certificate.solve_time, details=details,
        solver=found.certificate.solver)
    return make_plan(problem, found.assignment(), certificate, order)


def _samples_per_second(plan: Plan, batch_seconds: float) -> float:
    return plan.options.microbatches * plan.batch_size / batch_seconds if batch_seconds > 0 else float("inf")
