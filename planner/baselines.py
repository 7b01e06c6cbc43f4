"""Baseline partitioners: the splits that pipeline libraries make without a solver.

Each one cuts the layers' topological order (``problem.layers``) into at most K contiguous chunks,
K = ``options.max_devices`` or the number of usable devices (those ``forbid_devices`` leaves), and
puts chunk i on the i-th usable device in cluster order; empty chunks are dropped.  Contiguous
chunks of a topological order are convex and their stage graph is acyclic, so a baseline's plan is
a valid pipeline unless a device runs out of memory or it breaks a pin or a keep-together group:
every plan is scored by :func:`pipeplan.planner.simulate.make_plan`, by the same rules as the ILP's, which
rejects it then with a :class:`PlanError` naming the constraint.  Only ``chain-dp`` plans around
the constraints: it gives a chunk a device only when the pins allow it (a device may then stay
empty), and never cuts a group.

>>> sorted(BASELINES)
['chain-dp', 'param-balanced', 'time-balanced', 'uniform']
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from pipeplan.planner.plan import Certificate, Plan, relative_gap
from pipeplan.planner.problem import PlanError, Problem
from pipeplan.planner.simulate import make_plan

__all__ = ["BASELINES", "Baseline", "best_baseline", "chain_dp", "get_baseline", "param_balanced",
           "time_balanced", "uniform"]

Baseline = Callable[[Problem], Plan]
Bounds = list[int]  # chunk c holds layers bounds[c] .. bounds[c + 1] - 1
# (n + 1) × (w + 1): entry [i, d] is the cost of chunk [i, i + d), inf when d = 0 or i + d > n; chunks
# of more than w layers cost inf (they do not fit)
Band = np.ndarray

logger = logging.getLogger(__name__)
_INF = math.inf


def uniform(problem: Problem) -> Plan:
    """Equal layer counts per chunk, the first ``n mod K`` chunks one layer longer.

    GPipe's default balance (Huang et al., NeurIPS 2019; torchgpipe with no ``balance_by_*``), O(n).
    """
    start = time.perf_counter()
    n, k = problem.n_layers, _chunk_count(problem)
    sizes = [n // k + (c < n % k) for c in range(k)]
    return _finish(problem, [0, *np.cumsum(sizes).tolist()], "uniform", "HEURISTIC", start)


def param_balanced(problem: Problem) -> Plan:
    """Chunks minimising the largest chunk's parameter bytes.

    DeepSpeed's ``PipelineModule(partition_method="parameters")``, solved exactly as a block
    (linear) partition by dynamic programming: O(n²·K).
    """
    return _balanced(problem, np.asarray(problem.param_bytes, dtype=np.float64), "param-balanced")


def time_balanced(problem: Problem) -> Plan:
    """Chunks minimising the largest chunk's time, a layer's time being its mean over devices.

    torchgpipe's ``balance_by_time`` (Kim et al., arXiv:2004.09910), which profiles layers and
    block-partitions the times; devices are taken as equal.  Exact block partition, O(n²·K).
    """
    return _balanced(problem, np.asarray(problem.time, dtype=np.float64).mean(axis=1), "time-balanced")


def chain_dp(problem: Problem) -> Plan:
    """PipeDream's dynamic program over contiguous splits onto devices 0, 1, ... in order.

    Narayanan et al., "PipeDream: generalized pipeline parallelism for DNN training", SOSP 2019.
    A chunk's time is counted as the simulator counts it: compute on its device, receive and send
    over its links, combined by ``max`` (overlap) or a sum (serial); chunks that do not fit in
    memory are excluded, so the plan fits whenever any such split does.

    Throughput: the least bottleneck, O(n·w·K) with numpy, w ≤ n the most layers whose parameters
    and kept activations fit the largest device (longer chunks are never tabled: 914 of a 70B
    decoder's 1,605 leaf layers on 2 A100 + 2 T4).  Latency (Σ T + (M − 1)·max T): the least
    Σ T with every T ≤ B, over the B that can matter, found by bisection on the non-increasing
    min-Σ(B); exact, O(n·w·K·s·log n) for s steps of min-Σ(B); ``min_throughput`` caps B.

    Exact (status OPTIMAL) on a chain over identical devices, links and capacities.  Otherwise
    HEURISTIC: other device orders are not tried, and with skip edges a chunk's communication
    depends on the other chunks, so the DP runs under an optimistic and a pessimistic estimate
    (see :class:`_Chunks`) and the split the simulator scores better is kept.
    """
    start = time.perf_counter()
    n, k = problem.n_layers, _chunk_count(problem)
    cap = problem.max_bottleneck
    found: list[Bounds] = []
    chunks = _Chunks(problem, k)
    for pessimistic in (False,) if problem.graph.is_chain else (False, True):
        costs = chunks.costs(pessimistic)
        bottleneck, bounds = _solve(costs, n)
        if bottleneck == _INF:
            raise PlanError(f"chain-dp: no split of the {n} layers into at most {k} contiguous chunks on "
                            f"{', '.join(problem.devices[d] for d in _lanes(problem)[:k])} fits in memory"
                            + (" and the constraints" if problem.placement.restricted else ""))
        if bottleneck > cap:
            if found:  # the pessimistic estimate misses the floor; the optimistic split stands
                break
            raise PlanError(f"chain-dp: no split reaches min_throughput={problem.options.min_throughput:g} "
                            f"samples/s; the best bottleneck is {bottleneck:.6g} s "
                            f"({problem.graph.batch_size / bottleneck:.6g}/s)")
        if problem.options.objective == "latency":
            bounds = _min_latency(costs, n, problem.options.microbatches, cap, bounds, bottleneck)
        if bounds not in found:
            found.append(bounds)
    status = "OPTIMAL" if _exact_case(problem) else "HEURISTIC"
    return min((_finish(problem, bounds, "chain-dp", status, start) for bounds in found),
               key=lambda plan: plan.objective_value)


BASELINES: dict[str, Baseline] = {"uniform": uniform, "param-balanced": param_balanced,
                                  "time-balanced": time_balanced, "chain-dp": chain_dp}


def get_baseline(name: str) -> Baseline:
    """The baseline called ``name`` (case-insensitive, ``_`` read as ``-``)."""
    if (found := BASELINES.get(name.strip().lower().replace("_", "-"))) is None:
        raise PlanError(f"unknown baseline {name!r}: choose one of {', '.join(BASELINES)}")
    return found


def best_baseline(problem: Problem) -> Plan:
    """The valid plan with the best objective among :data:`BASELINES` (ties: the first listed); one
    that does not fit in memory, or misses the latency objective's ``min_throughput``, is skipped."""
    plans: list[Plan] = []
    failures: list[str] = []
    for name, baseline in BASELINES.items():
        try:
            plan = baseline(problem)
            if plan.bottleneck > problem.max_bottleneck:
                raise PlanError(f"{name} misses min_throughput={problem.options.min_throughput:g}/s "
                                f"({plan.throughput:.6g}/s)")
            plans.append(plan)
        except PlanError as exc:
            logger.debug("baseline skipped: %s", exc)
            failures.append(str(exc))
    if not plans:
        raise PlanError(f"no baseline found a plan that fits {problem.graph.model!r} on "
                        f"{problem.cluster.name!r}: " + "; ".join(failures))
    return min(plans, key=lambda plan: plan.objective_value)


def _lanes(problem: Problem) -> list[int]:
    """The devices chunks go to, in order: every device some layer may use."""
    return problem.placement.usable


def _chunk_count(problem: Problem) -> int:
    return min(problem.options.max_devices or problem.n_devices, len(_lanes(problem)), problem.n_layers)


def _finish(problem: Problem, bounds: Bounds, method: str, status: str, start: float) -> Plan:
    """Score the chunks on devices 0, 1, ... and fill in the certificate."""
    chunks, lanes = len(bounds) - 1, _lanes(problem)
    dev_of = [lanes[c] for c in range(chunks) for _ in range(bounds[c], bounds[c + 1])]
    cert = Certificate(method=method, status=status, objective=0.0,
                       details={"chunk_sizes": [bounds[c + 1] - bounds[c] for c in range(chunks)]})
    plan = make_plan(problem, dev_of, cert, order=[problem.devices[d] for d in lanes[:chunks]])
    cert.objective = plan.objective_value
    cert.best_bound = cert.objective if status == "OPTIMAL" else problem.objective_lower_bound()
    cert.gap = relative_gap(cert.objective, cert.best_bound)
    cert.solve_time = time.perf_counter() - start
    return plan


def _exact_case(problem: Problem) -> bool:
    """A chain over interchangeable devices: every valid plan is a contiguous split in this order.
    Not with pins, which tell the usable devices apart (groups only forbid cuts, which the DP keeps)."""
    if not _exact_pins(problem):
        return False
    same_time = all(math.isclose(t, row[0], rel_tol=1e-12, abs_tol=0.0) for row in problem.time for t in row)
    links = {(link.bandwidth, link.latency) for _, _, link in problem.cluster.links()}
    return problem.graph.is_chain and same_time and len(links) <= 1 and len(set(problem.capacity)) == 1


def _exact_pins(problem: Problem) -> bool:
    """Whether every layer may use every usable device (no pin tells them apart)."""
    lanes = frozenset(_lanes(problem))
    return all(allowed == lanes for allowed in problem.placement.allowed)


def _sums(weights: np.ndarray, width: int | None = None) -> Band:
    """Chunk [i, i + d)'s total weight, for chunks of at most ``width`` layers (all when None)."""
    n = len(weights)
    width = n if width is None else width
    prefix = np.concatenate(([0.0], np.cumsum(weights)))
    cost = _ahead(prefix, width) - prefix[:, None]  # inf past the end
    cost[:, 0] = _INF
    return cost


def _at(cost: Band, i: int, j: int) -> float:
    """Chunk [i, j)'s entry of a band (inf for an empty chunk or one past its width)."""
    return float(cost[i, j - i]) if 0 <= j - i < cost.shape[1] else _INF


def _ahead(values: np.ndarray, width: int) -> np.ndarray:
    """(len(values), width + 1), a view: entry [i, d] is ``values[i + d]``, inf past the end."""
    return sliding_window_view(np.concatenate((values, np.full(width, _INF))), width + 1)


def _balanced(problem: Problem, weights: np.ndarray, method: str) -> Plan:
    """Exactly min(K, n) non-empty chunks minimising the largest chunk's weight (a block partition)."""
    start = time.perf_counter()
    bounds = _solve([_sums(weights)] * _chunk_count(problem), len(weights), exact=True)[1]
    return _finish(problem, bounds, method, "HEURISTIC", start)


def _solve(costs: Sequence[Band], n: int, *, total: bool = False, exact: bool = False,
           limit: float = _INF) -> tuple[float, Bounds]:
    """Split [0, n) into chunks c = 0, 1, ... where chunk [i, j) costs ``costs[c][i, j - i]``.

    Minimises the largest chunk cost, or with ``total`` the sum of chunk costs each at most ``limit``,
    over exactly ``len(costs)`` chunks when ``exact``, else at most.  Backward DP, O(n·w·K) for chunks
    of at most w layers (the bands' width); (inf, []) when no split exists.  Of the best splits, the
    one with each chunk as long as possible.
    """
    k = len(costs)
    width = costs[0].shape[1] - 1
    combine = np.add if total else np.maximum
    masked = [c if limit == _INF else np.where(c <= limit, c, _INF) for c in costs]
    tail = [np.full(n + 1, _INF) for _ in range(k + 1)]  # tail[c][i]: best for [i, n) from chunk c
    tail[k][n] = 0.0
    for c in range(k - 1, -1, -1):
        tail[c] = combine(masked[c], _ahead(tail[c + 1], width)).min(axis=1)
        if not exact:
            tail[c][n] = 0.0  # stop early: the remaining devices stay unused
    best = float(tail[0][0])
    if best == _INF:
        return best, []
    bounds = [0]
    while bounds[-1] < n:
        i, c = bounds[-1], len(bounds) - 1
        row = combine(masked[c][i], _ahead(tail[c + 1], width)[i])
        bounds.append(i + int(np.flatnonzero(row <= (tail[c][i] if total else best))[-1]))
    return best, bounds


class _Chunks:
    """The chunks' stage times on devices 0 .. k − 1, as bands as wide as the longest chunk whose
    parameters and kept activations fit the largest of them: what the two estimates share.

    Exact on a chain.  With skip edges a sender's or receiver's device is unknown: optimistic takes
    the neighbouring device and one receiving device per output; pessimistic takes the slowest link
    and one receiving device per consumer, an upper bound on what the simulator counts.
    """

    def __init__(self, problem: Problem, k: int) -> None:
        self.problem, self.k, self.lanes = problem, k, _lanes(problem)
        n = self.n = problem.n_layers
        params, acts = (np.concatenate(([0], np.cumsum(x, dtype=np.int64))) for x in (problem.param_bytes,
                                                                                         problem.act_bytes))
        held = params + problem.options.kept_microbatches * acts  # a chunk needs at least held[j] − held[i]
        largest = max(problem.capacity[lane] for lane in self.lanes[:k])
        width = self.width = n if np.any(np.diff(held) < 0) else int(
            np.clip((np.searchsorted(held, held + largest, side="right") - 1 - np.arange(n + 1)).max(), 1, n))
        ends = np.arange(n + 1)[:, None] + np.arange(width + 1)[None, :]
        past, clipped = ends > n, np.minimum(ends, n)
        workspace = np.concatenate((np.asarray(problem.workspace, dtype=np.int64), np.zeros(width, dtype=np.int64)))
        peak = np.zeros((n + 1, width + 1), dtype=np.int64)  # the largest workspace of chunk [i, i + d)
        peak[:, 1:] = np.maximum.accumulate(sliding_window_view(workspace, width)[:n + 1], axis=1)
        memory = (held[clipped] - held[:, None]) + peak
        uncut = _uncut(problem)
        # Per device, the compute of each chunk, inf where the chunk cannot go there: it does not fit,
        # holds a layer the pins keep off the device, or cuts a group.
        self.compute: list[Band] = []
        for lane in self.lanes[:k]:
            compute = _sums(np.array([problem.time[v][lane] for v in range(n)]), width)
            barred = np.concatenate(([0], np.cumsum([lane not in allowed for allowed in problem.placement.allowed])))
            compute[(memory > problem.capacity[lane]) | past | (barred[clipped] - barred[:, None] > 0)
                    | uncut[:, None] | uncut[clipped]] = _INF
            self.compute.append(compute)
        # u's output crosses each boundary b, u < b <= its last consumer: the chunk ending at b sends it, the
        # chunk starting at b receives it once it reaches u's first consumer from b on (its end passes `first`).
        parts: list[tuple[np.ndarray, ...]] = []
        for u in range(n):
            succ = np.sort(np.asarray(problem.succ[u], dtype=np.int64))
            if len(succ):
                b = np.arange(u + 1, succ[-1] + 1)
                at = np.searchsorted(succ, b)
                parts.append((b, succ[at] + 1, np.full(len(b), u), len(succ) - at, (succ[at] == b).astype(np.int64)))
        events: list[np.ndarray] = ([np.concatenate(p) for p in zip(*parts, strict=True)] if parts
                                    else [np.zeros(0, np.int64)] * 5)
        self.b, self.first, self.layer, self.beyond, self.next_reads = events
        # Receipts and sends that only chunks longer than the band hold are left out.
        self.received, self.sent = self.first - self.b <= width, self.b - self.layer <= width
        self.links: dict[tuple[int, int], np.ndarray] = {}
        self.pinned = not _exact_pins(problem)

    def link(self, a: int, d: int) -> np.ndarray:
        """Each layer's output time from chunk a to chunk d; nothing off the ends."""
        if (a, d) not in self.links:
            k, lanes = self.k, self.lanes
            self.links[a, d] = np.array([self.problem.transfer(u, lanes[a], lanes[d]) if 0 <= a < k and 0 <= d < k
                                         else 0.0 for u in range(self.n)])
        return self.links[a, d]

    def costs(self, pessimistic: bool) -> list[Band]:
        """The stage time of every chunk on each device under one estimate."""
        n, k, width, b, layer = self.n, self.k, self.width, self.b, self.layer
        costs: list[Band] = []
        for c in range(k):
            prev, nxt = self.link(c - 1, c)[layer], self.link(c, c + 1)[layer]
            if pessimistic:
                worst_in = np.max([self.link(a, c) for a in range(c)] or [np.zeros(n)], axis=0)[layer]
                worst_out = np.max([self.link(c, d) for d in range(c + 1, k)] or [np.zeros(n)], axis=0)[layer]
                t_in = np.where(layer == b - 1, prev, worst_in)
                t_out = self.next_reads * nxt + np.clip(np.minimum(self.beyond, k - 1 - c) - self.next_reads, 0,
                                                        None) * worst_out
            else:
                t_in, t_out = prev, nxt
            # Summed in the order of the dense (n + 1)² tables these bands replace, so the values are the
            # same: receipts along each row; sends up each column j, held by (j, length), read at [j − d, d].
            recv = np.zeros((n + 1, width + 1))
            np.add.at(recv, (b[self.received], (self.first - b)[self.received]), t_in[self.received])
            recv = np.cumsum(recv, axis=1)
            send = np.zeros((n + 1 + width, width + 1))
            np.add.at(send, (b[self.sent], (b - layer)[self.sent]), t_out[self.sent])
            send = np.cumsum(send, axis=1)
            step = send.strides
            send = as_strided(send, (n + 1, width + 1), (step[0], step[0] + step[1]), writeable=False)
            compute = self.compute[c]
            cost = compute + recv + send if self.problem.options.comm == "serial" else np.maximum(
                np.maximum(compute, recv), send)
            if self.pinned:  # a device the pins leave nothing for in this order may stay empty
                cost[:, 0] = 0.0
            costs.append(cost)
        return costs


def _uncut(problem: Problem) -> np.ndarray:
    """The boundaries (0..n) a chunk may not start or end at: inside a group's span in the order."""
    barred = np.zeros(problem.n_layers + 1, dtype=bool)
    for members in problem.placement.groups:
        barred[min(members) + 1:max(members) + 1] = True
    return barred


def _min_latency(costs: Sequence[Band], n: int, m: int, cap: float, fastest: Bounds, low: float) -> Bounds:
    """The split minimising Σ T + (m − 1)·max T, given ``fastest`` (max T = ``low``, the least) and a cap."""
    def latency(bounds: Bounds) -> float:
        times = [_at(costs[c], bounds[c], bounds[c + 1]) for c in range(len(bounds) - 1)]
        return float(sum(times) + (m - 1) * max(times))

    least_sum, bounds = _solve(costs, n, total=True, limit=cap)
    if m == 1:
        return bounds
    best = min((latency(fastest), fastest), (latency(bounds), bounds))
    high = min(cap, (best[0] - least_sum) / (m - 1))
    cands = np.unique(np.concatenate([c[(c >= low) & (c <= high)] for c in costs]))
    sums: dict[int, float] = {}

    def probe(i: int) -> float:
        nonlocal best
        if i not in sums:
            sums[i], found = _solve(costs, n, total=True, limit=float(cands[i]))
            best = min(best, (latency(found), found))
        return sums[i]

    # min-Σ(B) does not increase with B; where it is constant only the smallest B can be best
    stack = [(0, len(cands) - 1)] if len(cands) else []
    while stack:
        lo, hi = stack.pop()
        if least_sum + (m - 1) * cands[lo] >= best[0] or probe(lo) == probe(hi) or hi - lo <= 1:
            continue
        mid = (lo + hi) // 2
        stack += [(mid, hi), (lo, mid)]
    return best[1]
