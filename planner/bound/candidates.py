"""The candidate stages between the ideals of a layer graph (for :mod:`pipeplan.planner.bound.program`).

Every pair of ideals S ⊂ T (:mod:`pipeplan.planner.bound.ideals`) whose stage T \\ S could matter is
kept, with what that stage must receive and send:

- it receives the output of each u ∈ S with a consumer in T \\ S, once, fresh when u is fresh in
  at S (it then comes from the stage just before);
- it sends the output of each u ∈ T \\ S with a consumer outside T, fresh when u is fresh out at T
  (it then goes to the stage just after).

Only the stages that may matter are kept: those that compute at most the ceiling (a known plan's
bottleneck) on some class of devices and fit its memory with their largest workspace
(:mod:`pipeplan.planner.bound.memory`), and, given a ceiling, those whose two ends lie in the price
windows of :mod:`pipeplan.planner.bound.prices` (no plan under the ceiling has a boundary elsewhere).
Near the optimum the windows cut the pairs from quadratic in I to a few per ideal (2.9 million to
1,859 on Llama-2 7B over 2 A100 + 2 T4).

Sizes: P pairs; building takes O(C·n/64) time for the subset tests of the C pairs the windows (or,
without a ceiling, the compute) leave to test, in numpy.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from pipeplan.planner.bound.ideals import Ideals, consumer_chains, isolated_layers, list_ideals
from pipeplan.planner.bound.limits import Limits
from pipeplan.planner.bound.memory import fitting
from pipeplan.planner.bound.prices import Prices, Windows
from pipeplan.planner.bound.stages import ClassStages, Stages
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import Problem

__all__ = ["Lattice", "candidate_stages", "lattice"]


class Lattice(NamedTuple):
    """What the candidate stages share under every ceiling: built once where the program tries
    several ceilings (:meth:`pipeplan.planner.bound.program.BoundProgram.of`), the ideals being most
    of a small candidate set's time (0.2 of 0.27 s on a 70B decoder)."""

    isolated: list[int]  # the layers with no edges, left out of the ideals
    ideals: Ideals
    chains: dict[int, tuple[list[int], np.ndarray]]  # consumer_chains over the cheapest class
    chain_in: np.ndarray  # per frontier entry (ideal, layer): the layer's chain members in the ideal


