"""The stage program's rounds within a solve: cheap bounds and plans first, finer ones after, until
the best plan known is proven (for :func:`pipeplan.planner.ilp.solve`).

The rounds (:meth:`Search.schedule`), each a :class:`pipeplan.planner.bound.state.Round`:

1. plain link charges, low (a bound) then high (a plan);
2. where links differ between groups of devices (hosts) and the objective is throughput, exact
   receipts from the group that holds each tensor (:mod:`pipeplan.planner.bound.held`).  They take
   only the stages whose compute and receipts cost at most θ, a little above the bound (few
   expanded stages do), and raise θ while every chain of them costs more than θ, up to the best
   plan known: the bound is then only θ + 1.  A chain that costs at most θ gives the bound, and a
   larger θ cannot raise it (the stages it adds cost more than that chain);
3. refined link groups: low, high, and the likely charges that guess at plans;
4. an assumed bottleneck just under the best plan known (a spread), which only bounds plans
   below it: enough to prove that plan.

The search stops as soon as the best plan known is within the gap limit of the bound (equal to it
in ticks when the limit is 0).  Each plan a round finds, if better, becomes the best known and
narrows the candidate stages of the rounds after it (:meth:`BoundProgram.tighten`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pipeplan.planner.bound.program import BoundProgram, StageBound
from pipeplan.planner.bound.state import Charging, Round
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import Problem
from pipeplan.planner.simulate import evaluate, make_plan

__all__ = ["Incumbent", "Search", "needed"]

log = logging.getLogger(__name__)

_HELD_REACH = 1.25  # exact receipts first assume a bottleneck this far above the bound
_BETTER = 1e-9  # relative: a plan replaces the best known only when it is faster by more than this


@dataclass
class Incumbent:
    """The best plan known, and its bottleneck in ticks as the CP-SAT model counts it."""

    plan: Plan | None = None
    ticks: int | None = None


def needed(reached: int, objective: float, gap_limit: float) -> int:
    """The least bound in ticks that proves a plan of bottleneck ``reached`` ticks (``objective``
    when its seconds are scaled) within the gap limit: in ticks, as CP-SAT tests it, and in
    seconds, as the certificate reports it.  The two differ a little, since each term of the ticks
    is rounded on its own; with no gap limit the ticks decide.

    >>> needed(1000, 1000.4, 0.0), needed(1000, 1000.4, 0.01)
    (1000, 991)
    """
    if gap_limit <= 0:
        return reached
    return min(reached, max(math.ceil(reached * (1 - gap_limit)), math.ceil(objective * (1 - gap_limit) * (1 + 1e-9))))


class Search:
    """The rounds of one solve over ``program`` (see the module docstring), improving ``incumbent``
    in place; ``lower`` is the best bound so far in ticks."""

    def __init__(self, problem: Problem, costs: Ticks, program: BoundProgram, incumbent: Incumbent,
                 gap_limit: float, deadline: float) -> None:
        self.problem, self.costs, self.program, self.incumbent = problem, costs, program, incumbent
        self.gap_limit, self.deadline = gap_limit, deadline
        self.throughput = problem.options.objective == "throughput"
        self.refine = program.links.differ  # links differ between groups of devices (hosts)
        self.lower = 0
        self.found: StageBound | None = None  # the last round's result (None: it gave none)

    def needed(self) -> int | None:
        """The bound that proves the best plan known within the gap limit (:func:`needed`); None
        without one, or for the latency objective (the program bounds the bottleneck only)."""
        best = self.incumbent
        if not self.throughput or best.plan is None or best.ticks is None:
            return None
        return needed(best.ticks, best.plan.objective_value * self.costs.scale, self.gap_limit)

    def gap_closed(self) -> bool:
        """Whether the best plan known is within the gap limit of the bound."""
        return (need := self.needed()) is not None and self.lower >= need

    def run(self, started: float) -> None:
        """Every round of :meth:`schedule` until the gap closes or the deadline passes."""
        for round_ in self.schedule():
            if self.gap_closed():
                break
            if self.incumbent.ticks is not None:
                self.program.tighten(self.incumbent.ticks)
            self.found = found = self.program.run(round_, deadline=self.deadline)
            log.debug("stage program %s: %s after %.2fs", round_, found and found.bound, time.perf_counter() - started)
            if found is None:
                if time.perf_counter() > self.deadline:
                    break
                continue  # too many expanded stages: the bound so far stands
            self._take(round_, found)

    def _take(self, round_: Round, found: StageBound) -> None:
        """A round's result: its bound, if it gives one, and its chain as a plan, if better."""
        if round_.bounds:  # plans above the bottleneck assumed cost more than it
            assumed = round_.assumed
            self.lower = max(self.lower, found.bound if assumed is None else min(found.bound, assumed + 1))
        candidate = self._as_plan(found) if found.dev_of else None
        best = self.incumbent.plan
        if candidate is not None and (best is None or candidate.objective_value < best.objective_value * (1 - _BETTER)):
            self.incumbent.plan = candidate
            self.incumbent.ticks = self.costs.bottleneck(self.problem, found.dev_of)

    def _as_plan(self, found: StageBound) -> Plan | None:
        """The program's chain as a plan, scored by the simulator; None when it breaks memory or
        the latency objective's throughput floor."""
        problem = self.problem
        order = [problem.devices[d] for d in found.order]
        ev = evaluate(problem, found.dev_of, order)
        if ev.violation is not None or ev.bottleneck > problem.max_bottleneck:
            return None
        return make_plan(problem, found.dev_of, Certificate("ilp", "FEASIBLE", 0.0), order=order)

    def schedule(self) -> Iterator[Round]:
        """The rounds, each decided when it is due (see the module docstring): what comes next
        depends on the bound and the best plan so far."""

        def near_best() -> int | None:  # rules out every plan within the gap limit of the best one known
            need = self.needed()
            return None if need is None else need - 1

        yield Round()
        yield Round(Charging.HIGH)
        if self.refine and self.throughput:
            while (top := near_best()) is not None:
                theta = min(top, math.ceil(self.lower * _HELD_REACH))
                yield Round(refined=True, held=theta)
                if theta >= top or self.found is None or self.found.bound <= theta:
                    break
            yield Round(refined=True)
            yield Round(Charging.HIGH, refined=True)
            yield Round(Charging.LIKELY, refined=True)
        if self.throughput and (last := near_best()) is not None:
            yield Round(refined=self.refine, spread=last)
