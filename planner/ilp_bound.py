"""A lower bound on the bottleneck, and plans near it: a dynamic program over chains of ideals.

Any plan, read in pipeline order, is a chain of ideals ∅ = S_0 ⊂ … ⊂ S_m = V, stage i holding
S_i \\ S_(i−1) on a device of its own (:mod:`pipeplan.planner.ilp_ideals`).  The program walks every such
chain, stage by stage, in a state that holds the devices used so far per class of interchangeable
devices (same speed column, capacity and links) and, when ``refined``, the link group of the stage
just before, the group promised to the next stage, the set of groups the stages still to come will
use (a stage's sends can only go there, so a plan that leaves a host for good pays the slow link for
every later send) and the group holding the broadcast layer with the number of stages still to
receive it.  It charges each stage as :mod:`pipeplan.planner.ilp_charges`
says: at most what the CP-SAT model charges that stage in any plan that fits the state.

Why the value bounds the model's optimum from below: take an optimal plan; its chain is one the
program walks (stages that cost more than ``upper``, a known plan's bottleneck, are skipped, and
the optimal plan has none), each of its stages is charged at most its cost in the model, so the
least bottleneck over chains is at most the plan's.  Layers with no edges are left out, which only
lowers the charges; they join the chain's stages afterwards.  With no chain at most ``upper`` the
value is ``upper``.

``pessimistic`` charges the most instead, so the chain found is a real plan that costs at most the
value (layers with no edges aside): an upper bound, often meeting the lower one.  ``spread``
assumes a bottleneck at most θ and so bounds only such plans: the bound is ``min(value, θ + 1)``.
``held`` θ walks the ideals expanded by the group that holds each tensor in flight
(:mod:`pipeplan.planner.ilp_held`), over the stages that cost at most θ: every receipt pays its real link,
and the bound is again ``min(value, θ + 1)``.

The recursion over pairs of ideals is that of Tarnawski et al., "Efficient algorithms for device
placement of DNN graph operators" (NeurIPS 2020), here with device classes and link-aware charges.
Time O(P·s) in numpy for P candidate stages and s moves between states.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from pipeplan.planner.ilp_charges import INF as _INF
from pipeplan.planner.ilp_charges import Charges, Key
from pipeplan.planner.ilp_held import HeldStages, HeldTables, held_tables
from pipeplan.planner.ilp_ideals import ClassStages, Stages, candidate_stages
from pipeplan.planner.ilp_prices import Prices
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import Problem

__all__ = ["MAX_STATES", "BoundProgram", "StageBound", "stage_bound"]

MAX_STATES = 4096
_FIRST_STEP = 0.01  # with no plan known, the first limit is this far above the price bound
_HELD_CACHE = 30_000_000  # charges of expanded stages kept (int64 entries), then the cache starts over

# (devices used per class, group of the last stage, group promised next, group holding the broadcast
# layer, stages that have still to receive it, groups of the stages still to come as a bit set)
State = tuple[tuple[int, ...], int, int, int, int, int]
Move = tuple[State, int, tuple[object, ...]]  # (state before, class of the stage, key of its costs)


@dataclass
class StageBound:
    """The program's value in ticks and a chain reaching it: ``dev_of`` (layer → device index) and
    ``order`` (used devices in pipeline order), empty when no chain costs at most ``upper`` (the
    value is then ``upper``)."""

    bound: int
    dev_of: list[int] = field(default_factory=list)
    order: list[int] = field(default_factory=list)


class BoundProgram:
    """Candidate stages of one problem, ready for :meth:`run`; :meth:`of` builds it, or returns None
    when the problem is too large."""

    def __init__(self, problem: Problem, costs: Ticks, classes: list[list[int]], stages: Stages, limit: int) -> None:
        self.problem, self.costs, self.classes, self.stages, self.limit = problem, costs, classes, stages, limit
        self.sizes = [len(c) for c in classes]
        self.max_devices = problem.options.max_devices or problem.n_devices
        self.serial = problem.options.comm == "serial"
        self.charges = Charges(problem, costs, classes, stages, limit)
        self.group_of = self.charges.group_of
        self.n_groups = max(self.group_of) + 1
        self.broadcast = self.charges.broadcast
        self._held_tables: HeldTables | None = None
        self._held_limit = -1  # the limit the expanded stages were built with
        self._held_too_many: int | None = None  # the least limit at which there were too many held stages
        self._held_costs: dict[tuple[object, ...], np.ndarray] = {}

    @classmethod
    def of(cls, problem: Problem, costs: Ticks, classes: list[list[int]], upper: int | None,
           deadline: float | None = None, use_windows: bool = True) -> BoundProgram | None:
        """The program over the candidate stages under ``upper`` (a known plan's bottleneck in
        ticks; None: no limit), without those the price windows rule out unless ``use_windows``
        is False (they change no value or chain: :mod:`pipeplan.planner.ilp_prices`)."""
        if math.prod(len(c) + 1 for c in classes) * (len(classes) + 1) ** 2 > MAX_STATES:
            return None
        if upper is None and use_windows:
            return cls._near_prices(problem, costs, classes, deadline)
        limit = _INF if upper is None else upper
        stages = candidate_stages(problem, costs, classes, limit, deadline, use_windows)
        return None if stages is None else cls(problem, costs, classes, stages, limit)

    @classmethod
    def _near_prices(cls, problem: Problem, costs: Ticks, classes: list[list[int]],
                     deadline: float | None) -> BoundProgram | None:
        """With no plan known, the program under the least limit, 1%, 2%, 4%, … above the price
        bound (:mod:`pipeplan.planner.ilp_prices`), at which its pessimistic run finds a plan: the windows
        then keep few stages, where no limit would keep them all (2.9 million on Llama-2 7B).
        Values stay bounds: a limit only makes stages above it impossible (the value is then at
        most the limit, and no plan is below it)."""
        prices = Prices.of(problem, costs, classes)
        floor = max(prices.bound(), 1)
        step = _FIRST_STEP
        while (limit := math.ceil(floor * (1 + step))) < costs.horizon:
            stages = candidate_stages(problem, costs, classes, limit, deadline, prices=prices)
            if stages is None:
                return None
            program = cls(problem, costs, classes, stages, limit)
            found = program.run(pessimistic=True, deadline=deadline)
            if found is None:
                return None
            if found.dev_of:
                return program
            step *= 2
        stages = candidate_stages(problem, costs, classes, _INF, deadline, use_windows=False)
        return None if stages is None else cls(problem, costs, classes, stages, _INF)

    def tighten(self, upper: int) -> None:
        """Drop the stages that compute more than ``upper``, a known plan's bottleneck, and charge
        any stage above it as impossible: later rounds run faster, and the expanded stages of
        :mod:`pipeplan.planner.ilp_held` are fewer.  Bounds stay valid: a plan that beats ``upper`` has no
        such stage."""
        if upper < self.limit:
            self.stages = self.stages.narrow(upper)
            self.charges.narrow(self.stages, upper)
            self.limit = upper
            self._held_tables, self._held_too_many = None, None
            self._held_costs.clear()

    @property
    def ideals(self) -> int:
        return self.stages.ideals

    @property
    def pairs(self) -> int:
        return self.stages.pairs

    # -- the program ------------------------------------------------------------------------------------

    def _moves(self, state: State, mode: str, refined: bool, spread: int | None,
               exact_receipts: bool = False) -> list[tuple[int, State, tuple[object, ...]]]:
        """(class, state after, cost key) for each stage that can follow ``state``; with
        ``exact_receipts`` (held stages) neither the group before nor the broadcast layer is tracked."""
        counts, last, promised, holder, owed, future = state
        used = frozenset(c for c, z in enumerate(counts) if z)
        out: list[tuple[int, State, tuple[object, ...]]] = []
        for c, z in enumerate(counts):
            if z >= self.sizes[c] or sum(counts) >= self.max_devices or not len(self.stages.per_class[c].src):
                continue
            if refined and self.group_of[c] != promised:
                continue
            after = (*counts[:c], z + 1, *counts[c + 1:])
            room = min(self.max_devices, sum(self.sizes)) - sum(after)
            full_left = tuple(min(self.sizes[x] - y, room) if room > 0 else 0 for x, y in enumerate(after))
            if not refined:
                left, some_room = self._left(full_left, room, mode, spread)
                out.append((c, (after, 0, 0, -1, -1, 0),
                            (mode, False, -1, -1, used, left, some_room, spread, "all", -1, -1)))
                continue
            g = self.group_of[c]
            for later in sorted({future & ~(1 << g), future}):  # groups of the stages after this one
                # Sends go only to devices of those groups: the others are never used again.
                later_left = tuple(y if later >> self.group_of[x] & 1 else 0 for x, y in enumerate(full_left))
                later_room = min(room, sum(later_left))
                reachable = sum({1 << self.group_of[x] for x, y in enumerate(later_left) if y})
                if reachable != later or later_room < bin(later).count("1"):
                    continue  # a group promised for later has no device left
                left, some_room = self._left(later_left, later_room, mode, spread)
                # (part of the stages, group holding the broadcast layer, its sends still owed, sends charged)
                parts = [("all", -1, -1, -1)]
                tracked = self.broadcast is not None and not exact_receipts
                if tracked and holder < 0:  # this stage comes before the layer, or holds it
                    sends = [(d, d) for d in range(later_room + 1)] if self.charges.count_sends else [(-2, -1)]
                    parts = [("before", -1, -1, -1)] + [("holds", g, o, d) for o, d in sends]
                elif tracked:
                    parts = [("after", holder, owed, -1)] + ([("reads", holder, owed - 1, -1)] if owed > 0 else [])
                    if owed == -2:  # its sends are not counted
                        parts = [("after", holder, owed, -1), ("reads", holder, owed, -1)]
                nexts = [h for h in range(self.n_groups) if later >> h & 1] or [-1]  # -1: the last stage
                for nxt in nexts:
                    for part, holds, still, copies in parts:
                        exact = part == "holds"
                        out.append((c, (after, -1 if exact_receipts else g, nxt, holds, still, later),
                                    (mode, True, last, nxt, used, later_left if exact else left,
                                     later_room if exact else some_room, spread, part, holds, copies)))
        return out

    @staticmethod
    def _left(full_left: tuple[int, ...], room: int, mode: str, spread: int | None) -> tuple[tuple[int, ...], int]:
        """Devices left per class and in all, as the charges need them: only whether one is left
        (fewer distinct costs) unless the counts matter (pessimistic charges, a spread)."""
        if mode == "high" or spread is not None:
            return full_left, room
        return tuple(min(y, 1) for y in full_left), min(room, 1)

    def run(self, pessimistic: bool = False, refined: bool = False, spread: int | None = None,
            deadline: float | None = None, likely: bool = False, held: int | None = None) -> StageBound | None:
        """The least bottleneck over chains under the lowest (or highest) charges, with a chain.

        ``spread`` θ: assume a plan whose bottleneck is at most θ, so that no stage computes more
        than θ: then a layer whose consumers lie far apart must be sent to at least as many stages
        as it takes to hold them (:meth:`Charges.destinations`), and is charged so.  The value V then bounds
        such plans only: the bound is ``min(V, θ + 1)`` (plans above θ are at least θ + 1).

        ``likely`` (with ``refined``): no bound, a guess at good plans: every receipt and send is
        charged as if it went between neighbouring stages, over their link.

        ``held`` θ (with ``refined``): only the stages that cost at most θ, each knowing which group
        holds each tensor it receives (:mod:`pipeplan.planner.ilp_held`), so that receipts are charged
        exactly; the stage before and the broadcast layer are not tracked.  As with a spread, the
        value V bounds only plans whose bottleneck is at most θ: the bound is ``min(V, θ + 1)``.

        None when ``time.perf_counter()`` passes ``deadline`` first, or when ``held`` and the
        expanded stages are too many."""
        mode = "likely" if likely else "high" if pessimistic else "low"
        if held is not None and not refined:
            raise ValueError("held stages need refined=True: the state must promise each stage's group")
        tables = None if held is None else self._held(min(held, self.limit), deadline)
        if held is not None and tables is None:
            return None
        n_ideals = self.ideals if tables is None else tables.size
        full = n_ideals - 1  # breadth-first: the whole graph comes last (its map is empty)
        empty = tuple(0 for _ in self.classes)
        start = np.full(n_ideals, _INF, dtype=np.int64)
        start[0] = 0
        groups = sorted(set(self.group_of))
        if refined:  # the first stage's group, and the set of groups the plan uses
            firsts: list[State] = [(empty, -1, g, -1, -1, f) for f in range(1, 1 << self.n_groups)
                                   for g in groups if f >> g & 1]
        else:
            firsts = [(empty, 0, 0, -1, -1, 0)]
        best: dict[State, np.ndarray] = dict.fromkeys(firsts, start)
        incoming: dict[State, list[Move]] = {}
        level = firsts
        while level:
            following: list[State] = []
            for state in level:
                for c, target, key in self._moves(state, mode, refined, spread, exact_receipts=held is not None):
                    if deadline is not None and time.perf_counter() > deadline:
                        return None
                    cs, cost = self._table(c, key, tables)
                    if not len(cs.src):
                        continue
                    vals = np.maximum(best[state][cs.src], cost)
                    mins = np.minimum.reduceat(vals, cs.starts)
                    if mins.min() >= _INF:
                        continue
                    if target not in best:
                        best[target] = np.full(n_ideals, _INF, dtype=np.int64)
                        incoming[target] = []
                        following.append(target)
                    best[target][cs.ends] = np.minimum(best[target][cs.ends], mins)
                    incoming[target].append((state, c, key))
            level = following
        finals = [(int(arr[full]), s) for s, arr in best.items()
                  if s not in firsts and arr[full] < _INF and s[5] == 0 and s[4] <= 0]  # no group still promised
        if not finals:  # nothing beats ``upper`` (or, with no upper, nothing fits at all)
            return StageBound(self.limit if self.limit < _INF else 0)
        value, state = min(finals)

        # read back one chain that reaches the value, last stage first
        chain: list[tuple[int, int, int]] = []
        cur = full
        while state not in firsts:
            for before, c, key in incoming[state]:
                cs, cost = self._table(c, key, tables)
                lo, hi = np.searchsorted(cs.dst, cur, side="left"), np.searchsorted(cs.dst, cur, side="right")
                vals = np.maximum(best[before][cs.src[lo:hi]], cost[lo:hi])
                hits = np.flatnonzero(vals == best[state][cur])
                if len(hits):
                    frm = int(cs.src[lo + hits[0]])
                    chain.append((c, frm, cur) if tables is None
                                 else (c, int(tables.ideal_of[frm]), int(tables.ideal_of[cur])))
                    cur, state = frm, before
                    break
            else:  # pragma: no cover - the values were built from these very arrays
                raise AssertionError("stage program: no chain reaches its own value")
        return self._plan(value, chain[::-1])

    def _held(self, limit: int, deadline: float | None) -> HeldTables | None:
        """The stages expanded by where their receipts are held, those that cost at most ``limit``
        (built again only for another limit)."""
        if self._held_tables is not None and self._held_limit == limit:
            return self._held_tables
        if self._held_too_many is not None and limit >= self._held_too_many:
            return None
        self._held_tables = held_tables(self.problem, self.stages, self.charges, limit, deadline)
        self._held_limit = limit
        if self._held_tables is None:  # too many (or out of time, and then no later round runs)
            self._held_too_many = limit if self._held_too_many is None else min(limit, self._held_too_many)
        self._held_costs.clear()
        return self._held_tables

    def _table(self, c: int, key: Key, tables: HeldTables | None) -> tuple[ClassStages | HeldStages, np.ndarray]:
        """The class-c stages a move with this key takes, and their charges."""
        if tables is None:
            return self.charges.table(c, key), self.charges.cost(c, key)
        ends_plan = Charges.ends_plan(key)
        hs = (tables.last if ends_plan else tables.per_class)[c]
        mode, refined, _, after, _, left, room, spread, _, _, _ = key
        sends_key = (c, ends_plan, mode, refined, after, left, room, spread)  # what the sends depend on
        if sends_key not in self._held_costs:
            if sum(len(a) for a in self._held_costs.values()) > _HELD_CACHE:
                self._held_costs.clear()
            send = self.charges.sends(tables.stages[c], c, key)[hs.pair]
            self._held_costs[sends_key] = self.charges.combine(hs.fixed, 0, send)
        return hs, self._held_costs[sends_key]

    def _plan(self, value: int, chain: list[tuple[int, int, int]]) -> StageBound:
        """The chain's stages on devices (each class's devices in their order), each layer with no
        edges added where the stage stays shortest (and fits in memory, if any can)."""
        member = self.stages.member
        used = [0] * len(self.classes)
        dev_of = [-1] * self.problem.n_layers
        order: list[int] = []
        for c, frm, to in chain:
            device = self.classes[c][used[c]]
            used[c] += 1
            order.append(device)
            for v in np.flatnonzero(member[to] & ~member[frm]).tolist():
                dev_of[v] = device
        if self.stages.isolated:
            problem, isolated = self.problem, self.stages.isolated
            for v in isolated:
                dev_of[v] = order[0]
            compute, recv, send = self.costs.stage_costs(problem, dev_of)
            compute[order[0]] -= int(sum(self.costs.compute[v, order[0]] for v in isolated))
            layers = {d: [v for v, dv in enumerate(dev_of) if dv == d and v not in isolated] for d in order}

            def time_with(d: int, v: int) -> tuple[int, int]:
                more = int(compute[d] + self.costs.compute[v, d])
                fits = problem.memory([*layers[d], v]) <= problem.capacity[d]
                return (0 if fits else 1, more + int(recv[d] + send[d]) if self.serial else max(more, recv[d], send[d]))

            for v in sorted(isolated, key=lambda v: -int(self.costs.compute[v].max())):
                d = min(order, key=lambda d: time_with(d, v))  # where the stage stays shortest
                dev_of[v] = d
                compute[d] += self.costs.compute[v, d]
                layers[d].append(v)
        return StageBound(value, dev_of, order)


def stage_bound(problem: Problem, costs: Ticks, classes: list[list[int]], upper: int | None,
                refined: bool = True) -> StageBound | None:
    """The program's lower bound (see the module docstring); None when the problem is too large."""
    program = BoundProgram.of(problem, costs, classes, upper)
    return None if program is None else program.run(refined=refined and len(set(program.group_of)) > 1)
