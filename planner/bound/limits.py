"""The sizes past which the bound gives up or starts over, in one place.

The stage program's work grows with the graph's width and the cluster's classes of devices; each
limit here caps one table so that a solve stays within memory and time, and past it the program
returns None (the solve goes on without its bound, CP-SAT alone) or drops what it had cached.
None of them changes a bound or a plan the program gives: they only decide whether it gives one.

>>> from dataclasses import replace
>>> LIMITS.max_ideals
30000
>>> replace(LIMITS, max_ideals=10).max_ideals  # what a test uses to make a graph "too wide"
10
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LIMITS", "Limits"]


@dataclass(frozen=True)
class Limits:
    """Every size limit of the stage program (see the module docstring)."""

    max_states: int = 4096
    """Device-count states (per-class counts × the groups of the stages before and after) the
    program may walk; more and it does not run (:meth:`pipeplan.planner.bound.program.BoundProgram.of`)."""

    max_ideals: int = 30_000
    """Ideals of the layer graph listed at most (:mod:`pipeplan.planner.bound.ideals`)."""

    max_cells: int = 30_000_000
    """Ideals × layers at most, so that the membership tables stay near 100 MB; also caps the
    (ideal × move) tables of the price windows, which are dropped beyond it."""

    max_pairs: int = 4_000_000
    """Candidate stages (pairs of ideals) that pass the compute test, at most
    (:mod:`pipeplan.planner.bound.candidates`)."""

    max_window_states: int = 4096
    """Device-count states the price windows are listed for; beyond, no windows
    (:meth:`pipeplan.planner.bound.prices.Prices.windows`)."""

    memory_cells: int = 4_000_000
    """Stages × layers looked at in one step when the largest workspace of a stage decides whether
    it fits (:func:`pipeplan.planner.bound.memory.fitting`): bounded memory."""

    max_held: int = 6_000_000
    """Expanded stages (a candidate stage with where each tensor it receives is held) over all
    classes, of the stages whose compute fits (:mod:`pipeplan.planner.bound.held`)."""

    max_held_ideals: int = 100_000
    """Expanded ideals: the program keeps an array of them per state."""

    held_chunk: int = 1 << 20
    """Expanded stages built at once: bounded memory while they are built."""

    cached_per_table: int = 30_000_000
    """int64 entries of charges kept between moves per table of candidate stages (a class's
    stages, a part of them, or its held stages; :class:`pipeplan.planner.bound.caches.Caches`):
    past it that table's cached charges are dropped and start over (240 MB)."""


LIMITS = Limits()  # what a solve uses; read at each call, so a test may replace it
