"""The user's constraints and the per-edge transfer rule in the CP-SAT model of :mod:`pipeplan.planner.ilp_model`.

:func:`build_constrained` builds that model and adds, from the problem's resolved
:class:`pipeplan.planner.constraints.Placement`:

- ``x[v][d] = 0`` for every device a pin or ``forbid_devices`` rules out for layer v;
- ``x[w][d] = x[r][d]`` for every member w of a group that must share a device (keep-together
  groups, layers pinned to one device, and the layers between them), r the group's first layer.

``max_devices`` (the stage cap) is in the model already.  With ``transfer="per-edge"`` a layer sends
its output once per consumer on another device: for each edge (u, v), each receiving device b and
each group g of senders whose links into b cost the same, ``er ≥ x[v,b] + Σ_(a∈g) x[u,a] − 1`` adds
the cost to b's receive time, and symmetrically ``es`` to the sender's.  These add ``R[d] ≥ …`` and
``S[d] ≥ …`` rows beside the model's per-device ones, which they dominate (an output is charged at
least once per receiving device either way), so the model's own rows stay valid and the optimum
is the per-edge one.

Devices are interchangeable for the symmetry breaking only when the constraints treat them alike
(:func:`split_classes`); the stage program keeps the unconstrained classes, whose bound is still a
bound: constraints only remove plans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from ortools.sat.python import cp_model

from pipeplan.planner.constraints import Placement
from pipeplan.planner.ilp_model import Model, _link_groups, build_model, edge_crossings
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import Problem

__all__ = ["ConstrainedModel", "build_constrained", "split_classes"]


@dataclass
class ConstrainedModel(Model):
    """A :class:`pipeplan.planner.ilp_model.Model` with the per-edge crossings its hint must also set."""

    # (y, u, v, senders, receivers): 1 when u is on a sender and its consumer v on a receiver
    edge_crossings: list[tuple[cp_model.IntVar, int, int, frozenset[int], frozenset[int]]] = field(
        default_factory=list)

    def hint(self, problem: Problem, costs: Ticks, classes: list[list[int]], dev_of: Sequence[int],
             order: Sequence[int]) -> None:
        """The model's complete hint, and the per-edge crossings of the same relabelled plan (read
        back from the hint of ``x``, so the relabelling is done in one place)."""
        super().hint(problem, costs, classes, dev_of, order)
        if not self.edge_crossings:
            return
        hints = self.model.proto.solution_hint
        value = dict(zip(hints.vars, hints.values, strict=True))
        devs = [next(d for d, x in enumerate(row) if value[x.index]) for row in self.x]
        for y, u, v, senders, receivers in self.edge_crossings:
            self.model.add_hint(y, devs[u] in senders and devs[v] in receivers)


def split_classes(classes: list[list[int]], placement: Placement) -> list[list[int]]:
    """``classes`` of interchangeable devices, split where the constraints tell devices apart (a
    layer may use one and not the other)."""
    out: list[list[int]] = []
    for cls in classes:
        by_rule: dict[tuple[bool, ...], list[int]] = {}
        for d in cls:
            by_rule.setdefault(tuple(d in allowed for allowed in placement.allowed), []).append(d)
        out.extend(by_rule.values())
    return out


def build_constrained(problem: Problem, costs: Ticks, classes: list[list[int]], lower: int = 0,
                      upper: int | None = None, count_used: bool = False) -> ConstrainedModel:
    """:func:`pipeplan.planner.ilp_model.build_model` (``classes`` from :func:`split_classes`) with the
    placement constraints and the per-edge transfer rule added."""
    base = build_model(problem, costs, classes, lower, upper, count_used=count_used)
    built = ConstrainedModel(**{f.name: getattr(base, f.name) for f in fields(Model)})
    model, x, placement = built.model, built.x, problem.placement
    for v, allowed in enumerate(placement.allowed if placement.restricted else []):
        for d in range(problem.n_devices):
            if d not in allowed:
                model.add(x[v][d] == 0)
    for members in placement.groups:
        first = members[0]
        for w in members[1:]:
            for d in placement.allowed[first]:
                model.add(x[w][d] == x[first][d])
    if problem.options.transfer == "per-edge":
        _charge_every_edge(built, problem, costs)
    return built


def _charge_every_edge(built: ConstrainedModel, problem: Problem, costs: Ticks) -> None:
    """Receive and send rows that charge every layer's output once per consumer on another device
    (every layer, not only those with several consumers: a row must hold all of a device's terms)."""
    k, model, x = problem.n_devices, built.model, built.x
    table = costs.transfer.tolist()
    links = _link_groups(costs)  # the same link groups as the model's own crossings
    recv_terms: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(k)]
    send_terms: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(k)]
    for u in range(problem.n_layers):
        if not problem.succ[u] or not costs.transfer[u].any():
            continue
        for v in problem.succ[u]:
            for c in edge_crossings(model, x, table, links, u, v, "e"):
                (send_terms if c.sender else recv_terms)[c.device].append((c.cost, c.y))
                built.edge_crossings.append((c.y, u, v, c.sources, c.targets))
    for d in range(k):
        model.add(built.recv[d] >= sum(c * y for c, y in recv_terms[d]))
        model.add(built.send[d] >= sum(c * y for c, y in send_terms[d]))
