"""Measure layer forward times on this machine while real co-runners contend for the device.

For each contention level the profiler starts the co-runners (:class:`~pipeplan.costmodel.corunners.CoRunners`,
real processes pinned to the same cores), then times every target layer and appends one row per
layer to the dataset (:mod:`pipeplan.costmodel.dataset`). Levels are the outer loop so co-runners start once
per level; rows are written as they are measured, so an interrupted run keeps what it measured.

Timing: the profiling thread is pinned to the device's cores with a fixed torch thread count. A
repeat runs the layer back to back for a window (25 ms idle, 80 ms under contention) and divides by
the number of calls: a window spans several scheduler time slices, so a layer that time-shares its core with a
co-runner is charged for the time it waits, as it would be inside a running pipeline (timing single
calls would miss it: most calls fit in the layer's own slice). The median of the repeats is the
measurement; min and max are kept as the spread.

On CUDA each measurement is the **wall clock of one call, from launch to completion**
(``perf_counter`` around ``run(); torch.cuda.synchronize()``), what a pipeline stage waits for. CUDA
events are not: under a time-sliced co-tenant a process's queued kernels run back to back once it
gets the GPU back, so the span between events shrinks and contention looks like a speed-up (see
``costmodel/data/gpu/README.md``). The event span is still recorded beside it
(:class:`~pipeplan.costmodel.timing.GpuTiming`), in the dataset's ``event_time_s`` column (empty on
CPU rows). The GPU is warmed first (:func:`~pipeplan.costmodel.timing.warm_gpu`), since a cold H100
runs its first seconds at lower clocks; ``pipeplan profile --gpu`` sweeps the
GPU-sized shapes of :mod:`pipeplan.costmodel.gpu_sweep`.

Layers run in the settings' ``dtype`` (fp32, bf16 or fp16: weights and floating inputs cast to it,
:func:`check_dtype` refuses one the device cannot run); every row records it in its ``dtype`` column.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from pipeplan.costmodel.corunners import CoRunners
from pipeplan.costmodel.dataset import DTYPES as DATASET_DTYPES
from pipeplan.costmodel.dataset import contention_features, device_features, layer_features
from pipeplan.costmodel.dataset_files import check_appendable, write_rows
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention, Device, cpu_model
from pipeplan.costmodel.layerspecs import LayerSpec, model_layers
from pipeplan.costmodel.speed_drift import DRIFT_TOLERANCE, SpeedCheck, SpeedWatch, check_tolerance
from pipeplan.costmodel.timing import measure_call, time_call, timing_columns, warm_gpu

__all__ = ["DEFAULT_LEVELS", "DTYPES", "ProfileSettings", "SpeedProbe", "Target", "cast", "check_dtype",
           "measure_device", "pinned", "profile", "targets_from_models", "targets_from_specs", "torch_dtype"]

log = logging.getLogger(__name__)

DEFAULT_LEVELS = ("idle", "1xcompute", "2xcompute", "1xmemory", "2xmemory", "1xmixed", "50%")
# The dtypes a profile runs in, by the dataset's names ("fp32", "bf16", "fp16", in that order).
DTYPES = dict(zip(DATASET_DTYPES, (torch.float32, torch.bfloat16, torch.float16), strict=True))


@dataclass
class ProfileSettings:
    levels: Sequence[Contention] = field(default_factory=lambda: [Contention.parse(x) for x in DEFAULT_LEVELS])
    cores: Sequence[int] = (0,)
    threads: int = 1
    repeats: int = 5
    window: float = 0.025  # seconds of back-to-back calls per repeat, idle
    # Under contention a window must span many scheduler slices (a few ms each), or whether it
    # catches one slice more or less of the co-runners shows up as ±25% noise.
    loaded_window: float = 0.08
    warmup: int = 2
    budget: float | None = None  # seconds for the whole run; split evenly over the levels
    gpu: int | None = None  # CUDA device index; None profiles the CPU cores
    device_type: str = "cpu-core"  # the Device.type the rows describe (what cluster specs name)
    dtype: str = "fp32"  # what the layers run in: fp32, bf16 or fp16 (the latter two for GPUs)
    warm_seconds: float = 3.0  # of large matmuls before a GPU is timed
    # the device is measured idle before the first level and after each (pipeplan.costmodel.speed_drift); a
    # level whose speed moved by more than this fraction is reported. None: no checks
    drift_tolerance: float | None = DRIFT_TOLERANCE
    stop_on_drift: bool = False  # raise SpeedDrift after a level whose speed moved, instead of going on

    def __post_init__(self) -> None:
        torch_dtype(self.dtype)
        if self.threads < 1 or self.repeats < 1 or min(self.window, self.loaded_window) <= 0 or self.warmup < 0:
            raise ValueError("threads and repeats must be ≥ 1, windows > 0 and warmup ≥ 0")
        if not self.levels:
            raise ValueError("give at least one contention level")
        if self.budget is not None and self.budget <= 0:
            raise ValueError(f"budget must be positive seconds, got {self.budget}")
        check_tolerance(self.drift_tolerance)


@dataclass
class Target:
    """A layer ready to time: its identity, its features, and a call that runs it once."""

    config: str
    source: str  # "sweep" or "model:NAME"
    layer: Layer
    run: Callable[[], Any]
    dtype: str = "fp32"  # what ``run`` computes in (its weights and floating inputs)


def _on(device: torch.device, args: Any, dtype: str = "fp32") -> Any:
    return tuple(cast(a.to(device), dtype) if isinstance(a, torch.Tensor) else a for a in args)


def cast(tensor: torch.Tensor, dtype: str) -> torch.Tensor:
    """``tensor`` in ``dtype`` if it holds floating-point values; integer inputs (token ids) stay.

    >>> cast(torch.ones(2), "bf16").dtype, cast(torch.ones(2, dtype=torch.long), "fp16").dtype
    (torch.bfloat16, torch.int64)
    """
    return tensor.to(torch_dtype(dtype)) if tensor.is_floating_point() else tensor


def torch_dtype(dtype: str) -> torch.dtype:
    """torch's dtype of a profile's ``dtype`` (fp32, bf16, fp16); ``ValueError`` naming the choices."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def targets_from_specs(specs: Sequence[LayerSpec], gpu: int | None = None, dtype: str = "fp32") -> list[Target]:
    """Build each spec's module, capture it for its features, and wrap one forward call."""
    from pipeplan.costmodel.capture import capture

    targets = []
    device = torch.device("cuda", gpu) if gpu is not None else torch.device("cpu")
    for spec in specs:
        module, inputs = spec.build()
        graph = capture(module, inputs, name=spec.key)
        layers = graph.layers
        # One operator gives one layer; the rare extra glue layer (a view) is folded into it.
        main = max(layers, key=lambda la: (la.flops, la.bytes_read))
        layer = main if len(layers) == 1 else Layer(
            spec.key, main.kind, main.module_type, 0, flops=sum(la.flops for la in layers),
            bytes_read=sum(la.bytes_read for la in layers), bytes_written=sum(la.bytes_written for la in layers),
            param_bytes=sum(la.param_bytes for la in layers), activation_bytes=main.activation_bytes,
            kernels=sum(la.kernels for la in layers), input_shapes=main.input_shapes,
            ops=[op for la in layers for op in la.ops], channels_last=main.channels_last)
        module, args = module.to(device, torch_dtype(dtype)), _on(device, inputs, dtype)
        config = spec.key if dtype == "fp32" else f"{spec.key}@{dtype}"
        targets.append(Target(config, "sweep", layer, functools.partial(module, *args), dtype))
    return targets


