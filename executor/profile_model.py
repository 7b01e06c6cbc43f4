"""Time every layer of a model inside real forward passes: the table ``pipeplan profile MODEL`` writes.

A per-layer sweep times each layer alone, back to back, with hot caches; a real forward pass runs
layers one after the other, each finding the caches as the previous one left them, and runs glue
operators no sweep has (residual adds, reshapes, masks). On this project's Xeon whole forwards were
23–36% slower than the sum of swept layers. So this profiler times the model as it runs:

1. capture the model (:func:`pipeplan.costmodel.capture.capture_program`) and cut the exported program into
   one ``GraphModule`` per layer, in topological order (:func:`pipeplan.executor.stages.split_program` with
   one layer per stage), each taking exactly what the previous one returns;
2. run that chain on the model's inputs, pass after pass, with ``perf_counter`` around every
   layer's call; the original module's eager forward and the uncut exported graph run between
   passes, under the same conditions, for the sum check;
3. charge each layer the median of its calls over the passes, or the **mean** under contention: a
   layer that is descheduled for a co-runner's time slice waits for it, as it would in a pipeline
   stage, and most calls fit between slices, so a median would hide the waits. Idle, the median is
   the lowest of three consecutive blocks of passes: a burst of someone else's work on a shared
   machine inflates one block, not the profile;
4. subtract the Python cost of calling a layer module: an empty ``GraphModule`` with the same
   inputs and outputs is timed the same way. A pipeline stage pays that cost once, not per layer.

The CPU thread is pinned to the device's cores with a fixed torch thread count, as
:mod:`pipeplan.costmodel.profile` does; contention levels are real co-runner processes
(:class:`pipeplan.costmodel.corunners.CoRunners`) on the same cores. CPU only.
"""

from __future__ import annotations

import gc
import logging
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import torch
from torch import fx, nn

from pipeplan.costmodel.capture import CapturedProgram, capture_program
from pipeplan.costmodel.corunners import CoRunners
from pipeplan.costmodel.hardware import Contention, cpu_model
from pipeplan.costmodel.model_profile import LevelTimes, ModelProfile, ProfiledLayer
from pipeplan.costmodel.profile import ProfileSettings, SpeedProbe, pinned
from pipeplan.costmodel.source import build_source, flat_inputs, kwarg_order
from pipeplan.costmodel.speed_drift import SpeedCheck, SpeedWatch, check_tolerance
from pipeplan.executor.check import tensor_leaves
from pipeplan.executor.stages import StageProgram, split_program

__all__ = ["LayerChain", "ModelProfileSettings", "layer_chain", "profile_built", "profile_source"]

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
BLOCKS = 3  # idle passes are judged in this many consecutive blocks (see quiet_median)


@dataclass(frozen=True)
class ModelProfileSettings:
    """How to profile: where, under which loads, and for how long."""

    levels: Sequence[Contention] = (Contention(),)
    cores: Sequence[int] = (0,)
    threads: int = 1
    min_passes: int = 10  # timed passes per level, at least
    seconds_per_level: float = 2.0  # timed passes continue until this much time has passed
    warmup: int = 3  # untimed passes first: allocator, caches and branch predictors settle
    device_type: str = "cpu-core"
    # With a tolerance, the device's idle speed is measured before the first level and after each, as the sweep
    # does (pipeplan.costmodel.speed_drift): a slow spell between levels reads as a level's contention otherwise.
    drift_tolerance: float | None = None

    def __post_init__(self) -> None:
        if not self.levels:
            raise ValueError("give at least one contention level (e.g. --levels idle)")
        if self.threads < 1 or self.min_passes < 1 or self.warmup < 0 or not self.seconds_per_level > 0:
            raise ValueError(f"threads ({self.threads}) and passes ({self.min_passes}) must be ≥ 1, warmup "
                             f"({self.warmup}) ≥ 0 and seconds per level ({self.seconds_per_level}) > 0")
        check_tolerance(self.drift_tolerance)


