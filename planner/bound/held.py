"""Candidate stages that know where each tensor they receive is held, for exact receipts.

The stage program of :mod:`pipeplan.planner.bound.program` walks chains of ideals without knowing which earlier
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
with numpy; the stages whose compute and receipts alone pass the ceiling are dropped as they are built.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from pipeplan.planner.bound.charges import INF
from pipeplan.planner.bound.limits import Limits
from pipeplan.planner.bound.links import Links
from pipeplan.planner.bound.stages import ClassStages, Stages
from pipeplan.planner.problem import Problem

__all__ = ["HeldStages", "HeldTables", "held_tables"]


@dataclass
class HeldStages:
    """The expanded stages of one device class, sorted by the expanded ideal they end at."""

    src: np.ndarray  # expanded ideal the stage starts from
    dst: np.ndarray  # expanded ideal it ends at
    pair: np.ndarray  # the stage in Stages.per_class[c]: its sends
    fixed: np.ndarray  # its compute and its exact receipts together: their max (overlap) or sum (serial)

    def __post_init__(self) -> None:
        self.ends, self.starts = np.unique(self.dst, return_index=True)

    def subset(self, keep: np.ndarray) -> HeldStages:
        return HeldStages(self.src[keep], self.dst[keep], self.pair[keep], self.fixed[keep])


@dataclass
class HeldTables:
    ideal_of: np.ndarray  # expanded ideal → ideal
    per_class: list[HeldStages]
    last: list[HeldStages]  # per class, the stages that end the plan
    stages: list[ClassStages]  # per class, the candidate stages that HeldStages.pair indexes

    @property
    def size(self) -> int:
        return len(self.ideal_of)


def _frontiers(problem: Problem, stages: Stages, links: Links) -> tuple[np.ndarray, np.ndarray]:
    """``front[i, v]``: layer v is in the frontier of ideal i and costs something to receive on some
    link; ``pos[i, v]``: its place in that frontier (in layer order)."""
    rows, cols = stages.frontier
    costly = links.between.reshape(problem.n_layers, -1).max(axis=1) > 0
    front = np.zeros(stages.member.shape, dtype=bool)
    front[rows[costly[cols]], cols[costly[cols]]] = True
    pos = np.cumsum(front, axis=1) - 1
    return front, pos


@dataclass
class _Expansion:
    """What the expansion of every class's stages shares."""

    groups: int
    size: np.ndarray  # expanded ideals per ideal: groups ** (frontier width)
    base: np.ndarray  # the first expanded ideal of each ideal
    listed: np.ndarray  # (ideals, widest frontier): the frontier layers of each ideal in order, -1 after
    pos: np.ndarray
    member: np.ndarray
    transfer: np.ndarray  # (groups, groups, layers): a receipt from a group into a group; INF where impossible
    ceiling: int
    serial: bool


