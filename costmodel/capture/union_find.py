"""A union-find over any hashable keys: layer groups in :mod:`~pipeplan.costmodel.capture.grouping`, aliased
values in :mod:`~pipeplan.costmodel.capture.inplace`."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["UnionFind"]

K = TypeVar("K", bound=Hashable)


class UnionFind(Generic[K]):
    """Which set each key was merged into; ``find`` compresses paths as it goes.

    >>> uf: UnionFind[str] = UnionFind()
    >>> uf.union("a", "b"); uf.union("b", "c")
    >>> uf.find("c"), uf.find("d")
    ('a', 'd')
    """

    def __init__(self) -> None:
        self.parent: dict[K, K] = {}

    def find(self, x: K) -> K:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while x != root:
            self.parent[x], x = root, self.parent.get(x, x)
        return root

    def union(self, into: K, other: K) -> None:
        self.parent[self.find(other)] = self.find(into)
