"""What the stage program walks and what it caches under: its rounds, states and keys.

A *round* (:class:`Round`) says how a run charges each stage and what it assumes.  A *state*
(:class:`State`) is where a chain of stages stands: the devices it has used and, in refined rounds,
the link groups around its last stage and where the broadcast layer is.  A move from a state takes
one more stage, on a class of devices, and its charges depend on a few of the state's components:
the *charge key* (:class:`ChargeKey`).  The other keys name the arrays the program caches
(:mod:`pipeplan.planner.bound.caches`).

The states and keys are NamedTuples: tuples, so they hash and compare as fast as bare tuples
(states are compared when two chains tie), with names a reader can follow; the modes are StrEnums,
which hash as fast as strings.  Sentinels are named constants rather than ``None`` because they
are ordered with the counts they stand beside.

>>> State(used=(1, 0), group=0, next_group=1, holder=NO_GROUP, owed=NOT_PLACED, later=0b10).finished
False
>>> Round(Charging.HIGH, refined=True).bounds
False
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

__all__ = ["AT_LEAST_ONE", "NOT_PLACED", "NO_GROUP", "UNCOUNTED", "ChargeKey", "Charging", "HeldKey", "Part",
           "Round", "State", "Sum", "SumKey", "TableKey"]

NO_GROUP = -1  # no link group: before the first stage, after the last one, or the broadcast layer not placed
NOT_PLACED = -1  # State.owed while no stage holds the broadcast layer (or it is not tracked)
UNCOUNTED = -2  # State.owed when the broadcast layer's sends are not counted (overlap mode)
AT_LEAST_ONE = -1  # ChargeKey.copies: the broadcast layer is sent at least once, not an exact count


class Charging(StrEnum):
    """How a round charges each stage (:mod:`pipeplan.planner.bound.charges`)."""

    LOW = "low"  # at most the model's charge in any plan that fits the state: the value is a lower bound
    HIGH = "high"  # at least it: the chain found is a real plan that costs at most the value
    LIKELY = "likely"  # every receipt and send over the link between neighbouring stages: a guess at plans


class Part(StrEnum):
    """Which of the stages around the broadcast layer a move may take (ALL: the layer is not
    tracked); :meth:`pipeplan.planner.bound.stages.Stages.split`."""

    ALL = "all"
    BEFORE = "before"  # the layer is in neither end of the stage
    HOLDS = "holds"  # the stage computes it
    READS = "reads"  # a later stage that receives its output
    AFTER = "after"  # a later stage that does not


@dataclass(frozen=True)
class Round:
    """One run of the stage program (:meth:`pipeplan.planner.bound.program.BoundProgram.run`).

    ``spread`` θ: assume a plan whose bottleneck is at most θ, so that a layer whose consumers lie
    far apart is sent to as many stages as it takes to hold them.  ``held`` θ (needs ``refined``):
    walk only the stages that cost at most θ, each knowing which group holds each tensor it
    receives (:mod:`pipeplan.planner.bound.held`).  Either way the value V bounds only plans whose
    bottleneck is at most θ: the bound is ``min(V, θ + 1)`` (:attr:`assumed`)."""

    charging: Charging = Charging.LOW
    refined: bool = False  # track link groups: the stage before, the one after, the groups still to come
    spread: int | None = None
    held: int | None = None

    def __post_init__(self) -> None:
        if self.held is not None and not self.refined:
            raise ValueError("held stages need refined=True: the state must promise each stage's group")

    @property
    def bounds(self) -> bool:
        """Whether the run's value is a lower bound (low charges) rather than a plan's cost or a guess."""
        return self.charging is Charging.LOW

    @property
    def assumed(self) -> int | None:
        """The bottleneck the run assumes plans have at most (its value bounds only those)."""
        return self.spread if self.spread is not None else self.held


class State(NamedTuple):
    """Where a chain of stages stands (:mod:`pipeplan.planner.bound.moves`); in plain rounds only
    ``used`` changes and the rest stay (0, 0, NO_GROUP, NOT_PLACED, 0)."""

    used: tuple[int, ...]  # devices used so far, per class
    group: int  # link group of the last stage (NO_GROUP before the first, or with exact receipts)
    next_group: int  # the group promised to the next stage (NO_GROUP: the last one is placed)
    holder: int  # the group holding the broadcast layer (NO_GROUP: not placed yet, or not tracked)
    owed: int  # later stages still to receive the broadcast layer (NOT_PLACED, UNCOUNTED)
    later: int  # the groups of the stages still to come, as a bit set

    @property
    def finished(self) -> bool:
        """Whether a chain may end here: no group promised for later, no receipt still owed."""
        return self.later == 0 and self.owed <= 0


class ChargeKey(NamedTuple):
    """What the charges of a move's stages depend on (:meth:`pipeplan.planner.bound.charges.Charges.cost`)."""

    cls: int  # the class of devices the stage runs on
    charging: Charging
    refined: bool
    previous: int  # group of the stage before (NO_GROUP: none)
    following: int  # group promised to the next stage (NO_GROUP: this is the last stage)
    classes_used: frozenset[int]  # classes used before
    left: tuple[int, ...]  # devices left after, per class (at most 1 unless the counts matter)
    room: int  # devices left after, in all (likewise)
    spread: int | None  # Round.spread
    part: Part
    holder: int  # group holding the broadcast layer (NO_GROUP)
    copies: int  # copies of the broadcast layer the stage sends (AT_LEAST_ONE: not counted)

    @property
    def ends_plan(self) -> bool:
        """Whether the stage is promised to be the last one (refined, no group next)."""
        return self.refined and self.following == NO_GROUP

    @property
    def table(self) -> TableKey:
        """The stages a move with this key takes."""
        return TableKey(self.cls, self.part, self.ends_plan, False)


