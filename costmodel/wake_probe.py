"""Measure a CPU's wake model (:mod:`pipeplan.costmodel.wake`): ``pipeplan costmodel wake``.

A reference workload — chains of a transformer MLP block (256 → 1024 → 256, GELU, 32 rows: about
2 MB of weights, in cache, like a stage's layers) of five lengths from about half a millisecond
to ten — is timed on one core, one thread, after sleeping each of a few waits from 0.5 to 16 ms
and back to back, idle and under each time-shared load asked for (real co-runners,
:class:`~pipeplan.costmodel.corunners.CoRunners`).  Times are **means** of the repeats, not
medians: under a shared core a chain shorter than the scheduler's slice runs at full speed most
of the time and waits a whole slice now and then, and a pipeline's throughput pays the mean.

The fit (:func:`fit_wake`) is least squares per probed sleep for the idle penalty ``a + b·w``, and a
one-dimensional search per load and sleep for the credit that fits the five chains best (log
error).  The reference workload is not any model the
evaluation uses; the model's figures on real pipelines are in ``benchmarks/README.md``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import torch

from pipeplan.costmodel.hardware import Contention, cpu_model
from pipeplan.costmodel.profile import pinned
from pipeplan.costmodel.wake import WakeError, WakeModel, least_squares, log_rms

__all__ = ["CHAIN_LENGTHS", "SLEEPS", "fit_wake", "measure_grid", "run_wake_probe"]

CHAIN_LENGTHS = (1, 3, 6, 12, 20)  # MLP blocks per timed call: about 0.5 to 10 ms on the project's VMs
SLEEPS = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016)  # seconds waited before a call (0: back to back)
_CREDITS = [i * 5e-5 for i in range(0, 201)]  # 0 … 10 ms of full-speed credit
_BURN = 0.01  # seconds of calls before the back-to-back ones are timed: past a wake's full-speed credit
_STEADY_CALLS = 3


def measure_grid(level: Contention | None, core: int = 0, repeats: int = 30,
                 chains: Sequence[int] = CHAIN_LENGTHS, sleeps: Sequence[float] = SLEEPS,
                 progress: Callable[[str], None] | None = None) -> dict[int, dict[float, float]]:
    """Mean seconds per call of each chain length after each sleep (0.0 = back to back), on ``core``
    under ``level`` (None: idle), in this process pinned to the core with one thread, as the profiler
    times layers (:func:`pipeplan.costmodel.profile.pinned`)."""
    from pipeplan.costmodel.corunners import CoRunners

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(32, 256, generator=gen)
    up, down = torch.randn(1024, 256, generator=gen) / 16, torch.randn(256, 1024, generator=gen) / 32

    def call(n: int) -> None:
        h = x
        for _ in range(n):
            h = torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(h, up)), down)

    load = CoRunners(level, cores=[core]) if level is not None and level.corunners else None
    out: dict[int, dict[float, float]] = {}
    try:
        if load is not None:
            load.start()
            time.sleep(0.3)  # let the co-runners reach their steady state
        with pinned([core], 1), torch.inference_mode():
            call(3)  # warm the allocator and the weights
            for n in chains:
                # the sleeps take turns within each repeat, so that a drift of the machine's speed
                # (a third within minutes on the project's VMs) hits every sleep alike
                samples: dict[float, list[float]] = {sleep: [] for sleep in (0.0, *sleeps)}
                for i in range(repeats + 2):
                    for sleep in samples:
                        if sleep:
                            time.sleep(sleep)
                            start = time.perf_counter()
                            call(n)
                            took = time.perf_counter() - start
                        else:  # back to back: past any credit of the last wake, then a few calls
                            burn = time.perf_counter() + _BURN
                            while time.perf_counter() < burn:
                                call(n)
                            start = time.perf_counter()
                            for _ in range(_STEADY_CALLS):
                                call(n)
                            took = (time.perf_counter() - start) / _STEADY_CALLS
                        if i >= 2:
                            samples[sleep].append(took)
                out[n] = {sleep: statistics.fmean(times) for sleep, times in samples.items()}
                if progress:
                    progress(f"{level.describe() if level else 'idle'}: {n} blocks, "
                             f"{out[n][0.0] * 1e3:.2f} ms back to back")
    finally:
        if load is not None:
            load.stop()
    return out


def fit_wake(grid: dict[str, dict[int, dict[float, float]]], cpu: str | None = None) -> WakeModel:
    """Fit a :class:`WakeModel` to measured grids (load description → :func:`measure_grid`'s result;
    ``"idle"`` is required, the other loads fit the credit)."""
    idle = grid.get("idle")
    if not idle:
        raise WakeError("a wake model needs the idle grid: the penalty is measured on an idle core")
    chains = sorted(idle)
    sleeps = sorted({s for row in idle.values() for s in row if s > 0})
    if len(chains) < 2 or not sleeps:
        raise WakeError(f"a wake model needs at least two chain lengths and one sleep, got {chains} and {sleeps}")
    work = {n: idle[n][0.0] for n in chains}
    fixed, rate = [], []
    for s in sleeps:
        a, b = least_squares([work[n] for n in chains], [idle[n][s] - work[n] for n in chains])
        fixed.append(a)
        rate.append(b)
    model = WakeModel(cpu=cpu or cpu_model(), measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                      sleeps=sleeps, penalty_fixed=fixed, penalty_rate=rate)
    loaded = {name: g for name, g in grid.items() if name != "idle"}

    def pairs(m: WakeModel, g: dict[int, dict[float, float]], level: Contention | None,
              only: float | None = None) -> list[tuple[float, float]]:
        return [(m.woken_time(work[n], g[n][0.0], s, level), g[n][s]) for n in chains if n in g
                for s in sleeps if s in g[n] and only in (None, s)]

    for name, g in loaded.items():
        level = Contention.parse(name)
        credits = model.credit[name] = [0.0] * len(sleeps)
        for i, s in enumerate(sleeps):  # each sleep's credit alone: at that sleep the model reads only it
            best = (float("inf"), 0.0)
            for c in _CREDITS:
                credits[i] = c
                err = log_rms(pairs(model, g, level, s))
                if err < best[0] - 1e-12:
                    best = (err, c)
            credits[i] = best[1]
    model.fit_error = {"idle": log_rms(pairs(model, idle, None)),
                       **{name: log_rms(pairs(model, g, Contention.parse(name))) for name, g in loaded.items()}}
    model.grid = {name: [[work[n], s, t] for n in sorted(g) for s, t in sorted(g[n].items())]
                  for name, g in grid.items()}
    return model


def run_wake_probe(levels: Sequence[Contention], core: int = 0, repeats: int = 30,
                   progress: Callable[[str], None] | None = None,
                   pipeline_cores: Sequence[int] | None = None) -> WakeModel:
    """Measure the idle grid and one per load in ``levels`` on ``core``, fit them, and with two
    ``pipeline_cores`` measure what a pipeline stage pays per microbatch, how late its input arrives
    on a loaded core, and how much of the credit it earns there (:mod:`pipeplan.costmodel.wake_pipeline`)."""
    if repeats < 1:
        raise WakeError(f"repeats must be at least 1, got {repeats}")
    shared = [lv for lv in levels if lv.corunners]
    if len(shared) != len(levels):
        odd = [lv.describe() for lv in levels if not lv.corunners]
        raise WakeError(f"the wake probe creates its loads with co-runners: {', '.join(odd)} has none "
                        "(give loads such as 2xcompute or 1xmemory)")
    grid = {"idle": measure_grid(None, core, repeats, progress=progress)}
    for level in shared:
        grid[level.describe()] = measure_grid(level, core, repeats, progress=progress)
    model = fit_wake(grid)
    if pipeline_cores is not None:
        from pipeplan.costmodel.wake_pipeline import measure_pipeline_credit, measure_recv_delay, measure_stage_extra

        cores = [core, *(c for c in pipeline_cores if c != core)]
        model.stage_fixed, model.stage_rate = measure_stage_extra(pipeline_cores, progress=progress)
        model.recv_delay = measure_recv_delay(shared, cores)
        if progress:
            progress("receives under load: " + ", ".join(f"{k} +{v * 1e3:.2f} ms" for k, v in model.recv_delay.items()))
        model.pipeline_credit, _ = measure_pipeline_credit(model, shared, cores, progress=progress)
    return model
