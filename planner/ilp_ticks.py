"""The integer costs the CP-SAT model works in: seconds scaled to ticks, rounded down once per term.

CP-SAT takes integer coefficients only, so every layer time and every transfer is scaled to ticks,
about 2⁻³⁰ (9.3·10⁻¹⁰) of the largest possible stage time (:func:`resolution_for`), and rounded
*down* on its own.  The
model, the stage dynamic program of :mod:`pipeplan.planner.bound` and the scoring of warm starts all read
these tables, so a plan costs exactly the same number of ticks in each of them.

Why down: every plan then costs at most its seconds in ticks (a sum or max of terms each rounded
down is at most the scaled seconds), so any lower bound proven in ticks, divided by ``scale``, is a
lower bound in seconds on every valid plan.  Rounding to nearest would let a bound exceed the best
plan by up to half a tick per term.  Why finer than the old 10⁻⁷: ticks tie plans whose seconds
differ by less than a tick per term; at 10⁻⁷ two heavy layers and m tiny ones worth under half a
tick each were "proven" optimal while a balanced plan was faster by ~m/4 ticks.  Why not finer than
2⁻³⁰: at 2⁻³⁶ and above CP-SAT (9.15) reported OPTIMAL for a wrong objective on small random models
(tests/planner/test_ilp_bound.py::test_crossings_grouped_by_link_keep_the_optimum, 3 layers, 4 devices,
max_devices=1), its presolve or cuts losing exactness with coefficients near 2⁴⁰.  What the ticks
can still hide is at most one tick per term of the bottleneck stage, which the certificate's gap in
seconds shows (:data:`pipeplan.planner.ilp_exact.EXACT_TOLERANCE`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeplan.planner.problem import Problem

__all__ = ["RESOLUTION", "Ticks", "resolution_for"]

RESOLUTION = 2.0**30  # integer ticks across the largest possible stage time, at most (see the docstring)
# Terms are shrunk by this before rounding down, so that a product ``seconds · scale`` that floating
# point puts a hair above an integer never rounds up past the true value.
_SHRINK = 1.0 - 2.0**-50


def resolution_for(problem: Problem) -> float:
    """``RESOLUTION``, or less where the most the model's objectives can sum to would pass 2⁶¹: the
    latency and tie-break objectives weigh up to (K + M) stage times of up to 3 horizons each, and
    the tie-break's device count comes on top of that (:mod:`pipeplan.planner.ilp_exact`)."""
    k, m = problem.n_devices, problem.options.microbatches
    return min(RESOLUTION, 2.0**61 / (6 * (k + 1) * (k + m + 1)))


@dataclass(frozen=True)
class Ticks:
    """Per-term tick costs of one problem."""

    scale: float  # ticks per second
    compute: np.ndarray  # (n, k) int64: ticks(time[v][d])
    transfer: np.ndarray  # (n, k, k) int64: ticks(transfer(u, a, b)); 0 where nothing is sent
    horizon: int  # no compute, receive or send time of one device exceeds this
    # (k,) int64: ticks(stage_overhead[d]), paid once by a device that holds a stage (a shared GPU's
    # slice waits: Problem.stage_overhead); all 0 for most cost models
    overhead: np.ndarray

    @classmethod
    def of(cls, problem: Problem, resolution: float | None = None) -> Ticks:
        """The tables for ``problem`` with ``resolution`` ticks (default :func:`resolution_for`)
        across the largest possible stage time, built with numpy (the same float operations, in the same order, as
        :meth:`Problem.transfer`, so each entry is ``floor(transfer · scale)``, shrunk by 2⁻⁵⁰ first)."""
        n, k = problem.n_layers, problem.n_devices
        serial = problem.options.comm == "serial"
        latency = np.zeros((k, k))
        bandwidth = np.full((k, k), np.inf)
        for a in range(k):
            for b in range(k):
                if a != b:
                    link = problem.cluster.link(problem.devices[a], problem.devices[b])
                    latency[a, b], bandwidth[a, b] = link.latency, link.bandwidth
        out_bytes = np.array(problem.out_bytes, dtype=np.float64)
        sends = np.array([bool(problem.succ[u]) and problem.out_bytes[u] > 0 for u in range(n)])
        seconds = latency[None, :, :] + out_bytes[:, None, None] / bandwidth[None, :, :]
        seconds[~sends] = 0.0
        seconds[:, np.arange(k), np.arange(k)] = 0.0
        # The same sum, term by term, as the model has always used, so the scale does not move.
        # (transfer="per-edge" sends an output once per consumer, so it counts them)
        sent = [len(problem.succ[u]) if problem.options.transfer == "per-edge" else 1 for u in range(n)]
        worst = sum(max(row) for row in problem.time) + max(problem.stage_overhead, default=0.0) + sum(
            float(seconds[u].max()) * sent[u] for u in range(n) if problem.succ[u]) * (2 if serial else 1)
        scale = (resolution or resolution_for(problem)) / worst if worst > 0 else 1.0
        times = np.asarray(problem.time, dtype=np.float64).reshape(n, k)
        compute = np.floor(times * scale * _SHRINK).astype(np.int64)
        transfer = np.floor(seconds * scale * _SHRINK).astype(np.int64)
        overhead = np.floor(np.asarray(problem.stage_overhead, dtype=np.float64) * scale * _SHRINK).astype(np.int64)
        horizon = int(compute.max(axis=1).sum()) + int(overhead.max(initial=0)) + round(worst * scale) + 1
        return cls(scale, compute, transfer, horizon, overhead)

    def ticks(self, seconds: float) -> int:
        """``seconds`` rounded down to ticks, like every term of the tables."""
        return math.floor(seconds * self.scale * _SHRINK)

    def ceiling(self, seconds: float) -> int:
        """The most ticks a plan of ``seconds`` (a stage time or bottleneck) can cost: a sum of
        terms rounded down is at most its scaled seconds, kept a hair above for the float sums."""
        return math.floor(seconds * self.scale * (1.0 + 2.0**-40))

    def stage_costs(self, problem: Problem, dev_of: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-device (compute, receive, send) ticks of an assignment, as the model counts them."""
        k = problem.n_devices
        dev = np.asarray(dev_of, dtype=np.int64)
        compute = np.bincount(dev, weights=self.compute[np.arange(len(dev)), dev], minlength=k)
        held = np.unique(dev)
        compute[held] += self.overhead[held]  # once per device that holds a stage
        recv, send = np.zeros(k), np.zeros(k)
        for u, a in enumerate(dev_of):
            for b in problem.receivers(u, dev_of):
                recv[b] += self.transfer[u, a, b]
                send[a] += self.transfer[u, a, b]
        return compute.astype(np.int64), recv.astype(np.int64), send.astype(np.int64)

    def bottleneck(self, problem: Problem, dev_of: Sequence[int]) -> int:
        """The bottleneck of an assignment in ticks: what the model's ``B`` is for it."""
        compute, recv, send = self.stage_costs(problem, dev_of)
        if problem.options.comm == "serial":
            return int((compute + recv + send).max())
        return int(np.maximum(np.maximum(compute, recv), send).max())
