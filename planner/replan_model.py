"""Re-planning's migration terms in the CP-SAT model (see :mod:`pipeplan.planner.replan`).

On top of :func:`pipeplan.planner.ilp_constraints.build_constrained` (the model of :mod:`pipeplan.planner.ilp_model`
with the placement constraints), for the cost model of :class:`pipeplan.planner.migration.MigrationCost`
amortised over N microbatches:

- Moves need no variable of their own: layer v, now on device a, moves to b exactly when
  ``x[v][b] = 1`` for b ≠ a (a layer whose device left is reloaded wherever it goes).
- ``open[c] ≥ x[v][b]`` for each layer v with state that channel c (a → b, or the reload source →
  b) would carry: a channel pays its latency once when it carries anything.
- ``M ≥ lat[c] · open[c] + Σ_v cost[v, c] · x[v][b]`` for each channel, costs in ticks of
  ``bytes / bandwidth / N`` and ``latency / N``, each rounded down like every term of
  :mod:`pipeplan.planner.ilp_ticks`, so M is at most the amortised migration in seconds times the scale.
- The objective is ``B + M``, and ``B + M ≤`` the best plan known (in ticks, rounded up).

Everything stays linear, and every bound CP-SAT proves in ticks, divided by the scale, is a bound
in seconds.  The ticks' scale leaves room for M: the largest stage time plus the largest amortised
migration span about 2³⁰ ticks (:func:`migration_ticks`).

Devices are interchangeable for the symmetry breaking only when no current layer with state is on
them (:func:`migration_classes`): moving to one or the other then costs the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from pipeplan.planner.ilp_constraints import ConstrainedModel, split_classes
from pipeplan.planner.ilp_ticks import Ticks, resolution_for
from pipeplan.planner.migration import MigrationCost, Route
from pipeplan.planner.problem import Problem

__all__ = ["MigrationTerms", "add_migration", "migration_classes", "migration_ticks"]


def migration_ticks(problem: Problem, cost: MigrationCost, microbatches: float) -> Ticks:
    """Ticks whose scale puts the largest stage time plus the largest amortised migration at
    about :func:`pipeplan.planner.ilp_ticks.resolution_for` ticks (the stage time alone is that with
    no migration)."""
    resolution = resolution_for(problem)
    stage = resolution / Ticks.of(problem, resolution).scale  # the largest possible stage time, seconds
    routes = cost.routes()
    if not routes:
        return Ticks.of(problem, resolution)
    links = [cost.link(route) for route in routes]
    slowest = min(bandwidth for bandwidth, _ in links)
    worst = (max(latency for _, latency in links) + cost.model_bytes / slowest) / microbatches
    return Ticks.of(problem, resolution * stage / (stage + worst)) if stage > 0 else Ticks.of(problem, resolution)


def migration_classes(problem: Problem, cost: MigrationCost, classes: list[list[int]]) -> list[list[int]]:
    """``classes`` of interchangeable devices split for the constraints, and with every device that
    now holds a layer with state on its own."""
    holders = {o for v, o in enumerate(cost.origin) if o is not None and cost.state[v]}
    split = [[d] for cls in classes for d in cls if d in holders]
    split += [rest for cls in classes if (rest := [d for d in cls if d not in holders])]
    return split_classes(split, problem.placement)


@dataclass
class MigrationTerms:
    """The migration's variables: ``total`` is M, in ticks of the amortised seconds."""

    total: cp_model.IntVar
    opened: dict[Route, cp_model.IntVar]  # channels with a latency to pay

    def hint(self, built: ConstrainedModel, cost: MigrationCost, costs: Ticks, microbatches: float) -> None:
        """The values the plan hinted to ``built`` gives them, as the model counts them.  Call after
        ``built.hint``: the plan is read back from the hint of ``x``, relabelled as it was there."""
        model = built.model
        hints = model.proto.solution_hint
        value = dict(zip(hints.vars, hints.values, strict=True))
        dev_of = [next(d for d, x in enumerate(row) if value[x.index]) for row in built.x]
        carried = _carried(cost, dev_of)
        for route, var in self.opened.items():
            model.add_hint(var, route in carried)
        model.add_hint(self.total, max((_route_ticks(cost, costs, microbatches, route, layers)
                                        for route, layers in carried.items()), default=0))


def _carried(cost: MigrationCost, dev_of: Sequence[int]) -> dict[Route, list[int]]:
    """Channel → the layers with state it carries under an assignment."""
    out: dict[Route, list[int]] = {}
    for v, target in enumerate(dev_of):
        route = cost.route(v, target)
        if route is not None and cost.state[v]:
            out.setdefault(route, []).append(v)
    return out


def _term(cost: MigrationCost, costs: Ticks, microbatches: float, route: Route, v: int) -> int:
    bandwidth, _ = cost.link(route)
    return costs.ticks(cost.state[v] / bandwidth / microbatches)


def _route_ticks(cost: MigrationCost, costs: Ticks, microbatches: float, route: Route, layers: list[int]) -> int:
    latency = costs.ticks(cost.link(route)[1] / microbatches)
    return latency + sum(_term(cost, costs, microbatches, route, v) for v in layers)


def add_migration(built: ConstrainedModel, problem: Problem, cost: MigrationCost, costs: Ticks,
                  microbatches: float, upper: int | None = None) -> MigrationTerms:
    """Add M and its channels to ``built`` and set the objective ``B + M`` (``≤ upper`` ticks when
    given: the best plan known)."""
    model, x = built.model, built.x
    terms: dict[Route, list[tuple[int, cp_model.IntVar]]] = {}
    for v in range(problem.n_layers):
        if not cost.state[v]:
            continue  # a layer with no state moves for free
        for b in range(problem.n_devices):
            route = cost.route(v, b)
            if route is not None:
                terms.setdefault(route, []).append((_term(cost, costs, microbatches, route, v), x[v][b]))
    ceiling = sum(_route_ticks(cost, costs, microbatches, r, [v for v in range(problem.n_layers)
                                                               if cost.state[v]]) for r in terms)
    total = model.new_int_var(0, max(ceiling, 0), "M")
    opened: dict[Route, cp_model.IntVar] = {}
    for route, row in terms.items():
        latency = costs.ticks(cost.link(route)[1] / microbatches)
        charge = sum(c * var for c, var in row if c)
        if latency:
            opened[route] = model.new_bool_var(f"open[{route.source},{route.target}]")
            for _, var in row:
                model.add_implication(var, opened[route])
            charge += latency * opened[route]
        model.add(total >= charge)
    objective = built.bottleneck + total
    if upper is not None:
        model.add(objective <= upper)
    model.minimize(objective)
    return MigrationTerms(total, opened)
