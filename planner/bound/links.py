"""The links between classes of devices as the stage program charges them, and their link groups.

Two stages of classes a and b on distinct devices exchange layer u's output at ``between[u, a, b]``
ticks.  Classes are *grouped* so that the transfer between any device of one group and any other
device of another (or the same) group is one vector over layers (a host's devices, say, with fast
links inside and one slow link out): the refined rounds of the program track the group of each
stage, not its class, and so need far fewer states.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from pipeplan.planner.ilp_ticks import Ticks

__all__ = ["Links", "link_groups"]


@dataclass(frozen=True)
class Links:
    """One problem's links between classes, grouped (see the module docstring)."""

    between: np.ndarray  # (layers, classes, classes) ticks; 0 where no two devices of the classes differ
    group_of: list[int]  # per class, its link group
    cross: list[list[np.ndarray | None]]  # [g][h]: the transfer per layer from group g to h (None: one device)

    @classmethod
    def of(cls, costs: Ticks, classes: list[list[int]]) -> Links:
        between = np.zeros((costs.transfer.shape[0], len(classes), len(classes)), dtype=np.int64)
        for (c1, a_cls), (c2, b_cls) in itertools.product(enumerate(classes), repeat=2):
            b = next((d for d in b_cls if d != a_cls[0]), None)
            if b is not None:  # else two stages of these classes cannot follow each other
                between[:, c1, c2] = costs.transfer[:, a_cls[0], b]
        group_of, cross = link_groups(between, [len(c) for c in classes])
        return cls(between, group_of, cross)

    @property
    def groups(self) -> int:
        return max(self.group_of) + 1

    @property
    def differ(self) -> bool:
        """Whether there are several groups: only then do refined rounds see more than plain ones."""
        return len(set(self.group_of)) > 1


def link_groups(between: np.ndarray, sizes: list[int]) -> tuple[list[int], list[list[np.ndarray | None]]]:
    """Classes grouped so that the transfer between any device of one group and any other device of
    another (or the same) group is one vector over layers; that vector per pair of groups.

    >>> between = np.array([[[5, 5, 9], [5, 5, 9], [9, 9, 5]]])  # one layer, three classes
    >>> link_groups(between, [1, 1, 2])[0]
    [0, 0, 1]
    """
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
