"""Candidate stages that know where each tensor they receive is held, for exact receipts.

The stage program of :mod:`planner.ilp_bound` walks chains of ideals without knowing which earlier
stage computed a tensor that a stage receives, so it charges the cheapest link from any group of
devices used before.  On branchy graphs spread over two hosts that is far too cheap: a plan that
keeps hopping between the hosts is charged as if every tensor came over NVLink.

Here each ideal S is expanded by a *holding map*: for each layer of its frontier F(S) (in S, read
outside S, with a transfer that is not free) the link group of the stage that computed it, one of G.
A stage T \\ S on a device of group g, entered from (S, map), receives each frontier layer it reads
over the link from that layer's group into g, which is exactly the model's receive time for the
stage (a receipt comes from the one device that holds the layer, and a link group is defined by all
its links costing the same).  After the stage the map is the old one on the layers still in the
frontier of T, and g on those the stage added.

Sizes: Σ_S G^|F(S)| expanded ideals and Σ_(S,T) G^|F(S)| expanded stages, built per device class
with numpy; the stages whose compute and receipts alone pass the limit are dropped as they are built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.ilp_charges import INF, Charges
from planner.ilp_ideals import Stages
from planner.problem import Problem

__all__ = ["MAX_HELD", "HeldStages", "HeldTables", "held_tables"]

MAX_HELD = 6_000_000  # expanded stages over all classes, before the limit drops any
_CHUNK = 1 << 20  # expanded stages built at once


@dataclass
class HeldStages:
    """The expanded stages of one device class, sorted by the expanded ideal they end at."""

    src: np.ndarray  # expanded ideal the stage starts from
    dst: np.ndarray  # expanded ideal it ends at
    pair: np.ndarray  # the stage in Stages.per_class[c]: its compute and sends
    recv: np.ndarray  # its receipts in ticks, exact
    fixed: np.ndarray  # its compute and receipts together: their max (overlap) or sum (serial)

    def __post_init__(self) -> None:
        self.ends, self.starts = np.unique(self.dst, return_index=True)

    def subset(self, keep: np.ndarray) -> HeldStages:
        return HeldStages(self.src[keep], self.dst[keep], self.pair[keep], self.recv[keep], self.fixed[keep])


@dataclass
class HeldTables:
    ideal_of: np.ndarray  # expanded ideal → ideal
    per_class: list[HeldStages]
    last: list[HeldStages]  # per class, the stages that end the plan

    @property
    def size(self) -> int:
        return len(self.ideal_of)


def _frontiers(problem: Problem, stages: Stages, charges: Charges) -> tuple[np.ndarray, np.ndarray]:
    """``front[i, v]``: layer v is in the frontier of ideal i and costs something to receive on some
    link; ``pos[i, v]``: its place in that frontier (in layer order)."""
    member = stages.member
    inside = np.zeros(member.shape, dtype=np.int32)  # consumers of each layer inside each ideal
    for u, v in problem.edges:
        inside[:, u] += member[:, v]
    outdeg = np.array([len(s) for s in problem.succ], dtype=np.int32)
    costly = charges.between.reshape(problem.n_layers, -1).max(axis=1) > 0
    front = member & (inside < outdeg[None, :]) & costly[None, :]
    pos = np.cumsum(front, axis=1) - 1
    return front, pos


def held_tables(problem: Problem, stages: Stages, charges: Charges, classes: list[list[int]], limit: int,
                deadline: float | None = None) -> HeldTables | None:
    """The expanded stages of every class whose compute and receipts fit ``limit`` (overlap: each
    of them; serial: their sum); None when there would be more than :data:`MAX_HELD` or
    ``time.perf_counter()`` passes ``deadline``."""
    groups = max(charges.group_of) + 1
    front, pos = _frontiers(problem, stages, charges)
    width = front.sum(axis=1)
    most = int(width.max(initial=0))
    n_ideals = len(width)
    expanded = sum(float((groups ** width[cs.src[cs.compute <= limit]].astype(np.float64)).sum())
                   for cs in stages.per_class)
    if expanded > MAX_HELD:
        return None
    size = groups ** width
    base = np.concatenate([[0], np.cumsum(size)]).astype(np.int64)
    ideal_of = np.repeat(np.arange(n_ideals), size)
    # The frontier layers of each ideal in order, padded with -1.
    listed = np.full((n_ideals, max(most, 1)), -1, dtype=np.int64)
    rows, cols = np.nonzero(front)
    listed[rows, pos[rows, cols]] = cols
    full = n_ideals - 1
    per_class: list[HeldStages] = []
    for c, cs in enumerate(stages.per_class):
        g = charges.group_of[c]
        # what a receipt costs from each group: weight[j, p, h] for the p-th frontier layer of the
        # stage's start, held by group h (0 where the stage does not read it)
        weight = np.zeros((len(cs.src), max(most, 1), groups), dtype=np.int64)
        read = front[cs.src[cs.r_item], cs.r_u]
        r_item, r_u = cs.r_item[read], cs.r_u[read]
        for h in range(groups):
            link = charges.cross[h][g]
            weight[r_item, pos[cs.src[r_item], r_u], h] = INF if link is None else link[r_u]
        pairs = np.flatnonzero(cs.compute <= limit)
        # in chunks of about _CHUNK expanded stages, so that memory stays bounded
        running = np.cumsum(size[cs.src[pairs]])
        cuts = np.searchsorted(running, np.arange(_CHUNK, running[-1] if len(running) else 0, _CHUNK), "right")
        parts: list[tuple[np.ndarray, ...]] = []
        for chunk in np.split(pairs, np.unique(cuts[cuts > 0])):
            if deadline is not None and time.perf_counter() > deadline:
                return None
            parts.append(_expand(chunk, cs.src, cs.dst, cs.compute, weight, size, base, listed, pos, stages.member,
                                 groups, g, limit, charges.serial))
        src, dst, pair, recv, fixed = (np.concatenate([part[i] for part in parts]) if parts
                                       else np.zeros(0, dtype=np.int64) for i in range(5))
        order = np.argsort(dst, kind="stable")
        per_class.append(HeldStages(src[order], dst[order], pair[order], recv[order], fixed[order]))
    last = [hs.subset(ideal_of[hs.dst] == full) for hs in per_class]
    return HeldTables(ideal_of, per_class, last)


def _expand(pairs: np.ndarray, src: np.ndarray, dst: np.ndarray, compute: np.ndarray, weight: np.ndarray,
            size: np.ndarray, base: np.ndarray, listed: np.ndarray, pos: np.ndarray, member: np.ndarray,
            groups: int, g: int, limit: int, serial: bool) -> tuple[np.ndarray, ...]:
    """The expanded stages of ``pairs`` (candidate stages of one class, on group g) that fit
    ``limit``: (start, end, pair, receipts, compute and receipts together)."""
    count = size[src[pairs]]
    item = np.repeat(np.arange(len(pairs)), count)
    code = np.arange(len(item)) - np.repeat(np.cumsum(count) - count, count)  # the start's map, base G
    pair = pairs[item]
    recv = np.zeros(len(pair), dtype=np.int64)
    rest = code.copy()
    for p in range(weight.shape[1]):
        recv = np.minimum(recv + weight[pair, p, rest % groups], INF)
        rest //= groups
    fixed = compute[pair] + recv if serial else np.maximum(compute[pair], recv)
    keep = np.flatnonzero(fixed <= limit)
    pair, code, recv, fixed = pair[keep], code[keep], recv[keep], fixed[keep]
    # the map after the stage: the start's group for layers it had, g for the stage's own
    after = np.zeros(len(pair), dtype=np.int64)
    start, end = src[pair], dst[pair]
    powers = groups ** np.arange(listed.shape[1], dtype=np.int64)
    for q in range(listed.shape[1]):
        v = listed[end, q]
        there = v >= 0
        had = there & member[start, np.maximum(v, 0)]
        digit = (code // powers[np.where(had, pos[start, np.maximum(v, 0)], 0)]) % groups
        after += np.where(had, digit, np.where(there, g, 0)) * powers[q]
    return base[start] + code, base[end] + after, pair, recv, fixed
