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
    exact: dict[int, int] = {}
    chunk = max(1, cells // max(member.shape[1], 1))  # stages per step: bounded memory
    for c, cap in enumerate(capacities):
        out[c] &= least <= cap
        rows = np.flatnonzero(out[c] & (most > cap))
        todo = np.array([j for j in rows.tolist() if j not in exact], dtype=np.int64)
        for lo in range(0, len(todo), chunk):
            part = todo[lo:lo + chunk]
            inside = member[dst[part]] & ~member[src[part]]
            found = base[part] + np.where(inside, workspace[None, :], 0).max(axis=1)
            exact.update(zip(part.tolist(), found.tolist(), strict=True))
        out[c, rows] = np.array([exact[j] <= cap for j in rows.tolist()], dtype=bool)
    return out
