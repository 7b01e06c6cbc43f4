"""What a compare job answers: the ILP beside every baseline and, with harvesting, the plan that borrows.

The comparison is :func:`pipeplan.planner.compare.compare`'s, as ``pipeplan compare`` prints it: one row
per method (the ILP first), each plan scored by the same simulator, its objective over the ILP's and
its bottleneck over the problem's lower bound (the heaviest layer, or the work spread over every
device: fetches only add to a stage, so it bounds a plan that borrows too).

With harvesting options (``pipeplan compare --harvest``) the plan that borrows memory
(:func:`pipeplan.planner.harvest_solve.solve_harvest`) comes beside them as ``harvest``, with its memory
map.  A model that fits only by borrowing still gets an answer: ``plans`` is empty (or holds the
baselines that found a plan) and ``failures`` says why the ILP and each baseline found none.  A model
that does not fit even by borrowing fails as its plan request would (a PlanError).  Runs in a worker
process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeplan.api.keys import finite

if TYPE_CHECKING:
    from pipeplan.planner.harvest import HarvestOptions
    from pipeplan.planner.ilp import SolverOptions
    from pipeplan.planner.plan import Plan
    from pipeplan.planner.problem import Problem

__all__ = ["comparison"]


def comparison(problem: Problem, solver: SolverOptions, costmodel_name: str,
               harvest: HarvestOptions | None = None) -> dict[str, Any]:
    """The comparison document (``ComparisonDoc``) of ``problem``: with ``harvest``, the plan that
    borrows under those options as its ``harvest`` row."""
    from pipeplan.planner.compare import compare, compare_without_ilp
    from pipeplan.planner.problem import PlanError

    borrowing: Plan | None = None
    if harvest is not None:  # first: if nothing fits even by borrowing, the job fails as a plan request would
        from pipeplan.planner.harvest_solve import solve_harvest

        borrowing = solve_harvest(problem, harvest, solver)
    try:
        comp = compare(problem, solver)
    except PlanError as exc:
        if borrowing is None:
            raise
        comp = compare_without_ilp(problem, str(exc))
    named = dict(comp.plans)
    if borrowing is not None:
        named["harvest"] = borrowing
    for plan in named.values():
        plan.costmodel = costmodel_name
    ilp = comp.plans["ilp"].objective_value if "ilp" in comp.plans else None
    rows = {name: {"method": name, "plan": finite(plan.to_dict()),
                   "objective_vs_ilp": finite(plan.objective_value / ilp) if ilp else None,
                   "bottleneck_vs_bound": finite(plan.bottleneck / comp.lower_bound) if comp.lower_bound else None}
            for name, plan in named.items()}
    doc = {"model": problem.graph.model, "cluster": problem.cluster.name, "objective": problem.options.objective,
           "lower_bound": finite(comp.lower_bound), "plans": [rows[name] for name in comp.plans],
           "failures": [{"method": m, "error": why} for m, why in comp.failures.items()]}
    if borrowing is not None:  # only when asked: a comparison without harvesting reads as it always has
        doc["harvest"] = rows["harvest"]
    return doc
