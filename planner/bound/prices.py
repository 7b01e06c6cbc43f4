"""Layer prices: a lower bound on the bottleneck from compute and memory alone, and the windows it
gives the stage boundaries of any plan that beats a known one (for :mod:`pipeplan.planner.bound.candidates`).

Give each class c of devices weights μ_c, ν_c ≥ 0 and each layer the *price*
p_v = min_c (μ_c·t_vc + ν_c·m_v), t_vc its compute in ticks on class c and m_v its parameters and
kept activations in bytes.  A stage on a class-c device that computes at most L ticks and fits its
memory holds layers of total price at most κ_c(L) = μ_c·L + ν_c·M_c, since each of them costs
μ_c·t_vc + ν_c·m_v ≥ p_v there; M_c is the device's capacity less the least workspace of any layer
(a stage's workspace is the largest of its layers').  So in any plan whose bottleneck
is at most L (every stage time is at least its compute, in either communication mode):

- the devices cover the price of every layer: P(V) ≤ the κ(L) of the m devices with the largest,
  m the devices a plan may use: the least such L is :meth:`Prices.bound`;
- read in pipeline order, the layers on the first stages, an ideal S on devices σ (a count per
  class), have P(S) ≤ Σ_σ κ(L), and the rest must fit on what is left: P(V) − P(S) ≤ the κ(L)
  of the best m − |σ| devices left.  So a boundary after the devices σ lies in a *window* of
  prices (:meth:`Prices.windows`), and a candidate stage S → T on class c can be in such a plan
  only if, for some σ, S lies in σ's window and T in the window of σ plus one class-c device, and
  P(T) − P(S) ≤ κ_c(L).  Near the optimum the windows are narrow.  The stage program
  (:mod:`pipeplan.planner.bound.program`) only ever walks chains whose stages all compute at most its ceiling L
  and fit in memory: dropping the other candidate stages changes none of its values or chains,
  and takes most of them away (2.9 million of 2.9 million on Llama-2 7B over 2 A100 + 2 T4).

The weights maximise the bound: they are the dual of the fractional assignment (min B subject to
Σ_c x_vc = 1, Σ_v t_vc·x_vc ≤ size_c·B and Σ_v m_v·x_vc ≤ size_c·M_c), the linear program
max Σ_v p_v − Σ_c size_c·ν_c·M_c subject to p_v ≤ μ_c·t_vc + ν_c·m_v and Σ_c size_c·μ_c = 1,
solved with GLOP.  Any weights ≥ 0 give a valid bound, so the prices are recomputed from the
weights exactly and rounding in the solver cannot make them unsafe.  Classes with the same speed
column and capacity share weights.  Cost: one LP of n' + 2C variables and n'·C rows, n' the
distinct layers (repeated blocks repeat them) and C the distinct classes; none with one class and
room for every layer (then μ = 1/size, ν = 0: the bound is the total compute over the devices).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from ortools.linear_solver import pywraplp

from pipeplan.planner.ilp_ticks import Ticks
from pipeplan.planner.problem import Problem

__all__ = ["Prices", "Windows"]

_SLACK = 1e-9  # relative: float sums of prices are widened by this before any test, so no plan is lost
_NO_CEILING = 2**60  # a ceiling this high (the stage program's "none") draws no windows: ticks stay below 2³³


@dataclass(frozen=True)
class Windows:
    """Price windows of stage boundaries, per state σ (devices used so far, a count per class):
    a boundary after the devices σ has a price in ``[lo[σ], hi[σ]]``; ``next[σ, c]`` is the state
    after one more class-c device (−1: none can follow)."""

    lo: np.ndarray
    hi: np.ndarray
    next: np.ndarray

    def admits(self, c: int, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Whether a class-c stage from a boundary of price ``start`` to one of price ``end`` (arrays
        of the same length) fits some state's windows."""
        keep = np.zeros(len(start), dtype=bool)
        for s in np.flatnonzero(self.next[:, c] >= 0).tolist():
            t = int(self.next[s, c])
            keep |= ((start >= self.lo[s]) & (start <= self.hi[s]) & (end >= self.lo[t]) & (end <= self.hi[t]))
        return keep

    @property
    def moves(self) -> int:
        """(state, class) pairs a stage can take."""
        return int(np.count_nonzero(self.next >= 0))

    def stage_ends(self, start: np.ndarray, reach: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For boundaries of price ``start``, per move (a state and a class that can follow it), the
        least and most price at which a stage of that class starting there may end, as (boundaries ×
        moves) arrays; least > most where the boundary is not in the state's window.  ``reach[c]``:
        the most price one class-c stage can hold (μ_c times the ceiling)."""
        moves = np.argwhere(self.next >= 0)
        state, cls = moves[:, 0], moves[:, 1]
        after = self.next[state, cls]
        inside = (start[:, None] >= self.lo[state][None, :]) & (start[:, None] <= self.hi[state][None, :])
        least = np.maximum(self.lo[after][None, :], start[:, None])
        most = np.minimum(self.hi[after][None, :], start[:, None] + reach[cls][None, :] * (1 + _SLACK))
        return np.where(inside, least, np.inf), np.where(inside, most, -np.inf)


@dataclass(frozen=True)
class Prices:
    """Per-layer prices and per-class weights (see the module docstring)."""

    layer: np.ndarray  # (n,) float64: p_v
    compute_weight: np.ndarray  # (C,) float64: μ_c per tick, per class of interchangeable devices
    memory_weight: np.ndarray  # (C,) float64: ν_c per byte
    capacity: np.ndarray  # (C,) float64: M_c, bytes
    sizes: tuple[int, ...]  # devices per class
    max_devices: int  # devices a plan may use

    @classmethod
    def of(cls, problem: Problem, costs: Ticks, classes: list[list[int]]) -> Prices:
        """The prices of ``problem``'s layers in its ticks, with the weights that maximise :meth:`bound`."""
        return cls.from_times(problem, costs.compute[:, [c[0] for c in classes]], classes)

    @classmethod
    def from_times(cls, problem: Problem, times: np.ndarray, classes: list[list[int]]) -> Prices:
        """The same from ``times``: (layers × classes) compute in any unit, rounded down from the
        problem's seconds (each class's first device)."""
        rep = [c[0] for c in classes]
        ticks = np.asarray(times, dtype=np.float64)
        # Every stage's workspace is at least the least of any layer's (with live sets, most of it is the
        # boundary tensors of the microbatches in flight): 3.3 of a T4's 13.5 GiB under a 70B decoder.
        floor = min(problem.workspace, default=0)
        capacity = np.array([max(problem.capacity[d] - floor, 0) for d in rep], dtype=np.float64)
        sizes = tuple(len(c) for c in classes)
        kept = problem.options.kept_microbatches
        memory = (np.asarray(problem.param_bytes, dtype=np.float64)
                  + kept * np.asarray(problem.act_bytes, dtype=np.float64))
        # one pair of weights per distinct (speed column, capacity)
        keys, group_of = np.unique(np.vstack([ticks, capacity[None, :]]).T, axis=0, return_inverse=True)
        group_of = np.asarray(group_of).reshape(-1)
        per_group = np.bincount(group_of, weights=np.asarray(sizes, dtype=np.float64), minlength=len(keys))
        mu, nu = _best_weights(keys[:, :-1].T, memory, keys[:, -1], per_group)
        mu, nu = mu[group_of], nu[group_of]
        layer = (ticks * mu[None, :] + memory[:, None] * nu[None, :]).min(axis=1)
        return cls(layer, mu, nu, capacity, sizes, problem.options.max_devices or problem.n_devices)

    def reach(self, ceiling: float) -> np.ndarray:
        """κ_c(ceiling): the most price one class-c stage holds when it computes at most ``ceiling``."""
        return self.compute_weight * ceiling + self.memory_weight * self.capacity

    def _cover(self, counts: tuple[int, ...], devices: int, ceiling: float) -> float:
        """The most price ``devices`` of the devices ``counts`` (per class) cover under ``ceiling``."""
        reach = self.reach(ceiling).tolist()
        best = sorted(itertools.chain.from_iterable([r] * z for r, z in zip(reach, counts, strict=True)),
                      reverse=True)
        return float(sum(best[:max(devices, 0)]))

    def bound(self, total: float | None = None) -> int:
        """Ticks no plan's bottleneck can beat: the least ceiling under which the devices cover the
        price of every layer (or ``total``), less a slack for the float sums."""
        price = (float(self.layer.sum()) if total is None else total) * (1 - _SLACK)
        if price <= 0 or self._cover(self.sizes, self.max_devices, _NO_CEILING) < price:
            return 0
        lo, hi = 0, _NO_CEILING  # the cover grows with the ceiling: bisect for the least that suffices
        while lo < hi:
            mid = (lo + hi) // 2
            if self._cover(self.sizes, self.max_devices, mid) >= price:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def windows(self, total: float, ceiling: int, max_states: int) -> Windows | None:
        """Price windows of the boundaries of plans whose bottleneck is at most ``ceiling`` ticks,
        ``total`` the price of the whole chain; None with no ceiling, or when the states are more
        than ``max_states`` (:attr:`pipeplan.planner.bound.limits.Limits.max_window_states`)."""
        if ceiling >= _NO_CEILING:
            return None
        states = [s for s in itertools.product(*(range(z + 1) for z in self.sizes)) if sum(s) <= self.max_devices]
        if len(states) > max_states:
            return None
        index = {s: i for i, s in enumerate(states)}
        slack = _SLACK * (total + 1.0)
        lo = np.empty(len(states))
        hi = np.empty(len(states))
        nxt = np.full((len(states), len(self.sizes)), -1, dtype=np.int64)
        for i, s in enumerate(states):
            left = tuple(z - y for z, y in zip(self.sizes, s, strict=True))
            lo[i] = total - self._cover(left, self.max_devices - sum(s), ceiling) - slack
            hi[i] = self._cover(s, sum(s), ceiling) + slack
            for c in range(len(self.sizes)):
                nxt[i, c] = index.get((*s[:c], s[c] + 1, *s[c + 1:]), -1)
        return Windows(lo, hi, nxt)


def _best_weights(ticks: np.ndarray, memory: np.ndarray, capacity: np.ndarray,
                  sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weights μ, ν ≥ 0 with Σ sizes·μ = 1 that maximise Σ_v min_c (μ_c·ticks[v, c] + ν_c·memory[v])
    − Σ_c sizes_c·ν_c·capacity_c (GLOP); with one class and room for everything, no program."""
    n_classes = ticks.shape[1]
    if n_classes == 1 and memory.sum() <= sizes[0] * capacity[0]:
        return np.array([1.0 / sizes[0]]), np.zeros(1)
    t_scale = float(ticks.max()) or 1.0
    m_scale = float(max(memory.max(), capacity.max())) or 1.0
    # Repeated blocks give repeated layers: one price per distinct (times, memory), weighted by count.
    rows, count = np.unique(np.hstack([ticks / t_scale, (memory / m_scale)[:, None]]), axis=0, return_counts=True)
    solver = pywraplp.Solver.CreateSolver("GLOP")
    mu = [solver.NumVar(0.0, solver.infinity(), f"mu{c}") for c in range(n_classes)]
    nu = [solver.NumVar(0.0, solver.infinity(), f"nu{c}") for c in range(n_classes)]
    price = [solver.NumVar(0.0, solver.infinity(), f"p{v}") for v in range(len(rows))]
    for p, row in zip(price, rows.tolist(), strict=True):
        for c, t in enumerate(row[:-1]):
            solver.Add(p <= t * mu[c] + row[-1] * nu[c])
    solver.Add(sum(float(z) * m for z, m in zip(sizes, mu, strict=True)) == 1.0)
    solver.Maximize(sum(float(k) * p for k, p in zip(count, price, strict=True))
                    - sum(float(z * cap / m_scale) * n for z, cap, n in zip(sizes, capacity, nu, strict=True)))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:  # any weights are valid: fall back to compute alone
        return np.full(n_classes, 1.0 / float(sizes.sum())), np.zeros(n_classes)
    mu_value = np.maximum([m.solution_value() for m in mu], 0.0) / t_scale
    nu_value = np.maximum([n.solution_value() for n in nu], 0.0) / m_scale
    return mu_value, nu_value
