"""The ideals of a layer graph and the candidate pipeline stages between them (for :mod:`pipeplan.planner.ilp_bound`).

An *ideal* is a predecessor-closed set of layers.  The layers on the first i stages of any plan form
one, so a plan is a chain of ideals ∅ = S_0 ⊂ … ⊂ S_m = V, stage i holding S_i \\ S_(i−1).  This
module lists every ideal once (breadth-first, one layer added at a time) and every pair S ⊂ T whose
stage T \\ S could matter, with what that stage must receive and send:

- it receives the output of each u ∈ S with a consumer in T \\ S, once;  the receipt is *fresh*
  when u is the only maximal layer of S: then every non-empty stage ending at S holds u, so u comes
  from the stage just before;
- it sends the output of each u ∈ T \\ S with a consumer outside T;  the send is *fresh* when every
  layer that could start the next stage (whose producers all lie in T) is a consumer of u: then u
  goes to the stage just after.

Layers with no edges at all are left out: they can join any stage, and only add compute there.

Only the stages that may matter are kept: those that compute at most the limit (a known plan's
bottleneck) on some class of devices and fit its memory with their largest workspace, and, given
a limit, those whose two ends lie in the price windows of :mod:`pipeplan.planner.ilp_prices` (no plan under
the limit has a boundary elsewhere).  Near the optimum the windows cut the pairs from quadratic in
I to a few per ideal (2.9 million to 1,859 on Llama-2 7B over 2 A100 + 2 T4).

Sizes: I ideals (exponential in the graph's width in general, 1–4·n on the networks here) and P
pairs; building takes O(I·n) memory and O(C·n/64) time for the subset tests of the C pairs the
windows (or, without a limit, the compute) leave to test, in numpy.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from pipeplan.planner.ilp_fit import fitting
from pipeplan.planner.ilp_prices import Prices
from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import Problem

__all__ = ["MAX_CELLS", "MAX_IDEALS", "MAX_PAIRS", "ClassStages", "Stages", "candidate_stages"]

MAX_IDEALS = 30_000
MAX_CELLS = 30_000_000  # ideals × layers: the membership tables stay near 100 MB
MAX_PAIRS = 4_000_000


@dataclass
class ClassStages:
    """The candidate stages on one class of devices, sorted by the ideal they end at.  Entry j of
    the receive (send) lists says that stage ``r_item[j]`` receives (sends) layer ``r_u[j]``'s output;
    ``s_count`` is how many consumers the sent layer has beyond the stage, ``s_chain`` how many of
    its chain of consumers (:attr:`Stages.chains`) lie in or before the stage."""

    src: np.ndarray
    dst: np.ndarray
    compute: np.ndarray
    r_item: np.ndarray
    r_u: np.ndarray
    r_fresh: np.ndarray
    r_max: np.ndarray  # the received layer is maximal in the ideal the stage starts from
    r_all: np.ndarray  # per stage: it receives every maximal layer of the ideal it starts from
    s_item: np.ndarray
    s_u: np.ndarray
    s_fresh: np.ndarray
    s_count: np.ndarray
    s_chain: np.ndarray
    # With a broadcast layer tracked (see Stages.split), its receipts and sends are left out of the
    # lists above: b_in is 1 where the stage receives its output, b_out where the stage sends it
    # (b_fresh: to the next stage for sure).
    b_in: np.ndarray | None = None
    b_out: np.ndarray | None = None
    b_fresh: np.ndarray | None = None
    b_count: np.ndarray | None = None  # its consumers beyond the stage
    cache: dict[tuple[object, ...], np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ends, self.starts = np.unique(self.dst, return_index=True)

    def subset(self, keep: np.ndarray, broadcast: int | None = None) -> ClassStages:
        """The stages where ``keep``, with their lists; ``broadcast``: that layer's receipts and
        sends go into :attr:`b_in`, :attr:`b_out` and :attr:`b_fresh` instead."""
        local = np.full(len(self.src), -1, dtype=np.int64)
        count = int(np.count_nonzero(keep))
        local[keep] = np.arange(count)
        lr, ls = local[self.r_item], local[self.s_item]
        r, s = lr >= 0, ls >= 0
        b_in = b_out = b_fresh = b_count = None
        r_all = self.r_all[keep]
        if broadcast is not None:
            b_in, b_out, b_fresh, b_count = (np.zeros(count, dtype=np.int64) for _ in range(4))
            b_in[lr[r & (self.r_u == broadcast)]] = 1
            sent = s & (self.s_u == broadcast)
            b_out[ls[sent]] = 1
            b_fresh[ls[sent]] = self.s_fresh[sent]
            b_count[ls[sent]] = self.s_count[sent]
            r_all = r_all.copy()
            r_all[lr[r & (self.r_u == broadcast) & self.r_max]] = False  # its receipt is tracked apart
            r &= self.r_u != broadcast
            s &= self.s_u != broadcast
        return ClassStages(self.src[keep], self.dst[keep], self.compute[keep], lr[r], self.r_u[r], self.r_fresh[r],
                           self.r_max[r], r_all, ls[s], self.s_u[s], self.s_fresh[s], self.s_count[s], self.s_chain[s],
                           b_in, b_out, b_fresh, b_count)

    def ending_at(self, ideal: int) -> ClassStages:
        """The stages that end at ``ideal``, with their receive and send lists."""
        return self.subset(self.dst == ideal)


@dataclass
class Stages:
    member: np.ndarray  # (I, n) bool: layer v is in ideal i; ideal 0 is ∅, the last one all of V
    isolated: list[int]  # layers with no edges, in no ideal
    per_class: list[ClassStages]
    # For each layer u with several consumers: a chain of them (each a descendant of the one
    # before) and the least compute between chain members a and b: any stage that holds both also
    # holds every layer between them, so it computes at least span[a][b].
    chains: dict[int, tuple[list[int], np.ndarray]]
    frontier: tuple[np.ndarray, np.ndarray]  # (ideal, layer) pairs: the layer is in the ideal and read outside
    # Each ideal's price and the layer prices (pipeplan.planner.ilp_prices): the windows that drop the
    # stages no plan under a limit can use; None when there are no windows to draw.
    price: np.ndarray | None = None
    prices: Prices | None = None

    def __post_init__(self) -> None:
        self.last = [cs.ending_at(self.ideals - 1) for cs in self.per_class]  # the stages that end a plan

    def split(self, layer: int) -> dict[tuple[str, bool], list[ClassStages]]:
        """Per class, the stages before ``layer`` ("before": in neither ideal), the stage that holds
        it ("holds"), and those after it that receive its output ("reads") or not ("after"), each
        with the layer's receipts and sends apart (:meth:`ClassStages.subset`); key ``(part, True)``:
        only the stages that end a plan."""
        full = self.ideals - 1
        out: dict[tuple[str, bool], list[ClassStages]] = {}
        for last in (False, True):
            for part in ("before", "holds", "reads", "after"):
                out[part, last] = []
            for cs in self.per_class:
                in_src, in_dst = self.member[cs.src, layer], self.member[cs.dst, layer]
                reads = np.zeros(len(cs.src), dtype=bool)
                reads[cs.r_item[cs.r_u == layer]] = True
                ends = cs.dst == full if last else np.ones(len(cs.src), dtype=bool)
                for part, keep in (("before", ~in_dst), ("holds", in_dst & ~in_src), ("reads", in_src & reads),
                                   ("after", in_src & ~reads)):
                    out[part, last].append(cs.subset(keep & ends, layer))
        return out

    def narrow(self, limit: int) -> Stages:
        """The same stages without those that compute more than ``limit`` ticks or that no plan of
        bottleneck at most ``limit`` can use (:meth:`pipeplan.planner.ilp_prices.Windows.admits`)."""
        windows = None
        if self.price is not None and self.prices is not None:
            windows = self.prices.windows(float(self.price[-1]), limit)
        kept = []
        for c, cs in enumerate(self.per_class):
            keep = cs.compute <= limit
            if windows is not None and self.price is not None:
                keep &= windows.admits(c, self.price[cs.src], self.price[cs.dst])
            kept.append(cs.subset(keep))
        return Stages(self.member, self.isolated, kept, self.chains, self.frontier, self.price, self.prices)

    @property
    def ideals(self) -> int:
        return len(self.member)

    @property
    def pairs(self) -> int:
        return sum(len(cs.src) for cs in self.per_class)


def _ideals(problem: Problem, skip: set[int], cap: int) -> tuple[list[int], list[int], list[tuple[int, ...]]] | None:
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


def _expand(rows: np.ndarray, ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, p) for every entry i of ``rows`` and every position p of CSR row ``rows[i]``."""
    counts = ptr[rows + 1] - ptr[rows]
    item = np.repeat(np.arange(len(rows)), counts)
    first = np.repeat(ptr[rows] - (np.cumsum(counts) - counts), counts)
    return item, first + np.arange(int(counts.sum()))


