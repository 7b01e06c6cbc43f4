"""Timing one call: back-to-back windows on CPU cores, single calls from launch to completion on a GPU.

On a CPU a measurement runs the call back to back for a window and divides by the number of calls
(:func:`measure_call`): a window spans several scheduler time slices, so a call that time-shares
its core with a co-runner is charged for the time it waits. On CUDA it is the wall clock of single
calls, each from launch to completion, with the CUDA-event span kept beside it
(:class:`GpuTiming`): under a time-sliced co-tenant the event span shrinks (queued kernels run back
to back once the process gets the GPU back), so it is recorded, not used. :func:`timing_columns`
turns either into a dataset row's columns. Used by the profiler (:mod:`pipeplan.costmodel.profile`).
"""

from __future__ import annotations

import functools
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["CpuTiming", "GpuTiming", "measure_call", "time_call", "time_gpu_call", "timing_columns",
           "wall_clock_samples", "warm_gpu"]

log = logging.getLogger(__name__)


def wall_clock_samples(run: Callable[[], Any], sync: Callable[[], Any], repeats: int) -> list[float]:
    """Seconds of ``repeats`` single calls, each from launch to completion: ``sync`` (a device
    synchronise) runs before the clock starts and inside the timed span.

    >>> len(wall_clock_samples(lambda: sum(range(100)), lambda: None, 3))
    3
    """
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        run()
        sync()
        samples.append(time.perf_counter() - start)
    return samples


@dataclass(frozen=True)
class GpuTiming:
    """One GPU measurement: wall clock per call (what is recorded) and the CUDA-event span."""

    median: float
    low: float
    high: float
    event_median: float  # span between CUDA events around the same calls (shrinks under contention)
    calls: int


def time_gpu_call(run: Callable[[], Any], gpu: int, repeats: int = 20, warmup: int = 3) -> GpuTiming:
    """Wall clock from launch to completion of single calls on CUDA device ``gpu``."""
    sync = functools.partial(torch.cuda.synchronize, gpu)
    with torch.inference_mode():
        for _ in range(warmup):
            run()
        wall = wall_clock_samples(run, sync, repeats)
        spans = []
        for _ in range(max(3, repeats // 4)):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            sync()
            begin.record()
            run()
            end.record()
            sync()
            spans.append(begin.elapsed_time(end) / 1000.0)
    return GpuTiming(statistics.median(wall), min(wall), max(wall), statistics.median(spans), repeats)


def warm_gpu(gpu: int, seconds: float = 3.0) -> None:
    """Run 8192² matmuls for ``seconds``, so that clocks and caches are where a busy GPU keeps them."""
    dev = torch.device("cuda", gpu)
    a = torch.randn(8192, 8192, device=dev)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, a)
        torch.cuda.synchronize(dev)


CpuTiming = tuple[float, float, float, int]  # (median, min, max) seconds per call, calls per window


def timing_columns(timing: GpuTiming | CpuTiming, repeats: int) -> dict[str, Any]:
    """The measurement's columns of a dataset row. A :class:`GpuTiming` fills ``event_time_s`` with
    its CUDA-event span and counts its single calls as the repeats; a CPU timing leaves it empty.

    >>> timing_columns(GpuTiming(2e-3, 1e-3, 3e-3, 1.5e-3, 20), repeats=5)["event_time_s"]
    0.0015
    """
    event: float | None = None
    if isinstance(timing, GpuTiming):  # single calls, each one sample
        median, low, high, calls = timing.median, timing.low, timing.high, 1
        event, repeats = timing.event_median, timing.calls
    else:
        median, low, high, calls = timing
    return {"time_s": median, "time_min_s": low, "time_max_s": high, "spread": (high - low) / median,
            "repeats": repeats, "iterations": calls, "event_time_s": event}


def time_call(run: Callable[[], Any], window: float = 0.025, repeats: int = 5, warmup: int = 2,
              gpu: int | None = None) -> CpuTiming:
    """(median, min, max) seconds per call, and the calls per measurement (:func:`measure_call`'s,
    without the CUDA-event span)."""
    timing = measure_call(run, window, repeats, warmup, gpu)
    return (timing.median, timing.low, timing.high, 1) if isinstance(timing, GpuTiming) else timing


def measure_call(run: Callable[[], Any], window: float = 0.025, repeats: int = 5, warmup: int = 2,
                 gpu: int | None = None) -> GpuTiming | CpuTiming:
    """On a CPU: (median, min, max) seconds per call over ``repeats`` windows of back-to-back calls,
    and the calls per window. On a GPU: the :class:`GpuTiming` of single calls from launch to completion
    (:func:`time_gpu_call`, at least 10 of them), CUDA-event span included; the window is unused.
    """
    if gpu is not None:
        timing = time_gpu_call(run, gpu, repeats=max(10, repeats), warmup=warmup)
        log.debug("wall %.3g s, CUDA-event span %.3g s", timing.median, timing.event_median)
        return timing
    with torch.inference_mode():
        for _ in range(warmup):
            run()
        estimate = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            run()
            estimate = min(estimate, time.perf_counter() - start)
        calls = max(1, min(100_000, round(window / max(estimate, 1e-7))))
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                run()
            samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples), min(samples), max(samples), calls
