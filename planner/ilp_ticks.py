"""The integer costs the CP-SAT model works in: seconds scaled to ticks, rounded once per term.

CP-SAT takes integer coefficients only, so every layer time and every transfer is scaled to ticks,
about 10⁻⁷ of the largest possible stage time, and rounded on its own.  The model, the stage
dynamic program of :mod:`planner.ilp_bound` and the scoring of warm starts all read these tables,
so a plan costs exactly the same number of ticks in each of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.problem import Problem

__all__ = ["RESOLUTION", "Ticks"]

RESOLUTION = 1e7  # integer ticks across the largest possible stage time


@dataclass(frozen=True)
class Ticks:
    """Per-term tick costs of one problem."""

    scale: float  # ticks per second
    compute: np.ndarray  # (n, k) int64: ticks(time[v][d])
    transfer: np.ndarray  # (n, k, k) int64: ticks(transfer(u, a, b)); 0 where nothing is sent
    horizon: int  # no compute, receive or send time of one device exceeds this

    @classmethod
    def of(cls, problem: Problem) -> Ticks:
        """The tables for ``problem``, built with numpy (the same float operations, in the same
        order, as :meth:`Problem.transfer`, so each entry equals ``round(transfer · scale)``)."""
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
        worst = sum(max(row) for row in problem.time) + sum(
            float(seconds[u].max()) for u in range(n) if problem.succ[u]) * (2 if serial else 1)
        scale = RESOLUTION / worst if worst > 0 else 1.0
        compute = np.rint(np.asarray(problem.time, dtype=np.float64).reshape(n, k) * scale).astype(np.int64)
        transfer = np.rint(seconds * scale).astype(np.int64)
        horizon = int(compute.max(axis=1).sum()) + round(worst * scale) + 1
        return cls(scale, compute, transfer, horizon)

    def ticks(self, seconds: float) -> int:
        return round(seconds * self.scale)

    def stage_costs(self, problem: Problem, dev_of: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-device (compute, receive, send) ticks of an assignment, as the model counts them."""
        k = problem.n_devices
        dev = np.asarray(dev_of, dtype=np.int64)
        compute = np.bincount(dev, weights=self.compute[np.arange(len(dev)), dev], minlength=k)
        recv, send = np.zeros(k), np.zeros(k)
        for u, a in enumerate(dev_of):
            for b in {dev_of[v] for v in problem.succ[u]} - {a}:
                recv[b] += self.transfer[u, a, b]
                send[a] += self.transfer[u, a, b]
        return compute.astype(np.int64), recv.astype(np.int64), send.astype(np.int64)

    def bottleneck(self, problem: Problem, dev_of: Sequence[int]) -> int:
        """The bottleneck of an assignment in ticks: what the model's ``B`` is for it."""
        compute, recv, send = self.stage_costs(problem, dev_of)
        if problem.options.comm == "serial":
            return int((compute + recv + send).max())
        return int(np.maximum(np.maximum(compute, recv), send).max())