def candidate_stages(problem: Problem, costs: Ticks, classes: list[list[int]], limit: int,
                     deadline: float | None = None, use_windows: bool = True,
                     prices: Prices | None = None) -> Stages | None:
    """Ideals and the stages between them that may cost at most ``limit`` ticks on some class (by
    their compute and their cheapest communication), whose memory (parameters, kept activations
    and largest workspace) fits that class's and, with ``use_windows``, that some plan of bottleneck at
    most ``limit`` can use (:mod:`pipeplan.planner.ilp_prices`: ``prices``, computed when None); None when
    there are too many, or ``time.perf_counter()`` passes ``deadline``."""
    n = problem.n_layers
    has_pred = [False] * n
    for _, v in problem.edges:
        has_pred[v] = True
    isolated = [v for v in range(n) if not problem.succ[v] and not has_pred[v]]
    if len(isolated) == n:
        isolated = isolated[1:]  # keep one layer, so that a plan has a stage
    found = _ideals(problem, set(isolated), min(MAX_IDEALS, MAX_CELLS // max(n, 1)))
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
    wmin = np.zeros(n_ideals, dtype=np.int64)  # compute with each layer on its cheapest class
    memory = np.zeros(n_ideals, dtype=np.int64)
    workspace = np.asarray(problem.workspace, dtype=np.int64)
    top = np.zeros(n_ideals, dtype=np.int64)  # the largest workspace in the ideal
    prices = prices or Prices.of(problem, costs, classes)
    price = np.zeros(n_ideals)  # pipeplan.planner.ilp_prices: the windows of boundaries under the limit
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
        price[lo:hi] = price[par] + prices.layer[add]

    # the frontier of each ideal (layers with consumers outside it), as CSR, with its fresh flags
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

    # -- candidate stages: S ⊂ T with T \ S cheap enough on the cheapest class, and, with a limit,
    # both ends in the price windows of some state (pipeplan.planner.ilp_prices) ------------------------------
    windows = prices.windows(float(price[-1]), limit) if use_windows else None
    if windows is not None and n_ideals * windows.moves > MAX_CELLS:
        windows = None  # its (ideal × move) tables would outgrow the membership table
    ranked: np.ndarray  # the ideals' compute, or their price, in increasing order
    if windows is None:
        order = np.argsort(wmin, kind="stable")
        ranked = wmin[order]
        first, stop = wmin[:, None], (wmin + limit)[:, None]
    else:  # the windows are narrow near the optimum: rank by price and check the compute after
        order = np.argsort(price, kind="stable")
        ranked = price[order]
        first, stop = windows.stage_ends(price, prices.reach(float(limit)))
    lo_all = np.searchsorted(ranked, first, side="left")
    hi_all = np.maximum(lo_all, np.searchsorted(ranked, stop, side="right"))
    packed = np.packbits(member, axis=1)
    words = np.pad(packed, ((0, 0), (0, (-packed.shape[1]) % 8))).view(np.uint64)
    src_parts: list[np.ndarray] = []
    dst_parts: list[np.ndarray] = []
    total = 0
    for step, i in enumerate(np.flatnonzero((hi_all > lo_all).any(axis=1)).tolist()):
        cand = order[np.concatenate([np.arange(a, b) for a, b in _merged(lo_all[i], hi_all[i])])]
        cand = cand[size[cand] > size[i]]
        if windows is not None:
            cand = cand[wmin[cand] - wmin[i] <= limit]
        cand = cand[~np.any(words[i][None, :] & ~words[cand], axis=1)]
        total += len(cand)
        if total > MAX_PAIRS or (deadline is not None and step % 256 == 0 and time.perf_counter() > deadline):
            return None
        src_parts.append(np.full(len(cand), i, dtype=np.int64))
        dst_parts.append(cand)
    src = np.concatenate(src_parts) if src_parts else np.zeros(0, dtype=np.int64)
    dst = np.concatenate(dst_parts) if dst_parts else np.zeros(0, dtype=np.int64)

    # -- per class: compute under the limit, in the windows, in memory (the stages no class takes go) ---
    fits = np.stack([work[dst, c] - work[src, c] <= limit for c in range(len(classes))])
    if windows is not None:
        for c in range(len(classes)):
            fits[c] &= windows.admits(c, price[src], price[dst])
    keep = fits.any(axis=0)
    src, dst, fits = src[keep], dst[keep], fits[:, keep]
    fits = fitting(member, memory, top, workspace, added, src, dst, fits, [problem.capacity[d] for d in rep])
    keep = fits.any(axis=0)
    src, dst, fits = src[keep], dst[keep], fits[:, keep]

    # -- what each stage receives and sends ------------------------------------------------------------
    r_pair, r_pos = _expand(src, ptr)
    keep = inside[dst[r_pair], cols[r_pos]] > inside[src[r_pair], cols[r_pos]]
    r_pair, r_pos = r_pair[keep], r_pos[keep]
    s_pair, s_pos = _expand(dst, ptr)
    keep = ~member[src[s_pair], cols[s_pos]]
    s_pair, s_pos = s_pair[keep], s_pos[keep]
    s_count = (outdeg[cols[s_pos]] - inside[dst[s_pair], cols[s_pos]]).astype(np.int64)
    reads_all = np.bincount(r_pair[is_max[r_pos]], minlength=len(src)) == n_max[src]
    chains = _consumer_chains(problem, node_time.min(axis=1))
    chain_in = np.zeros(len(cols), dtype=np.int64)  # chain members of the frontier layer inside the ideal
    for pos in np.flatnonzero(np.isin(cols, list(chains))).tolist():
        chain_in[pos] = int(member[rows[pos], chains[int(cols[pos])][0]].sum())

    # -- per class: the stages that fit, sorted by the ideal they end at ---------------------------------
    per_class: list[ClassStages] = []
    serial = problem.options.comm == "serial"
    others = ~np.eye(problem.n_devices, dtype=bool)
    r_u, s_u = cols[r_pos], cols[s_pos]
    for c in range(len(classes)):
        compute = work[dst, c] - work[src, c]
        fit = fits[c].copy()
        # the least the stage can receive and send, over the cheapest link from or to any device
        cheapest_in = costs.transfer[:, others[:, rep[c]], rep[c]].min(axis=1) if problem.n_devices > 1 else None
        cheapest_out = costs.transfer[:, rep[c], others[rep[c]]].min(axis=1) if problem.n_devices > 1 else None
        if cheapest_in is not None and cheapest_out is not None:
            floor_in = np.bincount(r_pair, weights=cheapest_in[r_u].astype(np.float64), minlength=len(src))
            floor_out = np.bincount(s_pair, weights=cheapest_out[s_u].astype(np.float64), minlength=len(src))
            floor = compute + floor_in + floor_out if serial else np.maximum(np.maximum(compute, floor_in), floor_out)
            fit &= floor <= limit
        idx = np.flatnonzero(fit)
        idx = idx[np.argsort(dst[idx], kind="stable")]
        local = np.full(len(src), -1, dtype=np.int64)
        local[idx] = np.arange(len(idx))
        lr, ls = local[r_pair], local[s_pair]
        r, s = lr >= 0, ls >= 0
        per_class.append(ClassStages(src[idx], dst[idx], compute[idx], lr[r], r_u[r], fresh_in[r_pos[r]],
                                     is_max[r_pos[r]], reads_all[idx], ls[s], s_u[s], fresh_out[s_pos[s]], s_count[s],
                                     chain_in[s_pos[s]]))
    return Stages(member, isolated, per_class, chains, (rows, cols), price, prices if use_windows else None)


def _merged(starts: np.ndarray, stops: np.ndarray) -> list[tuple[int, int]]:
    """The non-empty ranges [start, stop) merged where they overlap, in order."""
    out: list[tuple[int, int]] = []
    for a, b in sorted((a, b) for a, b in zip(starts.tolist(), stops.tolist(), strict=True) if b > a):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _consumer_chains(problem: Problem, least: np.ndarray) -> dict[int, tuple[list[int], np.ndarray]]:
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