def targets_from_models(names: Sequence[str], gpu: int | None = None, dtype: str = "fp32") -> list[Target]:
    """Every distinct leaf layer of each zoo model, with the inputs of a real forward pass, in ``dtype``
    (features stay those of the fp32 capture; a config other than fp32 ends in ``@dtype``)."""
    device = torch.device("cuda", gpu) if gpu is not None else torch.device("cpu")
    targets = []
    for name in names:
        for ml in model_layers(name):
            module, args = ml.module.to(device, torch_dtype(dtype)), _on(device, ml.args, dtype)
            kwargs = {k: cast(v.to(device), dtype) if isinstance(v, torch.Tensor) else v
                      for k, v in ml.kwargs.items()}
            config = ml.key if dtype == "fp32" else f"{ml.key}@{dtype}"
            targets.append(Target(config, f"model:{name}", ml.layer, functools.partial(module, *args, **kwargs),
                                  dtype))
    return targets


def check_dtype(dtype: str, gpu: int | None = None) -> None:
    """Run a small linear, convolution, layer norm, GELU and softmax in ``dtype`` on the device;
    ``ValueError`` saying so when this torch cannot (fp16 on some CPU builds)."""
    kind = torch_dtype(dtype)
    device = torch.device("cuda", gpu) if gpu is not None else torch.device("cpu")

    def ones(*shape: int) -> torch.Tensor:
        return torch.ones(*shape, device=device, dtype=kind)

    try:
        with torch.inference_mode():
            x = ones(4, 16)
            torch.nn.functional.linear(x, ones(8, 16))
            torch.nn.functional.conv2d(ones(1, 3, 8, 8), ones(4, 3, 3, 3))
            torch.nn.functional.layer_norm(x, (16,))
            torch.softmax(torch.nn.functional.gelu(x), dim=-1)
    except (RuntimeError, NotImplementedError) as exc:
        where = f"GPU {gpu}" if gpu is not None else "the CPU"
        raise ValueError(f"this torch ({torch.__version__}) cannot run {dtype} layers on {where}: {exc}; "
                         "profile in fp32 or bf16" + (" or on a GPU" if gpu is None else "")) from None


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


