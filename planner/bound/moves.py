"""The states of the stage program and the moves between them.

A chain starts from a first state (:meth:`Moves.firsts`) and takes one stage per move, on a class of
devices with one left; the state after counts that device.  In refined rounds the state also says
the link group of the stage just placed, the group promised to the next one (the move must keep
that promise), the set of groups the stages still to come will use (a stage's sends can only go
there, so a plan that leaves a host for good pays the slow link for every later send), and where
the broadcast layer is: not placed yet, held by a group, with the number of later stages that
still have to receive it where its sends are counted (:mod:`pipeplan.planner.bound.charges`).

Each move carries the :class:`pipeplan.planner.bound.state.ChargeKey` of its charges; the order of the
moves is part of the program (the chain read back is the first that reaches the value).
"""

from __future__ import annotations

from pipeplan.planner.bound.links import Links
from pipeplan.planner.bound.state import (
    AT_LEAST_ONE,
    NO_GROUP,
    NOT_PLACED,
    UNCOUNTED,
    ChargeKey,
    Charging,
    Part,
    Round,
    State,
)
from pipeplan.planner.problem import Problem

__all__ = ["Moves"]

# (part of the stages, group holding the broadcast layer, its receipts still owed, copies sent)
_Side = tuple[Part, int, int, int]


class Moves:
    """The moves of one problem's chains (see the module docstring); ``broadcast``: the layer
    whose receipts and sends are tracked (:attr:`pipeplan.planner.bound.charges.Charges.broadcast`),
    ``count_sends``: whether its sends are counted."""

    def __init__(self, problem: Problem, classes: list[list[int]], links: Links, broadcast: int | None,
                 count_sends: bool) -> None:
        self.sizes = [len(c) for c in classes]
        self.max_devices = problem.options.max_devices or problem.n_devices
        self.group_of = links.group_of
        self.n_groups = links.groups
        self.broadcast, self.count_sends = broadcast, count_sends

    def firsts(self, refined: bool) -> list[State]:
        """The states a chain starts from: refined, one per first group and set of groups used."""
        empty = tuple(0 for _ in self.sizes)
        if not refined:
            return [State(empty, 0, 0, NO_GROUP, NOT_PLACED, 0)]
        return [State(empty, NO_GROUP, g, NO_GROUP, NOT_PLACED, f) for f in range(1, 1 << self.n_groups)
                for g in sorted(set(self.group_of)) if f >> g & 1]

    def after(self, state: State, round_: Round, usable: list[bool]) -> list[tuple[State, ChargeKey]]:
        """(state after, charge key) for each stage that can follow ``state`` (``usable[c]``: class c
        has candidate stages); with held stages (``round_.held``) neither the group before nor the
        broadcast layer is tracked: the receipts are exact."""
        exact_receipts = round_.held is not None
        used = frozenset(c for c, z in enumerate(state.used) if z)
        out: list[tuple[State, ChargeKey]] = []
        for c, z in enumerate(state.used):
            if z >= self.sizes[c] or sum(state.used) >= self.max_devices or not usable[c]:
                continue
            if round_.refined and self.group_of[c] != state.next_group:
                continue
            counts = (*state.used[:c], z + 1, *state.used[c + 1:])
            room = min(self.max_devices, sum(self.sizes)) - sum(counts)
            full_left = tuple(min(self.sizes[x] - y, room) if room > 0 else 0 for x, y in enumerate(counts))
            if not round_.refined:
                left, some_room = self._left(full_left, room, round_)
                out.append((State(counts, 0, 0, NO_GROUP, NOT_PLACED, 0),
                            ChargeKey(c, round_.charging, False, NO_GROUP, NO_GROUP, used, left, some_room,
                                      round_.spread, Part.ALL, NO_GROUP, AT_LEAST_ONE)))
                continue
            g = self.group_of[c]
            for later in sorted({state.later & ~(1 << g), state.later}):  # groups of the stages after this one
                # Sends go only to devices of those groups: the others are never used again.
                later_left = tuple(y if later >> self.group_of[x] & 1 else 0 for x, y in enumerate(full_left))
                later_room = min(room, sum(later_left))
                reachable = sum({1 << self.group_of[x] for x, y in enumerate(later_left) if y})
                if reachable != later or later_room < bin(later).count("1"):
                    continue  # a group promised for later has no device left
                left, some_room = self._left(later_left, later_room, round_)
                sides = self._sides(state, g, later_room, tracked=self.broadcast is not None and not exact_receipts)
                nexts = [h for h in range(self.n_groups) if later >> h & 1] or [NO_GROUP]  # none: the last stage
                for nxt in nexts:
                    for part, holder, owed, copies in sides:
                        exact = part is Part.HOLDS  # its sends are counted one by one
                        out.append((State(counts, NO_GROUP if exact_receipts else g, nxt, holder, owed, later),
                                    ChargeKey(c, round_.charging, True, state.group, nxt, used,
                                              later_left if exact else left, later_room if exact else some_room,
                                              round_.spread, part, holder, copies)))
        return out

    def _sides(self, state: State, g: int, room: int, tracked: bool) -> list[_Side]:
        """Where a stage on group ``g`` may lie around the broadcast layer, with the state's
        holder and receipts owed after it and the copies it sends (see :data:`_Side`)."""
        if not tracked:
            return [(Part.ALL, NO_GROUP, NOT_PLACED, AT_LEAST_ONE)]
        if state.holder == NO_GROUP:  # this stage comes before the layer, or holds it
            sends = [(d, d) for d in range(room + 1)] if self.count_sends else [(UNCOUNTED, AT_LEAST_ONE)]
            return ([(Part.BEFORE, NO_GROUP, NOT_PLACED, AT_LEAST_ONE)]
                    + [(Part.HOLDS, g, owed, copies) for owed, copies in sends])
        if state.owed == UNCOUNTED:  # its sends are not counted
            return [(Part.AFTER, state.holder, UNCOUNTED, AT_LEAST_ONE), (Part.READS, state.holder, UNCOUNTED,
                                                                          AT_LEAST_ONE)]
        return ([(Part.AFTER, state.holder, state.owed, AT_LEAST_ONE)]
                + ([(Part.READS, state.holder, state.owed - 1, AT_LEAST_ONE)] if state.owed > 0 else []))

    @staticmethod
    def _left(full_left: tuple[int, ...], room: int, round_: Round) -> tuple[tuple[int, ...], int]:
        """Devices left per class and in all, as the charges need them: only whether one is left
        (fewer distinct costs) unless the counts matter (pessimistic charges, a spread)."""
        if round_.charging is Charging.HIGH or round_.spread is not None:
            return full_left, room
        return tuple(min(y, 1) for y in full_left), min(room, 1)
