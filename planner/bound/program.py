"""A lower bound on the bottleneck, and plans near it: a dynamic program over chains of ideals.

Any plan, read in pipeline order, is a chain of ideals ∅ = S_0 ⊂ … ⊂ S_m = V, stage i holding
S_i \\ S_(i−1) on a device of its own (:mod:`pipeplan.planner.bound.ideals`).  The program walks
every such chain, stage by stage, in a state that holds the devices used so far per class of
interchangeable devices (same speed column, capacity and links) and, in refined rounds, the link
groups around the stage and where the broadcast layer is (:mod:`pipeplan.planner.bound.moves`).  It
charges each stage as :mod:`pipeplan.planner.bound.charges` says: at most what the CP-SAT model
charges that stage in any plan that fits the state.

Why the value bounds the model's optimum from below: take an optimal plan; its chain is one the
program walks (stages that cost more than the ceiling, a known plan's bottleneck, are skipped, and
the optimal plan has none), each of its stages is charged at most its cost in the model, so the
least bottleneck over chains is at most the plan's.  Layers with no edges are left out, which only
lowers the charges; they join the chain's stages afterwards.  With no chain at most the ceiling
the value is the ceiling.

:attr:`Charging.HIGH` charges the most instead, so the chain found is a real plan that costs at
most the value (layers with no edges aside): an upper bound, often meeting the lower one.  A
``spread`` θ assumes a bottleneck at most θ and so bounds only such plans: the bound is
``min(value, θ + 1)``.  ``held`` θ walks the ideals expanded by the group that holds each tensor
in flight (:mod:`pipeplan.planner.bound.held`), over the stages that cost at most θ: every receipt
pays its real link, and the bound is again ``min(value, θ + 1)``.

The recursion over pairs of ideals is that of Tarnawski et al., "Efficient algorithms for device
placement of DNN graph operators" (NeurIPS 2020), here with device classes and link-aware charges.
Time O(P·s) in numpy for P candidate stages and s moves between states.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from pipeplan.planner.bound import limits as _limits
from pipeplan.planner.bound.caches import Caches
from pipeplan.planner.bound.candidates import candidate_stages, lattice
from pipeplan.planner.bound.charges import INF, Charges
from pipeplan.planner.bound.held import HeldStages, HeldTables, held_tables
from pipeplan.planner.bound.limits import Limits
from pipeplan.planner.bound.links import Links
from pipeplan.planner.bound.moves import Moves
from pipeplan.planner.bound.placement import place_chain
from pipeplan.planner.bound.prices import Prices
from pipeplan.planner.bound.stages import ClassStages, Stages
from pipeplan.planner.bound.state import ChargeKey, Charging, HeldKey, Round, State
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import Problem

__all__ = ["BoundProgram", "StageBound", "stage_bound"]

_FIRST_STEP = 0.01  # with no plan known, the first ceiling is this far above the price bound

Move = tuple[State, ChargeKey]  # a move into a state: the state before and the key of its charges


@dataclass
class StageBound:
    """The program's value in ticks and a chain reaching it: ``dev_of`` (layer → device index) and
    ``order`` (used devices in pipeline order), empty when no chain costs at most the ceiling (the
    value is then the ceiling)."""

    bound: int
    dev_of: list[int] = field(default_factory=list)
    order: list[int] = field(default_factory=list)


@dataclass
class _Walk:
    """One run's tables: per state reached, the least bottleneck of a chain to each ideal, and the
    moves that reach it."""

    firsts: list[State]
    best: dict[State, np.ndarray]
    incoming: dict[State, list[Move]]


class BoundProgram:
    """Candidate stages of one problem, ready for :meth:`run`; :meth:`of` builds it, or returns None
    when the problem is too large."""

    def __init__(self, problem: Problem, costs: Ticks, classes: list[list[int]], stages: Stages, ceiling: int,
                 limits: Limits) -> None:
        self.problem, self.costs, self.classes, self.stages, self.ceiling = problem, costs, classes, stages, ceiling
        self.limits = limits
        self.caches = Caches(limits.cached_per_table)
        self.links = Links.of(costs, classes)
        self.charges = Charges(problem, self.links, stages, ceiling, self.caches)
        self.moves = Moves(problem, classes, self.links, self.charges.broadcast, self.charges.count_sends)
        self._held_tables: HeldTables | None = None
        self._held_ceiling = -1  # the ceiling the expanded stages were built with
        self._held_too_many: int | None = None  # the least ceiling at which there were too many held stages

    @classmethod
    def of(cls, problem: Problem, costs: Ticks, classes: list[list[int]], upper: int | None,
           deadline: float | None = None, use_windows: bool = True,
           limits: Limits | None = None) -> BoundProgram | None:
        """The program over the candidate stages under ``upper`` (a known plan's bottleneck in
        ticks; None: no ceiling), without those the price windows rule out unless ``use_windows``
        is False (they change no value or chain: :mod:`pipeplan.planner.bound.prices`); ``limits``:
        :data:`pipeplan.planner.bound.limits.LIMITS` unless given."""
        limits = limits or _limits.LIMITS
        if math.prod(len(c) + 1 for c in classes) * (len(classes) + 1) ** 2 > limits.max_states:
            return None
        if upper is None and use_windows:
            return cls._near_prices(problem, costs, classes, deadline, limits)
        ceiling = INF if upper is None else upper
        stages = candidate_stages(problem, costs, classes, ceiling, limits, deadline, use_windows)
        return None if stages is None else cls(problem, costs, classes, stages, ceiling, limits)

    @classmethod
    def _near_prices(cls, problem: Problem, costs: Ticks, classes: list[list[int]], deadline: float | None,
                     limits: Limits) -> BoundProgram | None:
        """With no plan known, the program under the least ceiling, 1%, 2%, 4%, … above the price
        bound (:mod:`pipeplan.planner.bound.prices`), at which its pessimistic run finds a plan: the
        windows then keep few stages, where no ceiling would keep them all (2.9 million on Llama-2
        7B).  Values stay bounds: a ceiling only makes stages above it impossible (the value is then
        at most the ceiling, and no plan is below it)."""
        shared = lattice(problem, costs, classes, limits)
        if shared is None:
            return None
        prices = Prices.of(problem, costs, classes)
        floor = max(prices.bound(), 1)
        step = _FIRST_STEP
        while (ceiling := math.ceil(floor * (1 + step))) < costs.horizon:
            stages = candidate_stages(problem, costs, classes, ceiling, limits, deadline, prices=prices, shared=shared)
            if stages is None:
                return None
            program = cls(problem, costs, classes, stages, ceiling, limits)
            found = program.run(Round(Charging.HIGH), deadline=deadline)
            if found is None:
                return None
            if found.dev_of:
                return program
            step *= 2
        stages = candidate_stages(problem, costs, classes, INF, limits, deadline, use_windows=False, shared=shared)
        return None if stages is None else cls(problem, costs, classes, stages, INF, limits)

    def tighten(self, upper: int) -> None:
        """Drop the stages that compute more than ``upper``, a known plan's bottleneck, and charge
        any stage above it as impossible: later rounds run faster, and the expanded stages of
        :mod:`pipeplan.planner.bound.held` are fewer.  Bounds stay valid: a plan that beats ``upper``
        has no such stage."""
        if upper < self.ceiling:
            self.stages = self.stages.narrow(upper, self.limits)
            self.charges.narrow(self.stages, upper)
            self.ceiling = upper
            self._held_tables, self._held_too_many = None, None

    @property
    def ideals(self) -> int:
        return self.stages.ideals

    @property
    def pairs(self) -> int:
        return self.stages.pairs

    # -- a run: forward over the states, then one chain read back ------------------------------------

    def run(self, round_: Round | None = None, deadline: float | None = None) -> StageBound | None:
        """The least bottleneck over chains under the round's charges (default: low charges, plain
        states), with a chain (see the module docstring and :class:`pipeplan.planner.bound.state.Round`).

        None when ``time.perf_counter()`` passes ``deadline`` first, or when ``round_.held`` and the
        expanded stages are too many."""
        round_ = round_ or Round()
        tables = None if round_.held is None else self._held(min(round_.held, self.ceiling), deadline)
        if round_.held is not None and tables is None:
            return None
        walk = self._forward(round_, tables, deadline)
        if walk is None:
            return None
        full = (self.ideals if tables is None else tables.size) - 1  # breadth-first: the whole graph comes last
        finals = [(int(arr[full]), s) for s, arr in walk.best.items()
                  if s not in walk.firsts and arr[full] < INF and s.finished]
        if not finals:  # nothing beats the ceiling (or, with no ceiling, nothing fits at all)
            return StageBound(self.ceiling if self.ceiling < INF else 0)
        value, state = min(finals)
        chain = self._read_back(walk, state, full, tables)
        return StageBound(value, *place_chain(self.problem, self.costs, self.classes, self.stages, chain))

    def fewest(self, limit: int, deadline: float | None = None) -> StageBound | None:
        """Among the chains whose every stage costs at most ``limit`` ticks under high charges (real
        plans of bottleneck at most ``limit``, layers with no edges aside), one with the fewest
        devices, then the least sum of those charges (over the sum of its stage times, so over its
        latency less (M − 1)·bottleneck): the tie-break among optimal plans where CP-SAT's would
        cost too much (:mod:`pipeplan.planner.ilp_exact`).  Its value is that sum; an empty chain
        when none; None past ``deadline``.  O(P·s), one run of the program."""
        round_ = Round(Charging.HIGH, refined=self.links.differ)
        walk = self._forward(round_, None, deadline, limit)
        if walk is None:
            return None
        full = self.ideals - 1
        finals = [(sum(s.used), int(arr[full]), s) for s, arr in walk.best.items()
                  if s not in walk.firsts and arr[full] < INF and s.finished]
        if not finals:
            return StageBound(limit)
        _, total, state = min(finals)
        chain = self._read_back(walk, state, full, None, limit)
        return StageBound(total, *place_chain(self.problem, self.costs, self.classes, self.stages, chain))

    @staticmethod
    def _step(before: np.ndarray, cost: np.ndarray, limit: int | None) -> np.ndarray:
        """A chain's value after one more stage: the larger of the two, or with ``limit`` their sum
        where the stage costs at most ``limit`` (else impossible)."""
        if limit is None:
            return np.maximum(before, cost)
        return np.where((cost <= limit) & (before < INF), before + cost, INF)

    def _forward(self, round_: Round, tables: HeldTables | None, deadline: float | None,
                 limit: int | None = None) -> _Walk | None:
        """Every state the round's chains reach, level by level (one more stage each), with the
        least bottleneck of a chain to each ideal (with ``limit``: the least sum over the chains of
        stages at most ``limit``, :meth:`_step`); None past ``deadline``."""
        n_ideals = self.ideals if tables is None else tables.size
        start = np.full(n_ideals, INF, dtype=np.int64)
        start[0] = 0
        firsts = self.moves.firsts(round_.refined)
        walk = _Walk(firsts, dict.fromkeys(firsts, start), {})
        best, incoming = walk.best, walk.incoming
        usable = [len(cs.src) > 0 for cs in self.stages.per_class]
        level = firsts
        while level:
            following: list[State] = []
            for state in level:
                for target, key in self.moves.after(state, round_, usable):
                    if deadline is not None and time.perf_counter() > deadline:
                        return None
                    cs, cost = self._table(key, tables)
                    if not len(cs.src):
                        continue
                    vals = self._step(best[state][cs.src], cost, limit)
                    mins = np.minimum.reduceat(vals, cs.starts)
                    if mins.min() >= INF:
                        continue
                    if target not in best:
                        best[target] = np.full(n_ideals, INF, dtype=np.int64)
                        incoming[target] = []
                        following.append(target)
                    best[target][cs.ends] = np.minimum(best[target][cs.ends], mins)
                    incoming[target].append((state, key))
            level = following
        return walk

    def _read_back(self, walk: _Walk, state: State, full: int, tables: HeldTables | None,
                   limit: int | None = None) -> list[tuple[int, int, int]]:
        """One chain that reaches ``state``'s value at the whole graph, as (class, ideal before,
        ideal after) per stage in pipeline order."""
        chain: list[tuple[int, int, int]] = []
        cur = full
        while state not in walk.firsts:
            for before, key in walk.incoming[state]:
                cs, cost = self._table(key, tables)
                lo, hi = np.searchsorted(cs.dst, cur, side="left"), np.searchsorted(cs.dst, cur, side="right")
                vals = self._step(walk.best[before][cs.src[lo:hi]], cost[lo:hi], limit)
                hits = np.flatnonzero(vals == walk.best[state][cur])
                if len(hits):
                    frm = int(cs.src[lo + hits[0]])
                    chain.append((key.cls, frm, cur) if tables is None
                                 else (key.cls, int(tables.ideal_of[frm]), int(tables.ideal_of[cur])))
                    cur, state = frm, before
                    break
            else:  # pragma: no cover - the values were built from these very arrays
                raise AssertionError("stage program: no chain reaches its own value")
        return chain[::-1]

    def _held(self, ceiling: int, deadline: float | None) -> HeldTables | None:
        """The stages expanded by where their receipts are held, those that cost at most ``ceiling``
        (built again only for another ceiling)."""
        if self._held_tables is not None and self._held_ceiling == ceiling:
            return self._held_tables
        if self._held_too_many is not None and ceiling >= self._held_too_many:
            return None
        self._held_tables = held_tables(self.problem, self.stages, self.links, ceiling, self.limits, deadline)
        self._held_ceiling = ceiling
        if self._held_tables is None:  # too many (or out of time, and then no later round runs)
            self._held_too_many = ceiling if self._held_too_many is None else min(ceiling, self._held_too_many)
        self.caches.forget_held()
        return self._held_tables

    def _table(self, key: ChargeKey, tables: HeldTables | None) -> tuple[ClassStages | HeldStages, np.ndarray]:
        """The stages a move with this key takes, and their charges."""
        if tables is None:
            return self.charges.table(key.table), self.charges.cost(key)
        c, ends_plan = key.cls, key.ends_plan
        hs = (tables.last if ends_plan else tables.per_class)[c]
        held_key = HeldKey(c, ends_plan, key.charging, key.refined, key.following, key.left, key.room, key.spread)
        found = self.caches.held.get(held_key)
        if found is None:
            table = key.table._replace(ends_plan=False, held=True)  # the sends of all of the class's held stages
            send = self.charges.sends(table, tables.stages[c], key)[hs.pair]
            found = self.caches.keep(self.caches.held, held_key, self.charges.combine(hs.fixed, 0, send))
        return hs, found


def stage_bound(problem: Problem, costs: Ticks, classes: list[list[int]], upper: int | None,
                refined: bool = True, limits: Limits | None = None) -> StageBound | None:
    """The program's lower bound (see the module docstring); None when the problem is too large."""
    program = BoundProgram.of(problem, costs, classes, upper, limits=limits)
    return None if program is None else program.run(Round(refined=refined and program.links.differ))
