"""The ideals of a layer graph, with what the candidate stages between them need to know.

An *ideal* is a predecessor-closed set of layers.  The layers on the first i stages of any plan form
one, so a plan is a chain of ideals ∅ = S_0 ⊂ … ⊂ S_m = V, stage i holding S_i \\ S_(i−1).  This
module lists every ideal once (breadth-first, one layer added at a time, so by size) and builds,
one size at a time in numpy, each ideal's members, compute per class, memory, largest workspace,
price (:meth:`Ideals.total`) and *frontier*: its layers with a consumer outside it.
A frontier layer u is

- *fresh in* when it is the only maximal layer of S: every non-empty stage ending at S holds u, so
  a stage starting at S receives u from the stage just before;
- *fresh out* when every layer that could start the next stage (whose producers all lie in S) is
  a consumer of u: then a stage ending at S sends u to the stage just after.

Layers with no edges at all are left out: they can join any stage, and only add compute there.

Sizes: I ideals (exponential in the graph's width in general, 1–4·n on the networks here), O(I·n)
memory for the membership tables, O(I·n) time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import Problem

__all__ = ["Ideals", "consumer_chains", "isolated_layers", "list_ideals"]


@dataclass
class Ideals:
    """Every ideal of one problem's layers (see the module docstring); index 0 is ∅, the last one
    all the layers with edges."""

    parent: np.ndarray  # the ideal this one adds a layer to (-1 for ∅)
    added: np.ndarray  # the layer it adds (-1 for ∅)
    size: np.ndarray  # layers in it
    member: np.ndarray  # (I, n) bool
    inside: np.ndarray  # (I, n): consumers of each layer inside the ideal
    outdeg: np.ndarray  # (n,): consumers of each layer
    work: np.ndarray  # (I, classes): compute on each class's speed column
    wmin: np.ndarray  # (I,): compute with each layer on its cheapest class
    memory: np.ndarray  # (I,): parameters and kept activations
    top: np.ndarray  # (I,): the largest workspace
    levels: list[int]  # where each size starts, and the end
    # the frontier as (ideal, layer) pairs, and as CSR over the ideals (row i: ptr[i] to ptr[i + 1])
    rows: np.ndarray
    cols: np.ndarray
    ptr: np.ndarray
    fresh_in: np.ndarray  # per frontier entry
    fresh_out: np.ndarray
    is_max: np.ndarray  # per frontier entry: the layer is maximal in the ideal (no consumer inside)
    n_max: np.ndarray  # per ideal: its maximal layers

    def __len__(self) -> int:
        return len(self.parent)

    def total(self, per_layer: np.ndarray) -> np.ndarray:
        """Per ideal, the sum of ``per_layer`` (floats) over its layers, added one layer at a time."""
        out = np.zeros(len(self))
        for lo, hi in itertools.pairwise(self.levels):
            out[lo:hi] = out[self.parent[lo:hi]] + per_layer[self.added[lo:hi]]
        return out


def isolated_layers(problem: Problem) -> list[int]:
    """The layers with no edges (all but one when no layer has an edge, so that a plan has a stage)."""
    has_pred = [False] * problem.n_layers
    for _, v in problem.edges:
        has_pred[v] = True
    isolated = [v for v in range(problem.n_layers) if not problem.succ[v] and not has_pred[v]]
    return isolated[1:] if len(isolated) == problem.n_layers else isolated


def _enumerate(problem: Problem, skip: set[int], cap: int) -> tuple[list[int], list[int], list[tuple[int, ...]]] | None:
    """Every ideal of the layers not in ``skip``, breadth-first from ∅ (so by size), as (parent,
    added layer, layers available next); None beyond ``cap`` ideals."""
    n = problem.n_layers
    preds = [0] * n
    for u, v in problem.edges:
        preds[v] |= 1 << u
    masks, seen = [0], {0}
    parent, added = [-1], [-1]
    avail: list[tuple[int, ...]] = [tuple(v for v in range(n) if not preds[v] and v not in skip)]
    i = 0
    while i < len(masks):
        s = masks[i]
        for v in avail[i]:
            t = s | (1 << v)
            if t in seen:
                continue
            if len(masks) >= cap:
                return None
            seen.add(t)
            masks.append(t)
            parent.append(i)
            added.append(v)
            avail.append(tuple(w for w in avail[i] if w != v)
                         + tuple(w for w in problem.succ[v] if not preds[w] & ~t))
        i += 1
    return parent, added, avail


def list_ideals(problem: Problem, costs: Ticks, classes: list[list[int]], isolated: list[int],
                cap: int) -> Ideals | None:
    """The ideals of ``problem``'s layers but ``isolated``, with their tables (see the module
    docstring); None beyond ``cap`` ideals."""
    n = problem.n_layers
    found = _enumerate(problem, set(isolated), cap)
    if found is None:
        return None
    parent_list, added_list, avail = found
    parent, added = np.asarray(parent_list, dtype=np.int64), np.asarray(added_list, dtype=np.int64)
    n_ideals = len(parent)

    # -- per ideal: members, compute per class, memory, consumers of each layer inside ------------
    rep = [c[0] for c in classes]
    node_time = costs.compute[:, rep]
    node_mem = (np.asarray(problem.param_bytes, dtype=np.int64)
                + problem.options.kept_microbatches * np.asarray(problem.act_bytes, dtype=np.int64))
    count = np.int16 if max((len(s) for s in problem.succ), default=0) < 2**15 else np.int32
    pred_rows = np.zeros((n, n), dtype=count)  # pred_rows[w, u] = 1 for an edge u -> w
    for u, v in problem.edges:
        pred_rows[v, u] = 1
    outdeg = np.array([len(s) for s in problem.succ], dtype=count)
    member = np.zeros((n_ideals, n), dtype=bool)
    inside = np.zeros((n_ideals, n), dtype=count)
    work = np.zeros((n_ideals, len(classes)), dtype=np.int64)
    wmin = np.zeros(n_ideals, dtype=np.int64)
    memory = np.zeros(n_ideals, dtype=np.int64)
    workspace = np.asarray(problem.workspace, dtype=np.int64)
    top = np.zeros(n_ideals, dtype=np.int64)
    size = np.zeros(n_ideals, dtype=np.int64)
    for i in range(1, n_ideals):
        size[i] = size[parent[i]] + 1
    levels = [*(np.flatnonzero(np.diff(size)) + 1).tolist(), n_ideals]
    for lo, hi in itertools.pairwise(levels):  # one size at a time; ∅ (index 0) stays empty
        par, add = parent[lo:hi], added[lo:hi]
        member[lo:hi] = member[par]
        member[np.arange(lo, hi), add] = True
        inside[lo:hi] = inside[par] + pred_rows[add]
        work[lo:hi] = work[par] + node_time[add]
        wmin[lo:hi] = wmin[par] + node_time[add].min(axis=1)
        memory[lo:hi] = memory[par] + node_mem[add]
        top[lo:hi] = np.maximum(top[par], workspace[add])

    # -- the frontier of each ideal (layers with consumers outside it), as CSR, with its fresh flags --
    rows, cols = np.nonzero(member & (inside < outdeg[None, :]))
    ptr = np.zeros(n_ideals + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_ideals), out=ptr[1:])
    maximal = member & (inside == 0)
    n_max = maximal.sum(axis=1)
    only_max = np.where(n_max == 1, maximal.argmax(axis=1), -1)
    fresh_in = cols == only_max[rows]
    is_max = maximal[rows, cols]
    succ_sets = [frozenset(s) for s in problem.succ]
    fresh_out = np.array([succ_sets[u].issuperset(avail[i]) for i, u in zip(rows.tolist(), cols.tolist(),
                                                                           strict=True)], dtype=bool)
    return Ideals(parent, added, size, member, inside, outdeg, work, wmin, memory, top, levels, rows, cols, ptr,
                  fresh_in, fresh_out, is_max, n_max)


def consumer_chains(problem: Problem, least: np.ndarray) -> dict[int, tuple[list[int], np.ndarray]]:
    """For each layer with several consumers, a chain of its consumers taken in topological order,
    and the least compute (``least``: ticks per layer) of the layers between each two of them."""
    n = problem.n_layers
    below = [1 << v for v in range(n)]  # v and its descendants, as bit masks
    for v in range(n - 1, -1, -1):
        for w in problem.succ[v]:
            below[v] |= below[w]
    above = [1 << v for v in range(n)]  # v and its ancestors
    for u, v in problem.edges:  # listed by source, in topological order: above[u] is complete
        above[v] |= above[u]
    nbytes = (n + 7) // 8
    chains: dict[int, tuple[list[int], np.ndarray]] = {}
    for u in range(n):
        consumers = sorted(problem.succ[u])
        chain = consumers[:1]
        for w in consumers[1:]:
            if below[chain[-1]] >> w & 1:
                chain.append(w)
        if len(chain) < 2:
            continue
        span = np.zeros((len(chain), len(chain)), dtype=np.int64)
        for a, b in itertools.combinations_with_replacement(range(len(chain)), 2):
            between = below[chain[a]] & above[chain[b]]
            bits = np.unpackbits(np.frombuffer(between.to_bytes(nbytes, "little"), dtype=np.uint8),
                                 bitorder="little")[:n]
            span[a, b] = int(least[bits.astype(bool)].sum())
        chains[u] = (chain, span)
    return chains
