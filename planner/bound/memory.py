"""Which candidate stages fit a device's memory as the CP-SAT model counts it (for
:mod:`pipeplan.planner.bound.candidates`).

A stage's memory is its parameters, its kept activations and its largest workspace
(:class:`pipeplan.planner.problem.Problem`).  The first two add up over the ideals; the largest workspace
does not, and the stage program used to leave it out, which kept its bounds valid but let its
chains break memory where it is tight (a 70B decoder over 15 GiB devices), so they never proved a
plan.  It is now counted exactly, found row by row only where it decides.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fitting"]


def fitting(member: np.ndarray, memory: np.ndarray, top: np.ndarray, workspace: np.ndarray, added: np.ndarray,
            src: np.ndarray, dst: np.ndarray, fits: np.ndarray, capacities: list[int], cells: int) -> np.ndarray:
    """Whether each stage S → T (``src``, ``dst``: ideals) fits each class's capacity (rows of
    ``fits``, where it may) with the memory the model counts.  ``member``: the ideals' layers;
    ``memory``: each ideal's parameters and kept activations; ``top``: its largest workspace;
    ``added``: the layer each ideal adds to its parent; ``workspace``: per layer; ``cells``: stages
    × layers looked at in one step (:attr:`pipeplan.planner.bound.limits.Limits.memory_cells`).

    The largest workspace of a stage lies between
    that of the last layer its end ideal added (when the stage holds it) and the largest in its end
    ideal; it is looked up only where the capacity falls between the two: few stages."""
    base = memory[dst] - memory[src]
    last = added[dst]
    holds_last = ~member[src, np.maximum(last, 0)] & (last >= 0)
    least = base + np.where(holds_last, workspace[np.maximum(last, 0)], 0)
    most = base + top[dst]
    out = fits.copy()
    chunk = max(1, cells // max(member.shape[1], 1))  # stages per step: bounded memory
    exact = np.full(len(src), -1, dtype=np.int64)  # a stage's memory with its largest workspace, once found
    sizes = np.unique(workspace[workspace > 0])[::-1]
    holders = [np.flatnonzero(workspace == size) for size in sizes.tolist()]
    for c, cap in enumerate(capacities):
        out[c] &= least <= cap
        rows = np.flatnonzero(out[c] & (most > cap))
        todo = rows[exact[rows] < 0]
        for lo in range(0, len(todo), chunk):
            part = todo[lo:lo + chunk]
            exact[part] = base[part] + _largest(member, src[part], dst[part], sizes, holders)
        out[c, rows] = exact[rows] <= cap
    return out


def _largest(member: np.ndarray, src: np.ndarray, dst: np.ndarray, sizes: np.ndarray,
             holders: list[np.ndarray]) -> np.ndarray:
    """The largest workspace in each stage S → T (0 when none): the first of ``sizes`` (descending)
    that one of its ``holders`` (the layers with that workspace) in T \\ S has."""
    found = np.zeros(len(src), dtype=np.int64)
    open_ = np.arange(len(src))  # the stages whose largest workspace is not found yet
    for size, layers in zip(sizes.tolist(), holders, strict=True):
        if not len(open_):
            break
        hit = (member[np.ix_(dst[open_], layers)] & ~member[np.ix_(src[open_], layers)]).any(axis=1)
        found[open_[hit]] = size
        open_ = open_[~hit]
    return found