def lattice(problem: Problem, costs: Ticks, classes: list[list[int]], limits: Limits) -> Lattice | None:
    """The ideals and consumer chains of ``problem`` for :func:`candidate_stages`; None beyond
    ``limits`` (too many ideals)."""
    isolated = isolated_layers(problem)
    ideals = list_ideals(problem, costs, classes, isolated, min(limits.max_ideals,
                                                                limits.max_cells // max(problem.n_layers, 1)))
    if ideals is None:
        return None
    chains = consumer_chains(problem, costs.compute[:, [c[0] for c in classes]].min(axis=1))
    return Lattice(isolated, ideals, chains, _chain_in(ideals, chains))


def _chain_in(ideals: Ideals, chains: dict[int, tuple[list[int], np.ndarray]]) -> np.ndarray:
    """Per frontier entry (ideal, layer u): how many of u's chain of consumers lie in the ideal."""
    out = np.zeros(len(ideals.cols), dtype=np.int64)
    order = np.argsort(ideals.cols, kind="stable")
    ranked = ideals.cols[order]
    for u, (chain, _) in chains.items():
        pos = order[np.searchsorted(ranked, u, side="left"):np.searchsorted(ranked, u, side="right")]
        out[pos] = ideals.member[np.ix_(ideals.rows[pos], np.asarray(chain))].sum(axis=1)
    return out


def candidate_stages(problem: Problem, costs: Ticks, classes: list[list[int]], ceiling: int, limits: Limits,
                     deadline: float | None = None, use_windows: bool = True,
                     prices: Prices | None = None, shared: Lattice | None = None) -> Stages | None:
    """Ideals and the stages between them that may cost at most ``ceiling`` ticks on some class (by
    their compute and their cheapest communication), whose memory (parameters, kept activations
    and largest workspace) fits that class's and, with ``use_windows``, that some plan of bottleneck at
    most ``ceiling`` can use (:mod:`pipeplan.planner.bound.prices`: ``prices``, computed when None); None
    when there are more than ``limits`` allow, or ``time.perf_counter()`` passes ``deadline``.
    ``shared``: :func:`lattice` of the same problem, classes and limits, built when None."""
    if shared is None and (shared := lattice(problem, costs, classes, limits)) is None:
        return None
    isolated, ideals, chains, chain_in = shared
    prices = prices or Prices.of(problem, costs, classes)
    price = ideals.total(prices.layer)  # the windows of boundaries under the ceiling
    windows = prices.windows(float(price[-1]), ceiling, limits.max_window_states) if use_windows else None
    if windows is not None and len(ideals) * windows.moves > limits.max_cells:
        windows = None  # its (ideal × move) tables would outgrow the membership table
    pairs = _pairs(ideals, price, prices, windows, ceiling, limits.max_pairs, deadline)
    if pairs is None:
        return None
    src, dst = pairs

    # -- per class: compute under the ceiling, in the windows, in memory (the stages no class takes go) --
    work = ideals.work
    fits = np.stack([work[dst, c] - work[src, c] <= ceiling for c in range(len(classes))])
    if windows is not None:
        for c in range(len(classes)):
            fits[c] &= windows.admits(c, price[src], price[dst])
    keep = fits.any(axis=0)
    src, dst, fits = src[keep], dst[keep], fits[:, keep]
    fits = fitting(ideals.member, ideals.memory, ideals.top, np.asarray(problem.workspace, dtype=np.int64),
                   ideals.added, src, dst, fits, [problem.capacity[c[0]] for c in classes], limits.memory_cells)
    keep = fits.any(axis=0)
    src, dst, fits = src[keep], dst[keep], fits[:, keep]
    per_class = _per_class(problem, costs, classes, ideals, chain_in, src, dst, fits, ceiling)
    return Stages(ideals.member, isolated, per_class, chains, (ideals.rows, ideals.cols), price,
                  prices if use_windows else None)


def _pairs(ideals: Ideals, price: np.ndarray, prices: Prices, windows: Windows | None, ceiling: int, most: int,
           deadline: float | None) -> tuple[np.ndarray, np.ndarray] | None:
    """The pairs S ⊂ T with T \\ S cheap enough on the cheapest class and, with ``windows``, both
    ends in the price windows of some state: (S, T) arrays; None past ``most`` or ``deadline``."""
    wmin, size = ideals.wmin, ideals.size
    ranked: np.ndarray  # the ideals' compute, or their price, in increasing order
    if windows is None:
        order = np.argsort(wmin, kind="stable")
        ranked = wmin[order]
        first, stop = wmin[:, None], (wmin + ceiling)[:, None]
    else:  # the windows are narrow near the optimum: rank by price and check the compute after
        order = np.argsort(price, kind="stable")
        ranked = price[order]
        first, stop = windows.stage_ends(price, prices.reach(float(ceiling)))
    lo_all = np.searchsorted(ranked, first, side="left")
    hi_all = np.maximum(lo_all, np.searchsorted(ranked, stop, side="right"))
    packed = np.packbits(ideals.member, axis=1)
    words = np.pad(packed, ((0, 0), (0, (-packed.shape[1]) % 8))).view(np.uint64)
    src_parts: list[np.ndarray] = []
    dst_parts: list[np.ndarray] = []
    total = 0
    for step, i in enumerate(np.flatnonzero((hi_all > lo_all).any(axis=1)).tolist()):
        cand = order[np.concatenate([np.arange(a, b) for a, b in _merged(lo_all[i], hi_all[i])])]
        cand = cand[size[cand] > size[i]]
        if windows is not None:
            cand = cand[wmin[cand] - wmin[i] <= ceiling]
        cand = cand[~np.any(words[i][None, :] & ~words[cand], axis=1)]
        total += len(cand)
        if total > most or (deadline is not None and step % 256 == 0 and time.perf_counter() > deadline):
            return None
        src_parts.append(np.full(len(cand), i, dtype=np.int64))
        dst_parts.append(cand)
    src = np.concatenate(src_parts) if src_parts else np.zeros(0, dtype=np.int64)
    dst = np.concatenate(dst_parts) if dst_parts else np.zeros(0, dtype=np.int64)
    return src, dst


def _per_class(problem: Problem, costs: Ticks, classes: list[list[int]], ideals: Ideals, chain_in: np.ndarray,
               src: np.ndarray, dst: np.ndarray, fits: np.ndarray, ceiling: int) -> list[ClassStages]:
    """Per class, the stages that fit with what each receives and sends, sorted by the ideal they end
    at; a stage is dropped where even its cheapest receipts and sends pass the ceiling."""
    member, inside, outdeg, cols = ideals.member, ideals.inside, ideals.outdeg, ideals.cols
    r_pair, r_pos = _expand(src, ideals.ptr)
    keep = inside[dst[r_pair], cols[r_pos]] > inside[src[r_pair], cols[r_pos]]
    r_pair, r_pos = r_pair[keep], r_pos[keep]
    s_pair, s_pos = _expand(dst, ideals.ptr)
    keep = ~member[src[s_pair], cols[s_pos]]
    s_pair, s_pos = s_pair[keep], s_pos[keep]
    s_count = (outdeg[cols[s_pos]] - inside[dst[s_pair], cols[s_pos]]).astype(np.int64)
    reads_all = np.bincount(r_pair[ideals.is_max[r_pos]], minlength=len(src)) == ideals.n_max[src]

    per_class: list[ClassStages] = []
    serial = problem.options.comm == "serial"
    others = ~np.eye(problem.n_devices, dtype=bool)
    r_u, s_u = cols[r_pos], cols[s_pos]
    for c, cls in enumerate(classes):
        rep = cls[0]
        compute = ideals.work[dst, c] - ideals.work[src, c]
        fit = fits[c].copy()
        if problem.n_devices > 1:  # the least the stage can receive and send, over the cheapest link
            cheapest_in = costs.transfer[:, others[:, rep], rep].min(axis=1)
            cheapest_out = costs.transfer[:, rep, others[rep]].min(axis=1)
            floor_in = np.bincount(r_pair, weights=cheapest_in[r_u].astype(np.float64), minlength=len(src))
            floor_out = np.bincount(s_pair, weights=cheapest_out[s_u].astype(np.float64), minlength=len(src))
            floor = compute + floor_in + floor_out if serial else np.maximum(np.maximum(compute, floor_in), floor_out)
            fit &= floor <= ceiling
        idx = np.flatnonzero(fit)
        idx = idx[np.argsort(dst[idx], kind="stable")]
        local = np.full(len(src), -1, dtype=np.int64)
        local[idx] = np.arange(len(idx))
        lr, ls = local[r_pair], local[s_pair]
        r, s = lr >= 0, ls >= 0
        per_class.append(ClassStages(src[idx], dst[idx], compute[idx], lr[r], r_u[r], ideals.fresh_in[r_pos[r]],
                                     ideals.is_max[r_pos[r]], reads_all[idx], ls[s], s_u[s],
                                     ideals.fresh_out[s_pos[s]], s_count[s], chain_in[s_pos[s]]))
    return per_class


def _expand(rows: np.ndarray, ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, p) for every entry i of ``rows`` and every position p of CSR row ``rows[i]``."""
    counts = ptr[rows + 1] - ptr[rows]
    item = np.repeat(np.arange(len(rows)), counts)
    first = np.repeat(ptr[rows] - (np.cumsum(counts) - counts), counts)
    return item, first + np.arange(int(counts.sum()))


def _merged(starts: np.ndarray, stops: np.ndarray) -> list[tuple[int, int]]:
    """The non-empty ranges [start, stop) merged where they overlap, in order."""
    out: list[tuple[int, int]] = []
    for a, b in sorted((a, b) for a, b in zip(starts.tolist(), stops.tolist(), strict=True) if b > a):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