def held_tables(problem: Problem, stages: Stages, links: Links, ceiling: int, limits: Limits,
                deadline: float | None = None) -> HeldTables | None:
    """The expanded stages of every class whose compute and receipts fit ``ceiling`` (overlap: each
    of them; serial: their sum); None when there would be more than ``limits.max_held`` of them (or
    ``limits.max_held_ideals`` expanded ideals), or ``time.perf_counter()`` passes ``deadline``."""
    groups = links.groups
    serial = problem.options.comm == "serial"
    front, pos = _frontiers(problem, stages, links)
    width = front.sum(axis=1)
    sizes = groups ** width.astype(np.float64)  # floats first: the counts may be huge
    expanded = sum(float(sizes[cs.src[cs.compute <= ceiling]].sum()) for cs in stages.per_class)
    if expanded > limits.max_held or sizes.sum() > limits.max_held_ideals:
        return None
    size = sizes.astype(np.int64)
    n_ideals, most = len(width), max(int(width.max(initial=0)), 1)
    listed = np.full((n_ideals, most), -1, dtype=np.int64)
    rows, cols = np.nonzero(front)
    listed[rows, pos[rows, cols]] = cols
    transfer = np.zeros((groups, groups, problem.n_layers), dtype=np.int64)
    for h in range(groups):
        for g in range(groups):
            link = links.cross[h][g]  # None: the group has one device, which cannot send to itself
            transfer[h, g] = INF if link is None else link
    shared = _Expansion(groups, size, np.concatenate([[0], np.cumsum(size)]).astype(np.int64), listed, pos,
                        stages.member, transfer, ceiling, serial)
    per_class: list[HeldStages] = []
    narrowed: list[ClassStages] = []
    for c, every in enumerate(stages.per_class):
        g = links.group_of[c]
        # the stages that can fit: compute, and receipts over the cheapest link into g, within the ceiling
        cheapest = transfer[:, g, :].min(axis=0)
        least = np.bincount(every.r_item, weights=cheapest[every.r_u].astype(np.float64), minlength=len(every.src))
        fits = (every.compute + least if serial else np.maximum(every.compute, least)) <= ceiling
        cs = every.subset(fits)
        narrowed.append(cs)
        read = front[cs.src[cs.r_item], cs.r_u]  # the receipts that depend on the holder
        by_item = np.argsort(cs.r_item[read], kind="stable")
        r_item, r_u = cs.r_item[read][by_item], cs.r_u[read][by_item]
        # in chunks of about limits.held_chunk expanded stages, so that memory stays bounded
        running = np.cumsum(size[cs.src])
        chunk = limits.held_chunk
        cuts = np.searchsorted(running, np.arange(chunk, running[-1] if len(running) else 0, chunk), "right")
        bounds = [0, *np.unique(cuts[(cuts > 0) & (cuts < len(cs.src))]).tolist(), len(cs.src)]
        parts: list[tuple[np.ndarray, ...]] = []
        for first, stop in itertools.pairwise(bounds):
            if deadline is not None and time.perf_counter() > deadline:
                return None
            lo, hi = np.searchsorted(r_item, [first, stop])
            parts.append(_expand(shared, first, stop, cs, g, r_item[lo:hi], r_u[lo:hi]))
        src, dst, pair, fixed = (np.concatenate([part[i] for part in parts]) if parts
                                 else np.zeros(0, dtype=np.int64) for i in range(4))
        order = np.argsort(dst, kind="stable")
        per_class.append(HeldStages(src[order], dst[order], pair[order], fixed[order]))
    ideal_of = np.repeat(np.arange(n_ideals), size)
    last = [hs.subset(ideal_of[hs.dst] == n_ideals - 1) for hs in per_class]
    return HeldTables(ideal_of, per_class, last, narrowed)


def _expand(shared: _Expansion, first: int, stop: int, cs: ClassStages, g: int, r_item: np.ndarray,
            r_u: np.ndarray) -> tuple[np.ndarray, ...]:
    """The expanded stages of candidate stages ``first`` to ``stop`` − 1 of one class (on group g)
    that fit the ceiling, given those stages' receipts ``r_item``, ``r_u`` that depend on the holder:
    (start, end, stage, compute and receipts together)."""
    groups, size, pos = shared.groups, shared.size, shared.pos
    pairs = np.arange(first, stop)
    # reads[j, p]: the layer the stage receives as the p-th of its start's frontier (-1: none)
    reads = np.full((len(pairs), shared.listed.shape[1]), -1, dtype=np.int64)
    reads[r_item - first, pos[cs.src[r_item], r_u]] = r_u
    count = size[cs.src[pairs]]
    which = np.repeat(np.arange(len(pairs)), count)
    code = np.arange(len(which)) - np.repeat(np.cumsum(count) - count, count)  # the start's map, base G
    recv = np.zeros(len(which), dtype=np.int64)
    rest = code.copy()
    for p in range(reads.shape[1]):
        layer = reads[which, p]
        recv = np.minimum(recv + np.where(layer >= 0, shared.transfer[rest % groups, g, layer], 0), INF)
        rest //= groups
    compute = cs.compute[pairs[which]]
    fixed = compute + recv if shared.serial else np.maximum(compute, recv)
    keep = np.flatnonzero(fixed <= shared.ceiling)
    pair, code, fixed = pairs[which[keep]], code[keep], fixed[keep]
    # the map after the stage: the start's group for layers it had, g for the stage's own
    after = np.zeros(len(pair), dtype=np.int64)
    start, end = cs.src[pair], cs.dst[pair]
    powers = groups ** np.arange(shared.listed.shape[1], dtype=np.int64)
    for q in range(shared.listed.shape[1]):
        v = shared.listed[end, q]
        there = v >= 0
        had = there & shared.member[start, np.maximum(v, 0)]
        digit = (code // powers[np.where(had, pos[start, np.maximum(v, 0)], 0)]) % groups
        after += np.where(had, digit, np.where(there, g, 0)) * powers[q]
    return shared.base[start] + code, shared.base[end] + after, pair, fixed
