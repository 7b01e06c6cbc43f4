"""Choose between pipelining across a loaded CPU core and leaving it out, by how each plan will run.

The ILP is exact for the costs it is given, and those are back-to-back layer times plus transfers.
On CPU cores shared with co-runners that misses what decides the matter for short stages: a stage
on a loaded core wakes for each message only when the scheduler lets it, and sends its outputs only
when its communication thread gets the core (measured in ``benchmarks/README.md``, issue 16: a
two-stage GPT-NeoX at batch 2 with one core under two compute co-runners ran at 194–236 samples/s
whatever the split, and at 388–463 on the idle core alone).  Those costs are neither linear in a
stage's layers nor the same for every stage, so they are not put in the ILP; instead each candidate
device set is planned by the ILP and the candidates are compared *as run*: each plan replayed on
the executor's schedule with this CPU's wake model (:func:`pipeplan.executor.as_run.plan_as_run`),
which prices its waits and its receives on a loaded core.

The candidates are the whole cluster and the cluster without its loaded devices (where an idle one
is left).  The chosen plan is the one predicted faster as run; each plan keeps its own figures, and
a plan without the loaded devices records them in its ``forbid_devices``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

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
    """The candidates in the order tried (the whole cluster first) and the one chosen."""

    candidates: list[AsRunCandidate]
    chosen: AsRunCandidate
    wake_cpu: str
    schedule: str

    @property
    def plan(self) -> Plan:
        return self.chosen.plan

    def summary(self) -> str:
        """One line for people: each candidate's throughput as run, and which was chosen."""
        shown = "; ".join(f"{c.label}: {len(c.plan.stages)} stage{'s' * (len(c.plan.stages) != 1)} "
                          f"({', '.join(s.device for s in c.plan.stages)}), about {c.throughput_as_run:,.1f} "
                          f"samples/s" for c in self.candidates)
        return (f"as run here ({self.schedule}, waits priced by the wake model of {self.wake_cpu}): {shown} "
                f"→ chose {self.chosen.label}")


def loaded_devices(problem: Problem) -> list[str]:
    """Devices of the problem's cluster under a load that shares their time (co-runners or a measured
    utilisation)."""
    return [d.id for d in problem.cluster.devices if not d.load.idle]


def choose_as_run(problem: Problem, solver: SolverOptions | None = None, schedule: str = "gpipe",
                  first: Plan | None = None) -> AsRunChoice | None:
    """Plan ``problem`` with the ILP on the whole cluster (or take ``first``, that plan already made)
    and, where some devices are loaded and some idle, on the idle ones alone; return the candidate
    predicted faster as run.  None where the replay does not apply (no wake model for this CPU, devices
    that are not pinned CPU cores, a plan that borrows memory): plan as before."""
    from pipeplan.executor.as_run import plan_as_run
    from pipeplan.planner.ilp import solve

    plan = first if first is not None else solve(problem, solver)
    scored = plan_as_run(problem, plan, schedule)
    if scored is None:
        return None
    replay, wake = scored
    candidates = [AsRunCandidate("all devices", problem, plan, _samples_per_second(plan, replay.batch_seconds))]
    loaded = [d for d in loaded_devices(problem) if d not in problem.options.forbid_devices]
    if loaded and len(loaded) < len(problem.devices) - len(problem.options.forbid_devices):
        options = replace(problem.options, forbid_devices=(*problem.options.forbid_devices, *loaded))
        try:
            without = Problem(problem.graph, problem.cluster, problem.costmodel, options)
            alternative = solve(without, solver)
        except PlanError:  # the model does not fit on the idle devices, or a pin names a loaded one
            alternative = None
        if alternative is not None:
            found = plan_as_run(without, alternative, schedule)
            if found is not None:
                candidates.append(AsRunCandidate(f"without the loaded {', '.join(loaded)}", without, alternative,
                                                 _samples_per_second(alternative, found[0].batch_seconds)))
    chosen = max(candidates, key=lambda c: c.throughput_as_run)  # ties keep the whole cluster's plan
    return AsRunChoice(candidates, chosen, wake.cpu, schedule)


def _samples_per_second(plan: Plan, batch_seconds: float) -> float:
    return plan.options.microbatches * plan.batch_size / batch_seconds if batch_seconds > 0 else float("inf")