@functools.cache
def retain_freed_memory() -> bool:
    """Make glibc's malloc keep freed activation buffers for reuse instead of handing them back to
    the OS (once per process; False where the C library is not glibc).

    By default glibc serves large blocks with mmap and unmaps them when freed, so a model run back
    to back, as a pipeline stage runs its microbatches, page-faults fresh zeroed memory for every
    activation of every call: a ResNet-style CNN at batch 8 took 9.65 ms per call back to back
    against 8.3 ms when each call followed other work, and 8.3 ms back to back with these settings
    (what a pipeline stage runs and what the profiler times must be the same thing). The cost is
    memory the process keeps: freed blocks up to 32 MiB stay in its heap, and up to 1 GiB of free
    heap top is kept.
    """
    import ctypes
    import ctypes.util

    ok = False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = getattr(libc, "mallopt", None)
        if mallopt is not None:
            ok = bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30))
    except OSError:
        pass
    return ok


@contextmanager
def pinned(cores: Sequence[int], threads: int) -> Iterator[None]:
    """Run the calling thread on ``cores`` with ``threads`` torch threads, denormal floats flushed to
    zero; restore all three after.

    Why flush: models built with random weights (how pipeplan profiles anything it cannot download)
    can drive activations into denormal floats, which x86 cores compute many times slower. A randomly
    initialised EfficientNet ran 6× slower whole (0.6 GFLOP/s in 1×1 convolutions) for that alone;
    trained weights rarely produce denormals, and a profile is meant to describe the trained model.
    """
    old_cores, old_threads = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    retain_freed_memory()
    try:
        yield
    finally:
        torch.set_flush_denormal(False)  # torch's default: it has no getter to restore from
        os.sched_setaffinity(0, old_cores)
        torch.set_num_threads(old_threads)