@dataclass
class LayerChain:
    """A model cut into one module per layer, ready to run on its inputs."""

    layers: list[str]
    stages: list[StageProgram]
    empties: list[fx.GraphModule]  # per layer: a module with its inputs and outputs that computes nothing
    inputs: tuple[Any, ...]  # the flat inputs of the first layer
    forward: Callable[[], Any]  # the original module's eager forward on the same inputs
    whole: nn.Module  # the exported graph uncut, called on ``inputs``: what one pipeline stage runs

    def run(self, modules: Sequence[nn.Module], times: list[list[float]] | None = None) -> Any:
        """Run ``modules`` as a chain; with ``times``, append each call's seconds to its list."""
        values: Any = self.inputs
        clock = time.perf_counter
        for k, module in enumerate(modules):
            start = clock()
            values = module(*values)
            if times is not None:
                times[k].append(clock() - start)
        return values


def _empty_like(stage: StageProgram) -> fx.GraphModule:
    """A module that takes ``stage``'s inputs and returns as many values, computing nothing."""
    graph = fx.Graph()
    ins = [graph.placeholder(name) for name in stage.inputs]
    graph.output(tuple(ins[i % len(ins)] for i in range(len(stage.outputs))))
    return fx.GraphModule(nn.Module(), graph, class_name="Empty")


def layer_chain(captured: CapturedProgram, model: nn.Module, args: tuple[Any, ...],
                kwargs: Mapping[str, Any]) -> LayerChain:
    """Cut ``captured`` into one module per layer (topological order) to run on ``args``/``kwargs``."""
    order = [la.name for la in sorted(captured.graph.layers, key=lambda la: la.order)]
    stages = split_program(captured, [[name] for name in order])
    whole = split_program(captured, [order])[0].module
    flat = tuple(flat_inputs(args, kwargs, kwarg_order(kwargs, captured.program.call_spec.in_spec)))
    return LayerChain(order, stages, [_empty_like(s) for s in stages], flat,
                      lambda: model(*args, **kwargs), whole)


def _check_outputs(chain: LayerChain) -> None:
    """The chain computes what the model does: a wrong cut would time the wrong work."""
    with torch.inference_mode():
        got = tensor_leaves(chain.run([s.module for s in chain.stages]))
        want = tensor_leaves(chain.forward())
    if got and want and not any(g.shape == w.shape and torch.allclose(g.float(), w.float(), rtol=1e-3, atol=1e-4)
                                for g in got for w in want):
        log.warning("the layer chain's outputs differ from the model's eager forward; its times may not be "
                    "the model's")


def time_level(chain: LayerChain, load: Contention, settings: ModelProfileSettings) -> LevelTimes:
    """Every layer's seconds under ``load`` (already running), pinned as ``settings`` says."""
    modules = [s.module for s in chain.stages]
    n = len(modules)
    raw: list[list[float]] = [[] for _ in range(n)]
    empty: list[list[float]] = [[] for _ in range(n)]
    forward: list[float] = []
    graph: list[float] = []
    with torch.inference_mode():
        for _ in range(settings.warmup):
            chain.forward()
            chain.whole(*chain.inputs)
            chain.run(modules)
            chain.run(chain.empties)
        gc.collect()
        gc.disable()  # a collection inside one layer's call would be charged to it
        try:
            started, passes = time.perf_counter(), 0
            while passes < settings.min_passes or time.perf_counter() - started < settings.seconds_per_level:
                begin = time.perf_counter()
                chain.forward()
                forward.append(time.perf_counter() - begin)
                begin = time.perf_counter()
                chain.whole(*chain.inputs)
                graph.append(time.perf_counter() - begin)
                chain.run(modules, raw)
                chain.run(chain.empties, empty)
                passes += 1
        finally:
            gc.enable()
    stat: Callable[[list[float]], float] = quiet_median if load.idle else statistics.fmean
    overhead = [quiet_median(e) for e in empty]  # the call cost does not wait for co-runners
    times = [stat(r) for r in raw]
    return LevelTimes(load, [max(0.0, t - o) for t, o in zip(times, overhead, strict=True)],
                      forward_s=stat(forward), graph_s=stat(graph), raw_s=times, overhead_s=overhead,
                      statistic="median" if load.idle else "mean", passes=passes, loadavg=os.getloadavg()[0])