class TableKey(NamedTuple):
    """One table of candidate stages: a class's, one part of them, only those that end the plan, or
    the stages :mod:`pipeplan.planner.bound.held` kept."""

    cls: int
    part: Part
    ends_plan: bool
    held: bool


class Sum(StrEnum):
    """What a cached per-stage sum adds up (:meth:`pipeplan.planner.bound.charges.Charges._sum`)."""

    RECEIPTS = "receipts"  # over the cheapest (dearest) link from a class used before
    FROM_PREVIOUS = "from previous"  # over the link from the stage before
    ONE_FRESH = "one fresh"  # the surcharge of one receipt surely from the stage before
    SENDS = "sends"  # to devices left
    TO_FOLLOWING = "to following"  # one copy to the next stage, the rest to devices left


class SumKey(NamedTuple):
    """A cached per-stage sum of some of a table's receipts or sends, and what it depends on;
    the fields a kind of sum does not read keep their defaults."""

    table: TableKey
    kind: Sum
    pessimistic: bool = False  # the dearest links instead of the cheapest
    likely: bool = False  # every entry, not only the fresh ones (FROM_PREVIOUS, TO_FOLLOWING)
    split: bool = False  # only the entries that are not fresh (RECEIPTS, SENDS)
    group: int = NO_GROUP  # the group before (FROM_PREVIOUS, ONE_FRESH) or after (TO_FOLLOWING)
    classes_used: frozenset[int] = frozenset()
    left: tuple[int, ...] = ()
    room: int = 0
    spread: int | None = None


class HeldKey(NamedTuple):
    """What the charges of held stages depend on (their compute and receipts are fixed): the sends'
    part of a :class:`ChargeKey`."""

    cls: int
    ends_plan: bool
    charging: Charging
    refined: bool
    following: int
    left: tuple[int, ...]
    room: int
    spread: int | None

    @property
    def table(self) -> TableKey:
        """The held stages the charges run over (for the cache's accounting)."""
        return TableKey(self.cls, Part.ALL, self.ends_plan, True)
