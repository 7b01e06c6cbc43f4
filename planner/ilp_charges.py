"""What the stage program of :mod:`pipeplan.planner.ilp_bound` charges a stage, in the model's ticks.

A stage T \\ S on a device of class c, entered from a known state of the chain (the device classes
used so far, the link group of the stage before and the group promised to the next one, where the
broadcast layer is), is charged at most what the CP-SAT model charges it in every plan that fits
that state (``low``), or at least (``high``), so that the least bottleneck over chains is a lower
bound or the cost of a real plan:

- compute: exact, the stage's layers on the class's speed column;
- receive: each layer u of an earlier stage with a consumer in this one is received exactly once,
  from a device of a class used before: ``low`` pays the cheapest such link, ``high`` the dearest.
  A *fresh* receipt surely comes from the stage just before and pays that link; more generally the
  stage before holds a maximal layer of S, so when this stage receives every maximal layer of S
  one of them pays that link (:meth:`Charges._one_fresh`);
- send: each layer with a consumer beyond the stage is sent at least once (``high``: to as many
  devices as it has consumers there, at most the devices left), to devices not used yet, the next
  stage's for a *fresh* send; with a ``spread`` θ, a layer whose chain of consumers cannot fit in
  fewer stages of compute θ is sent that many times (:meth:`Charges.destinations`);
- the broadcast layer (the one read by the longest chain of consumers, e.g. position ids read by
  every block): its receipts pay the link from the group that holds it, and in serial mode the
  stage that holds it pays exactly as many sends as stages will receive it, a count the state
  carries (:meth:`Charges._broadcast_sends`);
- stage time: ``max`` (overlap) or sum (serial) of compute, receipts and sends; ``_INF`` when the
  stage cannot be (no device left for a send) or costs more than ``limit``.

``likely`` charges every receipt and send at the link between neighbouring stages: no bound, a good
guess at plans.  Charges are summed per stage in parts that depend on few of the state's
components, cached, so that a new state mostly costs a few additions over the stages.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from pipeplan.planner.ilp_ideals import ClassStages, Stages
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import Problem

__all__ = ["INF", "Charges", "Key"]

INF = np.iinfo(np.int64).max // 4
_INF = INF  # "impossible" (a sum of a few of these still fits an int64)
_CACHE = 30_000_000  # stage costs kept per class (int64 entries), then the cache starts over

# (mode "low" | "high" | "likely", refined, group of the stage before (-1: none), group promised to
# the next (-1: this is the last stage), classes used before, devices left after in each class
# (at most 1 unless they matter), devices left after in all, spread, part of the stages, group
# holding the broadcast layer, copies of it the stage sends (-1: at least one))
Key = tuple[object, ...]


def _link_groups(between: np.ndarray, sizes: list[int]) -> tuple[list[int], list[list[np.ndarray | None]]]:
    """Classes grouped so that the transfer between any device of one group and any other device of
    another (or the same) group is one vector over layers; that vector per pair of groups."""
    n_classes = len(sizes)

    def link(a: int, b: int) -> np.ndarray | None:
        return between[:, a, b] if a != b or sizes[a] > 1 else None

    def uniform(groups: list[list[int]]) -> bool:
        for g1, g2 in itertools.product(groups, repeat=2):
            vectors = [v for a in g1 for b in g2 if (v := link(a, b)) is not None]
            if any(not np.array_equal(vectors[0], v) for v in vectors[1:]):
                return False
        return True

    groups: list[list[int]] = []
    for c in range(n_classes):
        for g in groups:
            if uniform([*(h for h in groups if h is not g), [*g, c]]):
                g.append(c)
                break
        else:
            groups.append([c])
    if not uniform(groups):  # a class added later clashes with a group formed before it
        groups = [[c] for c in range(n_classes)]
    group_of = [next(i for i, g in enumerate(groups) if c in g) for c in range(n_classes)]
    cross: list[list[np.ndarray | None]] = [
        [next((v for a in g1 for b in g2 if (v := link(a, b)) is not None), None) for g2 in groups] for g1 in groups]
    return group_of, cross


class Charges:
    """The charges of one problem's candidate stages (see the module docstring)."""

    def __init__(self, problem: Problem, costs: Ticks, classes: list[list[int]], stages: Stages, limit: int) -> None:
        self.problem, self.stages, self.limit = problem, stages, limit
        self.serial = problem.options.comm == "serial"
        n = problem.n_layers
        self.between = np.zeros((n, len(classes), len(classes)), dtype=np.int64)
        for (c1, a_cls), (c2, b_cls) in itertools.product(enumerate(classes), repeat=2):
            b = next((d for d in b_cls if d != a_cls[0]), None)
            if b is not None:  # else two stages of these classes cannot follow each other
                self.between[:, c1, c2] = costs.transfer[:, a_cls[0], b]
        self.group_of, self.cross = _link_groups(self.between, [len(c) for c in classes])
        self._spread: dict[int, np.ndarray] = {}
        # The broadcast layer: the one whose output goes to the longest chain of consumers (a mask
        # or position ids read by every block), the dearest first.  Refined runs track which group
        # holds it, so that each stage reading it pays the link it really comes over.
        chains = [(len(chain), int(self.between[u].max()), u) for u, (chain, _) in stages.chains.items()
                  if len(chain) >= 3 and self.between[u].max() > 0]
        self.broadcast = max(chains)[2] if chains and len(set(self.group_of)) > 1 else None
        # The stages split around it, built on first use: only refined runs read them.
        self._parts: dict[tuple[str, bool], list[ClassStages]] | None = None
        # Its sends are counted exactly only where they add up (serial): the count costs a dimension.
        self.count_sends = self.serial

    @staticmethod
    def ends_plan(key: Key) -> bool:
        """Whether a move with this key is promised to be the last stage (refined, no group next)."""
        return bool(key[1]) and key[3] == -1

    def table(self, c: int, key: Key) -> ClassStages:
        """The class-c stages a move with this cost key may take: a stage promised to be the last
        must end the plan; with the broadcast layer tracked, only the stages of the key's part."""
        last = self.ends_plan(key)
        if key[8] != "all":
            if self._parts is None:
                assert self.broadcast is not None
                self._parts = self.stages.split(self.broadcast)
            return self._parts[str(key[8]), last][c]
        return self.stages.last[c] if last else self.stages.per_class[c]

    def destinations(self, spread: int) -> np.ndarray:
        """``[u, j]``: the fewest stages that can hold the consumers of u's chain from the j-th on
        when no stage computes more than ``spread`` ticks (1 where u has no chain)."""
        if spread not in self._spread:
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
            self._spread[spread] = table
        return self._spread[spread]

    def cost(self, c: int, key: Key) -> np.ndarray:
        """Ticks charged to each of :meth:`table`'s stages; ``key`` = (mode, refined, group before,
        group after (-1: none), classes used before, devices left after in each class (at most 1
        unless they matter: with a spread), devices left after in all, spread (see
        :meth:`BoundProgram.run`), part of the stages (see :meth:`table`), group holding the
        broadcast layer, copies of it sent).

        Receipts and sends are summed per stage in parts that depend on few of these (cached), so
        that a new key mostly costs a few additions over the stages."""
        cs = self.table(c, key)
        if key not in cs.cache:
            self._keep(cs, key, self.combine(cs.compute, self._receipts(cs, c, key), self.sends(cs, c, key)))
        return cs.cache[key]

    def narrow(self, stages: Stages, limit: int) -> None:
        """Charge ``stages`` (:meth:`Stages.narrow` of the stages before) from now on, and every
        stage above ``limit`` as impossible."""
        self.stages, self.limit, self._parts = stages, limit, None

    def combine(self, compute: np.ndarray, recv: np.ndarray | int, send: np.ndarray) -> np.ndarray:
        """Stage times from their parts (``_INF`` where one part is, or the time passes the limit)."""
        recv, send = np.minimum(recv, _INF), np.minimum(send, _INF)
        cost = compute + recv + send if self.serial else np.maximum(np.maximum(compute, recv), send)
        cost[cost > self.limit] = _INF
        return cost

    def _receipts(self, cs: ClassStages, c: int, key: Key) -> np.ndarray:
        """What each stage is charged for its receipts (see the module docstring)."""
        mode, refined, before, _, used, _, _, _, part, holder, _ = key
        assert isinstance(used, frozenset) and isinstance(before, int)
        pessimistic, likely = mode == "high", mode == "likely"
        split_in = bool(refined) and before >= 0
        recv = np.zeros(len(cs.src), dtype=np.int64)
        spread_in = split_in and not pessimistic and not likely  # see _one_fresh
        if used and not (likely and split_in):
            split = split_in and not spread_in
            recv = self._sum(cs, ("r", pessimistic, used, split), cs.r_item, cs.r_fresh if split else None, False,
                             lambda u: (np.max if pessimistic else np.min)(self.between[:, sorted(used), c], axis=1)[u])
        if spread_in:
            recv = recv + self._one_fresh(cs, c, before, used)
        elif split_in:
            previous = self.cross[before][self.group_of[c]]
            assert previous is not None
            recv = recv + self._sum(cs, ("rf", before, likely), cs.r_item, None if likely else cs.r_fresh, True,
                                    lambda u: previous[u])
        if part == "reads" and cs.b_in is not None and isinstance(holder, int):
            holding = self.cross[holder][self.group_of[c]]
            assert holding is not None and self.broadcast is not None
            recv = recv + cs.b_in * holding[self.broadcast]
        return recv

    def sends(self, cs: ClassStages, c: int, key: Key) -> np.ndarray:
        """What each of ``cs``'s stages (class c) is charged for its sends under ``key`` (see
        :meth:`cost`; the group before and the broadcast layer's holder do not matter here)."""
        mode, refined, _, after, _, left, room, spread, part, _, copies_b = key
        assert isinstance(left, tuple) and isinstance(room, int) and isinstance(after, int)
        pessimistic, likely = mode == "high", mode == "likely"
        split_out = bool(refined) and after >= 0
        remaining = np.asarray(left, dtype=np.int64)
        targets = np.flatnonzero(remaining)
        links = self.between[:, c, targets]  # (layers, classes with a device left)

        def copies(u: np.ndarray, j: np.ndarray, counts: np.ndarray) -> np.ndarray:
            if pessimistic:
                return np.minimum(counts, room)
            if isinstance(spread, int):
                return self.destinations(spread)[u, j]
            return np.ones(len(u), dtype=np.int64)

        def sends(u: np.ndarray, j: np.ndarray, counts: np.ndarray) -> np.ndarray:
            if not len(targets):
                return np.full(len(u), _INF, dtype=np.int64)
            n_copies = copies(u, j, counts)
            if pessimistic:
                return links.max(axis=1)[u] * n_copies
            return _cheapest(links, remaining[targets], u, n_copies, room)

        send = np.zeros(len(cs.src), dtype=np.int64)
        if not (likely and split_out):
            send = self._sum(cs, ("s", pessimistic, left, room, spread, split_out), cs.s_item,
                             cs.s_fresh if split_out else None, False, sends, True)
        if split_out:
            following = self.cross[self.group_of[c]][after]
            assert following is not None

            def fresh_sends(u: np.ndarray, j: np.ndarray, counts: np.ndarray) -> np.ndarray:
                n_copies = copies(u, j, counts)  # one copy goes to the next stage, over that link
                if pessimistic:
                    rest = links.max(axis=1)[u] * (n_copies - 1)
                else:
                    rest = _cheapest(links, remaining[targets], u, n_copies - 1, room - 1)
                return np.minimum(following[u] + rest, _INF)

            send = send + self._sum(cs, ("sf", pessimistic, after, left, room, spread, likely), cs.s_item,
                                    None if likely else cs.s_fresh, True, fresh_sends, True)
        if part == "holds" and cs.b_out is not None and cs.b_fresh is not None:
            assert isinstance(copies_b, int)
            send = send + self._broadcast_sends(cs, c, after, links, remaining[targets], room, copies_b, pessimistic)
        return send

    def _one_fresh(self, cs: ClassStages, c: int, before: int, used: frozenset[int]) -> np.ndarray:
        """What each class-c stage pays on top of the cheapest links for its receipts, for one of
        them surely coming from the stage just before (group ``before``).

        The stage before is not empty, so it holds a layer m that is maximal in the ideal S this
        stage starts from (none of its consumers lies in S).  Where this stage receives every
        maximal layer of S, it receives m's output from the stage before: at least the least
        surcharge, over the maximal layers, of that link over the cheapest from a used class."""
        key = ("one fresh", before, used)
        if key not in cs.cache:
            previous = self.cross[before][self.group_of[c]]
            assert previous is not None
            cheapest = self.between[:, sorted(used), c].min(axis=1)
            extra = np.full(len(cs.src), _INF, dtype=np.int64)
            pick = cs.r_max
            np.minimum.at(extra, cs.r_item[pick], previous[cs.r_u[pick]] - cheapest[cs.r_u[pick]])
            self._keep(cs, key, np.where(cs.r_all & (extra < _INF), extra, 0))
        return cs.cache[key]

    def _broadcast_sends(self, cs: ClassStages, c: int, after: int, links: np.ndarray, free: np.ndarray, room: int,
                         copies: int, pessimistic: bool) -> np.ndarray:
        """What each class-c stage holding the broadcast layer pays to send it to exactly ``copies``
        later stages (_INF where it has consumers beyond the stage and ``copies`` is 0, or the other
        way round): the cheapest (dearest) links to devices left, the next stage's when fresh."""
        b = self.broadcast
        assert b is not None and cs.b_out is not None and cs.b_fresh is not None
        if copies == 0 or not len(free):
            return np.where(cs.b_out > 0, _INF, 0)
        at_least_one = copies < 0
        copies = max(copies, 1)

        def price(n: int) -> int:
            if n <= 0:
                return 0
            if pessimistic:
                return int(links[b].max()) * n
            return int(_cheapest(links, free, np.array([b]), np.array([n]), room)[0])

        plain = price(copies)
        fresh = plain
        if after >= 0:
            following = self.cross[self.group_of[c]][after]
            assert following is not None
            rest = price(copies - 1) if copies - 1 <= room - 1 else _INF
            fresh = min(int(following[b]) + rest, _INF)
        charge = np.where(cs.b_fresh > 0, fresh, plain)
        if at_least_one and pessimistic:  # not counted: as many copies as it may need
            assert cs.b_count is not None
            charge = int(links[b].max()) * np.minimum(cs.b_count, room)
        return np.where(cs.b_out > 0, charge, 0 if at_least_one else _INF)

    def _sum(self, cs: ClassStages, key: Key, item: np.ndarray, fresh: np.ndarray | None,
             which: bool, weight: Callable[..., np.ndarray], sent: bool = False) -> np.ndarray:
        """Per stage, the sum of ``weight`` over its receive (or, ``sent``, send) entries whose fresh
        flag is ``which`` (all entries when ``fresh`` is None); cached under ``key``."""
        key = ("part", *key)
        if key not in cs.cache:
            pick: slice | np.ndarray = slice(None)
            if fresh is not None:
                if ("pick", sent, which) not in cs.cache:
                    cs.cache["pick", sent, which] = np.flatnonzero(fresh == which)
                pick = cs.cache["pick", sent, which]
            values = weight(cs.s_u[pick], cs.s_chain[pick], cs.s_count[pick]) if sent else weight(cs.r_u[pick])
            total = np.bincount(item[pick], weights=values.astype(np.float64), minlength=len(cs.src))
            self._keep(cs, key, np.minimum(total, _INF).astype(np.int64))
        return cs.cache[key]

    @staticmethod
    def _keep(cs: ClassStages, key: Key, value: np.ndarray) -> None:
        if sum(len(a) for a in cs.cache.values()) + len(value) > _CACHE:
            cs.cache.clear()
        cs.cache[key] = value

    # -- the program ------------------------------------------------------------------------------------


def _cheapest(links: np.ndarray, free: np.ndarray, rows: np.ndarray, copies: np.ndarray, room: int) -> np.ndarray:
    """For each entry i, the least total of ``copies[i]`` transfers of layer ``rows[i]``'s output to
    distinct devices: ``links[u, x]`` to each of the ``free[x]`` devices of class x, at most ``room``
    devices in all (_INF where there are too few)."""
    order = np.argsort(links, axis=1)
    price = np.take_along_axis(links, order, axis=1)
    if (copies <= 1).all():
        return np.where(copies > min(room, 1), _INF, price[rows, 0] * copies)
    stock = free[order]
    need = copies.copy()
    total = np.zeros(len(rows), dtype=np.int64)
    for col in range(links.shape[1]):
        take = np.minimum(need, stock[rows, col])
        total += take * price[rows, col]
        need -= take
    return np.where((need > 0) | (copies > room), _INF, total)