def quiet_median(samples: Sequence[float], blocks: int = BLOCKS) -> float:
    """The lowest median of ``blocks`` consecutive runs of ``samples`` (the plain median of fewer than
    ``3 × blocks``): a burst of other work on the machine inflates the blocks it overlaps, not all.

    >>> quiet_median([1.0, 1.1, 1.0, 5.0, 5.2, 5.1, 1.2, 1.1, 1.0])
    1.0
    """
    if len(samples) < 3 * blocks:
        return statistics.median(samples)
    size = len(samples) // blocks
    return min(statistics.median(samples[i * size:(i + 1) * size]) for i in range(blocks))


def profile_built(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None = None, *,
                  name: str | None = None, granularity: str = "leaf",
                  settings: ModelProfileSettings | None = None, source: Mapping[str, Any] | None = None,
                  progress: Progress | None = None, captured: CapturedProgram | None = None,
                  checked: Callable[[SpeedCheck], None] | None = None) -> ModelProfile:
    """Profile ``model`` called on ``args``/``kwargs`` under every level of ``settings``.

    ``captured``: the caller's capture of this very model and inputs at ``granularity``, used instead
    of exporting it again (a caller that needs the graph's layers as well captures once). With
    ``settings.drift_tolerance``, each speed check after a level goes to ``checked`` (without it, one that
    moved is logged as a warning).

    >>> table = profile_built(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), (torch.randn(2, 8),),
    ...                       settings=ModelProfileSettings(min_passes=3, seconds_per_level=0.01))
    >>> [la.name for la in table.layers], table.levels[0].statistic
    (['0', '1'], 'median')
    """
    settings = settings or ModelProfileSettings()
    kwargs = dict(kwargs or {})
    model.eval()
    if captured is None:
        captured = capture_program(model, args, kwargs, granularity=granularity, name=name)
    chain = layer_chain(captured, model, args, kwargs)
    by_name = {la.name: la for la in captured.graph.layers}
    levels: list[LevelTimes] = []
    with pinned(settings.cores, settings.threads):
        _check_outputs(chain)
    watch = None
    if settings.drift_tolerance is not None:
        probe = SpeedProbe(ProfileSettings(cores=settings.cores, threads=settings.threads))
        watch = SpeedWatch(probe.measure, settings.drift_tolerance, checked=checked)
    for load in settings.levels:
        if progress:
            progress(f"{captured.graph.model}: {len(chain.layers)} layers, {load.describe()}")
        with CoRunners(load, cores=settings.cores), pinned(settings.cores, settings.threads):
            level = time_level(chain, load, settings)
        whole = level.graph_s or level.forward_s
        log.info("%s %s: sum of layers %.3f ms, whole graph %.3f ms (%+.1f%%), eager forward %.3f ms (%+.1f%%), "
                 "%d passes", captured.graph.model, load.describe(), level.sum_s * 1e3, whole * 1e3,
                 100 * (level.sum_s / whole - 1), level.forward_s * 1e3,
                 100 * (level.sum_s / level.forward_s - 1), level.passes)
        levels.append(level)
        if watch is not None:
            watch.after(load.describe())
    dtype = next((str(p.dtype).removeprefix("torch.") for p in model.parameters()), "float32")
    return ModelProfile(
        model=captured.graph.model, granularity=granularity, batch_size=captured.graph.batch_size,
        dtype={"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype),
        device_type=settings.device_type, device_name=cpu_model(), cores=list(settings.cores),
        threads=settings.threads, source=dict(source or {}), torch_version=torch.__version__,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        layers=[ProfiledLayer(n, by_name[n].kind, by_name[n].flops) for n in chain.layers], levels=levels)


def profile_source(source: Mapping[str, Any], *, granularity: str = "leaf",
                   settings: ModelProfileSettings | None = None, progress: Progress | None = None,
                   checked: Callable[[SpeedCheck], None] | None = None) -> ModelProfile:
    """Build the model ``source`` describes (:func:`pipeplan.costmodel.source.source_spec`) and profile it."""
    built = build_source(source)
    return profile_built(built.model, built.args, built.kwargs, name=built.name, granularity=granularity,
                         settings=settings, source=source, progress=progress, checked=checked)