class SpeedProbe:
    """The matmul and the copy that measure a device's speed, their tensors allocated once and kept, so that
    measuring again (:mod:`pipeplan.costmodel.speed_drift`) compares the device with itself: on a Zen 4 VM fresh
    64 MiB buffers for each copy read 25–37 GB/s within minutes where kept ones repeated within ±1%. A profile
    keeps one for its whole run: 129 MiB of host memory, 576 MiB on a GPU."""

    def __init__(self, settings: ProfileSettings) -> None:
        self.gpu = settings.gpu
        self.cores, self.threads = settings.cores, settings.threads
        dev = torch.device("cuda", self.gpu) if self.gpu is not None else torch.device("cpu")
        self.n = 4096 if self.gpu is not None else 512
        self.a = torch.randn(self.n, self.n, device=dev)
        self.src = torch.ones((256 if self.gpu is not None else 64) * 2**20 // 4, device=dev)
        self.dst = torch.empty_like(self.src)

    def measure(self) -> tuple[float, float]:
        """(FP32 matmul FLOP/s, copy bytes/s), measured now on the settings' cores (or GPU)."""
        with pinned(self.cores, self.threads):
            t_mm = time_call(lambda: torch.mm(self.a, self.a), window=0.2, gpu=self.gpu)[0]
            t_copy = time_call(lambda: self.dst.copy_(self.src), window=0.2, gpu=self.gpu)[0]
        return 2 * self.n**3 / t_mm, 2 * self.src.numel() * 4 / t_copy


def measure_device(settings: ProfileSettings, figures: tuple[float, float] | None = None) -> Device:
    """This device's achieved FP32 matmul FLOP/s and copy bandwidth, measured idle, as a Device (``figures``:
    those a :class:`SpeedProbe` has just measured, instead of measuring again).

    These replace datasheet figures: the roofline and the learned model both use them.
    """
    gpu = settings.gpu
    flops, bandwidth = figures or SpeedProbe(settings).measure()
    if gpu is not None:
        props = torch.cuda.get_device_properties(gpu)
        name, memory = props.name, props.total_memory
    else:
        name, memory = cpu_model(), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Device(id=f"cuda{gpu}" if gpu is not None else "cpu" + "+".join(map(str, settings.cores)),
                  type=settings.device_type if gpu is None else name, memory=memory,
                  peak_flops=flops, mem_bandwidth=bandwidth, cores=list(settings.cores) if gpu is None else None)


Progress = Callable[[int, int, str], None]


def profile(targets: Sequence[Target], out: str | Path, settings: ProfileSettings | None = None,
            device: Device | None = None, progress: Progress | None = None,
            checked: Callable[[SpeedCheck], None] | None = None) -> int:
    """Time every target under every contention level; append rows to ``out``; return the row count.

    ``device`` describes the hardware (measured by :func:`measure_device` when not given). With a
    ``budget``, each level gets an equal share of it and measures targets in order until its share
    is spent, so every level is represented. Every target must run in ``settings.dtype``.

    Unless ``settings.drift_tolerance`` is None, the device's idle speed is measured before the first level
    and after each one (:class:`~pipeplan.costmodel.speed_drift.SpeedWatch`); every check goes to ``checked`` (when
    not given, a check that moved is logged as a warning), and ``settings.stop_on_drift`` raises
    :class:`~pipeplan.costmodel.speed_drift.SpeedDrift` after a level whose speed moved.
    """
    settings = settings or ProfileSettings()
    if not targets:
        raise ValueError("nothing to profile: no target layers")
    other = sorted({t.dtype for t in targets} - {settings.dtype})
    if other:
        raise ValueError(f"targets built in {', '.join(other)} for a {settings.dtype} profile: build them with "
                         f"dtype={settings.dtype!r}")
    check_appendable(out, settings.dtype, events=settings.gpu is not None)
    if settings.gpu is not None and settings.warm_seconds > 0:
        warm_gpu(settings.gpu, settings.warm_seconds)
    watch = (SpeedWatch(SpeedProbe(settings).measure, settings.drift_tolerance, settings.stop_on_drift, checked,
                        str(out)) if settings.drift_tolerance is not None else None)
    device = device or measure_device(settings, watch.start if watch else None)
    fixed = {**device_features(device), "device_name": cpu_model() if settings.gpu is None else device.type,
             "threads": settings.threads, "cores": "+".join(map(str, settings.cores)),
             "torch_version": torch.__version__, "dtype": settings.dtype}
    total, done, written = len(targets) * len(settings.levels), 0, 0
    share = settings.budget / len(settings.levels) if settings.budget else None
    write_rows(out, [], append=True)  # the header, once
    for level in settings.levels:
        started = time.monotonic()
        window = settings.window if level.idle else settings.loaded_window
        with CoRunners(level, cores=None if settings.gpu is not None else settings.cores, gpu=settings.gpu), \
                pinned(settings.cores, settings.threads):
            for target in targets:
                if share is not None and time.monotonic() - started > share:
                    log.info("level %s: budget share spent after %d layers", level.describe(), done)
                    break
                try:
                    timing = measure_call(target.run, window, settings.repeats, settings.warmup, settings.gpu)
                except (RuntimeError, ValueError) as exc:  # an unsupported shape on this device
                    log.warning("skipping %s: %s", target.config, exc)
                    continue
                row = {**layer_features(target.layer), **fixed, **contention_features(level),
                       "config": target.config, "source": target.source, **timing_columns(timing, settings.repeats),
                       "loadavg": os.getloadavg()[0], "measured_at": datetime.now(UTC).isoformat(timespec="seconds")}
                written += write_rows(out, [row], append=True)
                done += 1
                if progress:
                    progress(done, total, f"{level.describe()}: {target.config}")
        if watch:  # idle again: the level's co-runners are stopped
            watch.after(level.describe())
    return written
