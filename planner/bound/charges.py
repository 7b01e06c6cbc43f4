"""What the stage program of :mod:`pipeplan.planner.bound.program` charges a stage, in the model's ticks.

A stage T \\ S on a device of class c, entered from a known state of the chain (the device classes
used so far, the link group of the stage before and the group promised to the next one, where the
broadcast layer is), is charged at most what the CP-SAT model charges it in every plan that fits
that state (:attr:`Charging.LOW`), or at least (:attr:`Charging.HIGH`), so that the least bottleneck
over chains is a lower bound or the cost of a real plan:

- compute: exact, the stage's layers on the class's speed column;
- receive: each layer u of an earlier stage with a consumer in this one is received exactly once,
  from a device of a class used before: LOW pays the cheapest such link, HIGH the dearest.
  A *fresh* receipt surely comes from the stage just before and pays that link; more generally the
  stage before holds a maximal layer of S, so when this stage receives every maximal layer of S
  one of them pays that link (:meth:`Charges._one_fresh`);
- send: each layer with a consumer beyond the stage is sent at least once (HIGH: to as many
  devices as it has consumers there, at most the devices left), to devices not used yet, the next
  stage's for a *fresh* send; with a ``spread`` θ, a layer whose chain of consumers cannot fit in
  fewer stages of compute θ is sent that many times (:meth:`Charges.destinations`);
- the broadcast layer (the one read by the longest chain of consumers, e.g. position ids read by
  every block): its receipts pay the link from the group that holds it, and in serial mode the
  stage that holds it pays exactly as many sends as stages will receive it, a count the state
  carries (:meth:`Charges._broadcast_sends`);
- stage time: ``max`` (overlap) or sum (serial) of compute, receipts and sends; :data:`INF` when the
  stage cannot be (no device left for a send) or costs more than the ceiling.

:attr:`Charging.LIKELY` charges every receipt and send at the link between neighbouring stages: no
bound, a good guess at plans.  Charges are summed per stage in parts that depend on few of the
state's components, kept in :class:`pipeplan.planner.bound.caches.Caches`, so that a new state mostly
costs a few additions over the stages.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeplan.planner.bound.caches import Caches
from pipeplan.planner.bound.links import Links
from pipeplan.planner.bound.stages import ClassStages, Stages
from pipeplan.planner.bound.state import AT_LEAST_ONE, NO_GROUP, ChargeKey, Charging, Part, Sum, SumKey, TableKey
from pipeplan.planner.problem import Problem

__all__ = ["INF", "Charges"]

INF = np.iinfo(np.int64).max // 4  # "impossible" (a sum of a few of these still fits an int64)


class Charges:
    """The charges of one problem's candidate stages (see the module docstring)."""

    def __init__(self, problem: Problem, links: Links, stages: Stages, ceiling: int, caches: Caches) -> None:
        self.problem, self.links, self.stages, self.ceiling, self.caches = problem, links, stages, ceiling, caches
        self.serial = problem.options.comm == "serial"
        self.between, self.group_of, self.cross = links.between, links.group_of, links.cross
        # The broadcast layer: the one whose output goes to the longest chain of consumers (a mask
        # or position ids read by every block), the dearest first.  Refined runs track which group
        # holds it, so that each stage reading it pays the link it really comes over.
        chains = [(len(chain), int(self.between[u].max()), u) for u, (chain, _) in stages.chains.items()
                  if len(chain) >= 3 and self.between[u].max() > 0]
        self.broadcast = max(chains)[2] if chains and links.differ else None
        # Its sends are counted exactly only where they add up (serial): the count costs a dimension.
        self.count_sends = self.serial

    def table(self, key: TableKey) -> ClassStages:
        """The stages of a table: a class's, or, with the broadcast layer tracked, one part of them
        (split on first use: only refined runs read them); all or only those that end the plan."""
        if key.part is Part.ALL:
            return self.stages.table(key)
        if not self.caches.tables:
            assert self.broadcast is not None
            self.caches.tables.update(self.stages.split(self.broadcast))
        return self.caches.tables[key]

    def destinations(self, spread: int) -> np.ndarray:
        """``[u, j]``: the fewest stages that can hold the consumers of u's chain from the j-th on
        when no stage computes more than ``spread`` ticks (1 where u has no chain)."""
        if spread not in self.caches.destinations:
            chains = self.stages.chains
            table = np.ones((self.problem.n_layers, 1 + max((len(c) for c, _ in chains.values()), default=0)),
                            dtype=np.int64)
            for u, (chain, span) in chains.items():
                for j in range(len(chain)):
                    count, a = 0, j
                    while a < len(chain):  # greedy: each stage takes as many next members as fit
                        b = a
                        while b + 1 < len(chain) and span[a, b + 1] <= spread:
                            b += 1
                        count, a = count + 1, b + 1
                    table[u, j] = count
            self.caches.destinations[spread] = table
        return self.caches.destinations[spread]

    def cost(self, key: ChargeKey) -> np.ndarray:
        """Ticks charged to each stage of the table ``key`` names (:attr:`ChargeKey.table`).

        Receipts and sends are summed per stage in parts that depend on few of the key's fields
        (cached), so that a new key mostly costs a few additions over the stages."""
        found = self.caches.charges.get(key)
        if found is None:
            table = key.table
            cs = self.table(table)
            found = self.caches.keep(self.caches.charges, key, self.combine(
                cs.compute, self._receipts(table, cs, key), self.sends(table, cs, key)))
        return found

    def narrow(self, stages: Stages, ceiling: int) -> None:
        """Charge ``stages`` (:meth:`Stages.narrow` of the stages before) from now on, and every
        stage above ``ceiling`` as impossible."""
        self.stages, self.ceiling = stages, ceiling
        self.caches.forget_stages()

    def combine(self, compute: np.ndarray, recv: np.ndarray | int, send: np.ndarray) -> np.ndarray:
        """Stage times from their parts (:data:`INF` where one part is, or the time passes the ceiling)."""
        recv, send = np.minimum(recv, INF), np.minimum(send, INF)
        cost = compute + recv + send if self.serial else np.maximum(np.maximum(compute, recv), send)
        cost[cost > self.ceiling] = INF
        return cost

    def _receipts(self, table: TableKey, cs: ClassStages, key: ChargeKey) -> np.ndarray:
        """What each stage is charged for its receipts (see the module docstring)."""
        c, used = key.cls, key.classes_used
        pessimistic, likely = key.charging is Charging.HIGH, key.charging is Charging.LIKELY
        split_in = key.refined and key.previous != NO_GROUP
        recv = np.zeros(len(cs.src), dtype=np.int64)
        spread_in = split_in and not pessimistic and not likely  # see _one_fresh
        if used and not (likely and split_in):
            split = split_in and not spread_in
            recv = self._sum(cs, SumKey(table, Sum.RECEIPTS, pessimistic=pessimistic, split=split, classes_used=used),
                             False if split else None,
                             lambda u: (np.max if pessimistic else np.min)(self.between[:, sorted(used), c], axis=1)[u])
        if spread_in:
            recv = recv + self._one_fresh(table, cs, c, key.previous, used)
        elif split_in:
            previous = self.cross[key.previous][self.group_of[c]]
            assert previous is not None
            recv = recv + self._sum(cs, SumKey(table, Sum.FROM_PREVIOUS, likely=likely, group=key.previous),
                                    None if likely else True, lambda u: previous[u])
        if key.part is Part.READS and cs.b_in is not None and key.holder != NO_GROUP:
            holding = self.cross[key.holder][self.group_of[c]]
            assert holding is not None and self.broadcast is not None
            recv = recv + cs.b_in * holding[self.broadcast]
        return recv

    def sends(self, table: TableKey, cs: ClassStages, key: ChargeKey) -> np.ndarray:
        """What each of ``cs``'s stages (the table ``table``) is charged for its sends under ``key``
        (see :meth:`cost`; the group before and the broadcast layer's holder do not matter here)."""
        c, left, room, spread, after = key.cls, key.left, key.room, key.spread, key.following
        pessimistic, likely = key.charging is Charging.HIGH, key.charging is Charging.LIKELY
        split_out = key.refined and after != NO_GROUP
        remaining = np.asarray(left, dtype=np.int64)
        targets = np.flatnonzero(remaining)
        links = self.between[:, c, targets]  # (layers, classes with a device left)

        def copies(u: np.ndarray, j: np.ndarray, counts: np.ndarray) -> np.ndarray:
            if pessimistic:
                return np.minimum(counts, room)
            if spread is not None:
                return self.destinations(spread)[u, j]
            return np.ones(len(u), dtype=np.int64)

        def sends(u: np.ndarray, j: np.ndarray, counts: np.ndarray) -> np.ndarray:
            if not len(targets):
                return np.full(len(u), INF, dtype=np.int64)
            n_copies = copies(u, j, counts)
            if pessimistic:
                return links.max(axis=1)[u] * n_copies
            return _cheapest(links, remaining[targets], u, n_copies, room)

        send = np.zeros(len(cs.src), dtype=np.int64)
        if not (likely and split_out):
            send = self._sum(cs, SumKey(table, Sum.SENDS, pessimistic=pessimistic, split=split_out, left=left,
                                        room=room, spread=spread),
                             False if split_out else None, sends, True)
        if split_out:
            following = self.cross[self.group_of[c]][after]
            assert following is not None

            def fresh_sends(u: np.ndarray, j: np.ndarray, counts: np.ndarray) -> np.ndarray:
                n_copies = copies(u, j, counts)  # one copy goes to the next stage, over that link
                if pessimistic:
                    rest = links.max(axis=1)[u] * (n_copies - 1)
                else:
                    rest = _cheapest(links, remaining[targets], u, n_copies - 1, room - 1)
                return np.minimum(following[u] + rest, INF)

            send = send + self._sum(cs, SumKey(table, Sum.TO_FOLLOWING, pessimistic=pessimistic, likely=likely,
                                               group=after, left=left, room=room, spread=spread),
                                    None if likely else True, fresh_sends, True)
        if key.part is Part.HOLDS and cs.b_out is not None and cs.b_fresh is not None:
            send = send + self._broadcast_sends(cs, c, after, links, remaining[targets], room, key.copies,
                                                pessimistic)
        return send

    def _one_fresh(self, table: TableKey, cs: ClassStages, c: int, before: int, used: frozenset[int]) -> np.ndarray:
        """What each class-c stage pays on top of the cheapest links for its receipts, for one of
        them surely coming from the stage just before (group ``before``).

        The stage before is not empty, so it holds a layer m that is maximal in the ideal S this
        stage starts from (none of its consumers lies in S).  Where this stage receives every
        maximal layer of S, it receives m's output from the stage before: at least the least
        surcharge, over the maximal layers, of that link over the cheapest from a used class."""
        key = SumKey(table, Sum.ONE_FRESH, group=before, classes_used=used)
        found = self.caches.sums.get(key)
        if found is None:
            previous = self.cross[before][self.group_of[c]]
            assert previous is not None
            cheapest = self.between[:, sorted(used), c].min(axis=1)
            extra = np.full(len(cs.src), INF, dtype=np.int64)
            pick = cs.r_max
            np.minimum.at(extra, cs.r_item[pick], previous[cs.r_u[pick]] - cheapest[cs.r_u[pick]])
            found = self.caches.keep(self.caches.sums, key, np.where(cs.r_all & (extra < INF), extra, 0))
        return found

    def _broadcast_sends(self, cs: ClassStages, c: int, after: int, links: np.ndarray, free: np.ndarray, room: int,
                         copies: int, pessimistic: bool) -> np.ndarray:
        """What each class-c stage holding the broadcast layer pays to send it to exactly ``copies``
        later stages (:data:`INF` where it has consumers beyond the stage and ``copies`` is 0, or the
        other way round): the cheapest (dearest) links to devices left, the next stage's when fresh;
        ``copies`` :data:`AT_LEAST_ONE`: not counted, one at least."""
        b = self.broadcast
        assert b is not None and cs.b_out is not None and cs.b_fresh is not None
        if copies == 0 or not len(free):
            return np.where(cs.b_out > 0, INF, 0)
        at_least_one = copies == AT_LEAST_ONE
        copies = max(copies, 1)

        def price(n: int) -> int:
            if n <= 0:
                return 0
            if pessimistic:
                return int(links[b].max()) * n
            return int(_cheapest(links, free, np.array([b]), np.array([n]), room)[0])

        plain = price(copies)
        fresh = plain
        if after != NO_GROUP:
            following = self.cross[self.group_of[c]][after]
            assert following is not None
            rest = price(copies - 1) if copies - 1 <= room - 1 else INF
            fresh = min(int(following[b]) + rest, INF)
        charge = np.where(cs.b_fresh > 0, fresh, plain)
        if at_least_one and pessimistic:  # not counted: as many copies as it may need
            assert cs.b_count is not None
            charge = int(links[b].max()) * np.minimum(cs.b_count, room)
        return np.where(cs.b_out > 0, charge, 0 if at_least_one else INF)

    def _sum(self, cs: ClassStages, key: SumKey, fresh: bool | None, weight: Callable[..., np.ndarray],
             sent: bool = False) -> np.ndarray:
        """Per stage, the sum of ``weight`` over its receive (or, ``sent``, send) entries that are
        ``fresh`` or not (all entries when None); cached under ``key``."""
        found = self.caches.sums.get(key)
        if found is None:
            pick: slice | np.ndarray = slice(None)
            if fresh is not None and sent:
                pick = cs.s_fresh_at if fresh else cs.s_stale_at
            elif fresh is not None:
                pick = cs.r_fresh_at if fresh else cs.r_stale_at
            values = weight(cs.s_u[pick], cs.s_chain[pick], cs.s_count[pick]) if sent else weight(cs.r_u[pick])
            total = np.bincount((cs.s_item if sent else cs.r_item)[pick], weights=values.astype(np.float64),
                                minlength=len(cs.src))
            found = self.caches.keep(self.caches.sums, key, np.minimum(total, INF).astype(np.int64))
        return found


def _cheapest(links: np.ndarray, free: np.ndarray, rows: np.ndarray, copies: np.ndarray, room: int) -> np.ndarray:
    """For each entry i, the least total of ``copies[i]`` transfers of layer ``rows[i]``'s output to
    distinct devices: ``links[u, x]`` to each of the ``free[x]`` devices of class x, at most ``room``
    devices in all (:data:`INF` where there are too few)."""
    order = np.argsort(links, axis=1)
    price = np.take_along_axis(links, order, axis=1)
    if (copies <= 1).all():
        return np.where(copies > min(room, 1), INF, price[rows, 0] * copies)
    stock = free[order]
    need = copies.copy()
    total = np.zeros(len(rows), dtype=np.int64)
    for col in range(links.shape[1]):
        take = np.minimum(need, stock[rows, col])
        total += take * price[rows, col]
        need -= take
    return np.where((need > 0) | (copies > room), INF, total)
