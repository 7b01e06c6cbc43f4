"""The candidate stages of the stage program: ideals, the stages between them, and what each stage
receives and sends (built by :mod:`pipeplan.planner.bound.candidates`).

An *ideal* is a predecessor-closed set of layers; a stage T \\ S lies between two ideals S ⊂ T.
A stage's receive list names each layer u of S whose output it reads, once; its send list each
layer of the stage read beyond it.  A receipt is *fresh* when it surely comes from the stage just
before, a send when it surely goes to the stage just after (see :mod:`pipeplan.planner.bound.candidates`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from pipeplan.planner.bound.limits import Limits
from pipeplan.planner.bound.prices import Prices
from pipeplan.planner.bound.state import Part, TableKey

__all__ = ["ClassStages", "Stages"]


@dataclass
class ClassStages:
    """The candidate stages on one class of devices, sorted by the ideal they end at.  Entry j of
    the receive (send) lists says that stage ``r_item[j]`` receives (sends) layer ``r_u[j]``'s output;
    ``s_count`` is how many consumers the sent layer has beyond the stage, ``s_chain`` how many of
    its chain of consumers (:attr:`Stages.chains`) lie in or before the stage."""

    src: np.ndarray
    dst: np.ndarray
    compute: np.ndarray
    r_item: np.ndarray
    r_u: np.ndarray
    r_fresh: np.ndarray
    r_max: np.ndarray  # the received layer is maximal in the ideal the stage starts from
    r_all: np.ndarray  # per stage: it receives every maximal layer of the ideal it starts from
    s_item: np.ndarray
    s_u: np.ndarray
    s_fresh: np.ndarray
    s_count: np.ndarray
    s_chain: np.ndarray
    # With a broadcast layer tracked (see Stages.split), its receipts and sends are left out of the
    # lists above: b_in is 1 where the stage receives its output, b_out where the stage sends it
    # (b_fresh: to the next stage for sure).
    b_in: np.ndarray | None = None
    b_out: np.ndarray | None = None
    b_fresh: np.ndarray | None = None
    b_count: np.ndarray | None = None  # its consumers beyond the stage

    def __post_init__(self) -> None:
        self.ends, self.starts = np.unique(self.dst, return_index=True)

    def subset(self, keep: np.ndarray, broadcast: int | None = None) -> ClassStages:
        """The stages where ``keep``, with their lists; ``broadcast``: that layer's receipts and
        sends go into :attr:`b_in`, :attr:`b_out` and :attr:`b_fresh` instead."""
        local = np.full(len(self.src), -1, dtype=np.int64)
        count = int(np.count_nonzero(keep))
        local[keep] = np.arange(count)
        lr, ls = local[self.r_item], local[self.s_item]
        r, s = lr >= 0, ls >= 0
        b_in = b_out = b_fresh = b_count = None
        r_all = self.r_all[keep]
        if broadcast is not None:
            b_in, b_out, b_fresh, b_count = (np.zeros(count, dtype=np.int64) for _ in range(4))
            b_in[lr[r & (self.r_u == broadcast)]] = 1
            sent = s & (self.s_u == broadcast)
            b_out[ls[sent]] = 1
            b_fresh[ls[sent]] = self.s_fresh[sent]
            b_count[ls[sent]] = self.s_count[sent]
            r_all = r_all.copy()
            r_all[lr[r & (self.r_u == broadcast) & self.r_max]] = False  # its receipt is tracked apart
            r &= self.r_u != broadcast
            s &= self.s_u != broadcast
        return ClassStages(self.src[keep], self.dst[keep], self.compute[keep], lr[r], self.r_u[r], self.r_fresh[r],
                           self.r_max[r], r_all, ls[s], self.s_u[s], self.s_fresh[s], self.s_count[s], self.s_chain[s],
                           b_in, b_out, b_fresh, b_count)

    # Where the receive (send) lists are fresh or not: the charges sum over one kind or the other.
    @cached_property
    def r_fresh_at(self) -> np.ndarray:
        return np.flatnonzero(self.r_fresh)

    @cached_property
    def r_stale_at(self) -> np.ndarray:
        return np.flatnonzero(~self.r_fresh)

    @cached_property
    def s_fresh_at(self) -> np.ndarray:
        return np.flatnonzero(self.s_fresh)

    @cached_property
    def s_stale_at(self) -> np.ndarray:
        return np.flatnonzero(~self.s_fresh)

    def ending_at(self, ideal: int) -> ClassStages:
        """The stages that end at ``ideal``, with their receive and send lists."""
        return self.subset(self.dst == ideal)


@dataclass
class Stages:
    member: np.ndarray  # (I, n) bool: layer v is in ideal i; ideal 0 is ∅, the last one all of V
    isolated: list[int]  # layers with no edges, in no ideal
    per_class: list[ClassStages]
    # For each layer u with several consumers: a chain of them (each a descendant of the one
    # before) and the least compute between chain members a and b: any stage that holds both also
    # holds every layer between them, so it computes at least span[a][b].
    chains: dict[int, tuple[list[int], np.ndarray]]
    frontier: tuple[np.ndarray, np.ndarray]  # (ideal, layer) pairs: the layer is in the ideal and read outside
    # Each ideal's price and the layer prices (pipeplan.planner.bound.prices): the windows that drop the
    # stages no plan under a ceiling can use; None when there are no windows to draw.
    price: np.ndarray | None = None
    prices: Prices | None = None

    def __post_init__(self) -> None:
        self.last = [cs.ending_at(self.ideals - 1) for cs in self.per_class]  # the stages that end a plan

    def table(self, key: TableKey) -> ClassStages:
        """The stages of one class, all or only those that end the plan (:attr:`TableKey.part` ALL)."""
        return (self.last if key.ends_plan else self.per_class)[key.cls]

    def split(self, layer: int) -> dict[TableKey, ClassStages]:
        """Per class, the stages before ``layer`` (BEFORE: in neither ideal), the stage that holds
        it (HOLDS), and those after it that receive its output (READS) or not (AFTER), each with the
        layer's receipts and sends apart (:meth:`ClassStages.subset`), all or only those that end
        the plan."""
        full = self.ideals - 1
        out: dict[TableKey, ClassStages] = {}
        for last in (False, True):
            for c, cs in enumerate(self.per_class):
                in_src, in_dst = self.member[cs.src, layer], self.member[cs.dst, layer]
                reads = np.zeros(len(cs.src), dtype=bool)
                reads[cs.r_item[cs.r_u == layer]] = True
                ends = cs.dst == full if last else np.ones(len(cs.src), dtype=bool)
                for part, keep in ((Part.BEFORE, ~in_dst), (Part.HOLDS, in_dst & ~in_src),
                                   (Part.READS, in_src & reads), (Part.AFTER, in_src & ~reads)):
                    out[TableKey(c, part, last, False)] = cs.subset(keep & ends, layer)
        return out

    def narrow(self, ceiling: int, limits: Limits) -> Stages:
        """The same stages without those that compute more than ``ceiling`` ticks or that no plan of
        bottleneck at most ``ceiling`` can use (:meth:`pipeplan.planner.bound.prices.Windows.admits`)."""
        windows = None
        if self.price is not None and self.prices is not None:
            windows = self.prices.windows(float(self.price[-1]), ceiling, limits.max_window_states)
        kept = []
        for c, cs in enumerate(self.per_class):
            keep = cs.compute <= ceiling
            if windows is not None and self.price is not None:
                keep &= windows.admits(c, self.price[cs.src], self.price[cs.dst])
            kept.append(cs.subset(keep))
        return Stages(self.member, self.isolated, kept, self.chains, self.frontier, self.price, self.prices)

    @property
    def ideals(self) -> int:
        return len(self.member)

    @property
    def pairs(self) -> int:
        return sum(len(cs.src) for cs in self.per_class)
