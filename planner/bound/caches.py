"""Every array the stage program keeps between moves, in one owner.

A new state mostly costs a few additions over the stages because what a stage is charged is
summed in parts that depend on few of the state's components (:mod:`pipeplan.planner.bound.charges`);
those parts, the charges they add up to, the charges of held stages and the split tables are kept
here, each kind under one key type (:mod:`pipeplan.planner.bound.state`).  Nothing here changes a
value: a dropped array is computed again.  Each key names the table of candidate stages its array
runs over (:class:`pipeplan.planner.bound.state.TableKey`); when the arrays of one table hold more
than :attr:`pipeplan.planner.bound.limits.Limits.cached_per_table` int64 entries, that table's
start over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np

from pipeplan.planner.bound.stages import ClassStages
from pipeplan.planner.bound.state import ChargeKey, HeldKey, SumKey, TableKey

__all__ = ["Caches"]

K = TypeVar("K", ChargeKey, SumKey, HeldKey)


class Caches:
    """The program's cached arrays (see the module docstring)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget  # int64 entries kept at most per table
        self.charges: dict[ChargeKey, np.ndarray] = {}  # what each stage of a move's table is charged
        self.sums: dict[SumKey, np.ndarray] = {}  # per-stage sums of some receipts or sends
        self.held: dict[HeldKey, np.ndarray] = {}  # what each held stage is charged
        self.destinations: dict[int, np.ndarray] = {}  # per spread: Charges.destinations (the chains only)
        self.tables: dict[TableKey, ClassStages] = {}  # the stages split around the broadcast layer
        self.entries: dict[TableKey, int] = {}  # int64 entries kept per table, in charges, sums and held
        self.restarts = 0  # times a table passed the budget and its arrays were dropped

    def keep(self, store: dict[K, np.ndarray], key: K, value: np.ndarray) -> np.ndarray:
        """``value`` kept in ``store`` (one of :attr:`charges`, :attr:`sums`, :attr:`held`) under
        ``key``, after dropping its table's arrays if it would pass the budget."""
        table = key.table
        kept = self.entries.get(table, 0)
        if kept + len(value) > self.budget:
            self._drop(lambda t: t == table)
            kept = 0
            self.restarts += 1
        store[key] = value
        self.entries[table] = kept + len(value)
        return value

    def forget_stages(self) -> None:
        """Drop everything computed over the candidate stages: they were narrowed."""
        self._drop(lambda t: True)
        self.tables.clear()

    def forget_held(self) -> None:
        """Drop everything computed over the held stages: they were built again."""
        self._drop(lambda t: t.held)

    def _drop(self, which: Callable[[TableKey], bool]) -> None:
        """Drop the arrays over the tables ``which`` picks."""
        for store in (self.charges, self.sums, self.held):
            for key in [k for k in store if which(k.table)]:
                del store[key]  # type: ignore[arg-type]
        for table in [t for t in self.entries if which(t)]:
            del self.entries[table]
