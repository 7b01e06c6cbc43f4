"""How a plan is run: the user's options, and what each stage process gets from them.

:func:`resolve` turns a plan and :class:`RunOptions` into a :class:`RunSetup`: the backend (gloo on
CPU, NCCL on CUDA), and for each stage its device, the CPU cores it is pinned to (the device's
``cores`` in the cluster spec), its thread count and the co-runner load injected on it.  Every
mistake it can see is refused here, before any process starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pipeplan.costmodel.cluster import Cluster, ClusterError, load_cluster
from pipeplan.costmodel.hardware import Contention
from pipeplan.executor.errors import PlanMismatchError
from pipeplan.executor.schedule import SCHEDULES, ScheduleName
from pipeplan.planner.plan import Plan

if TYPE_CHECKING:
    from pipeplan.executor.lending import LoanSetup

__all__ = ["DeviceKind", "RunOptions", "RunSetup", "StageSetup", "Transport", "choose_transport", "device_values",
           "parse_loads", "resolve"]

DeviceKind = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class RunOptions:
    """What to run and how; defaults suit a quick check of a plan on this machine.

    ``microbatches`` defaults to the plan's; ``loads`` maps a device id of the plan to a load as
    ``Contention.parse`` reads it (``"2xmemory"``); ``timeout`` bounds every collective and
    point-to-point wait, ``run_timeout`` the whole run; ``check_batches`` is how many of the measured
    batches are compared with the unsplit model (0: no check).
    """

    batches: int = 8
    microbatches: int | None = None
    warmup: int = 1
    schedule: ScheduleName = "gpipe"
    in_flight: int | None = None
    loads: Mapping[str, str] = field(default_factory=dict)
    check_batches: int = 2
    device: DeviceKind = "auto"
    threads: int | None = None
    timeout: float = 60.0
    run_timeout: float = 3600.0
    seed: int = 0
    cluster: str | None = None
    costmodel: str | None = None
    # record predicted and measured stage compute for later plans (pipeplan.costmodel.calibration)
    calibrate: bool = True
    # weight bytes a device (or host:NAME) may hold, e.g. {"cpu1": "2MiB"} (pipeplan.executor.lending)
    memory_caps: Mapping[str, str | int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("batches", "warmup", "check_batches"):
            value = getattr(self, name)
            if value < (1 if name == "batches" else 0):
                raise PlanMismatchError(f"{name} must be at least {1 if name == 'batches' else 0}, got {value}")
        for name in ("microbatches", "in_flight", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise PlanMismatchError(f"{name} must be at least 1, got {value}")
        if self.schedule not in SCHEDULES:
            raise PlanMismatchError(f"unknown schedule {self.schedule!r}: choose one of {', '.join(SCHEDULES)}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise PlanMismatchError(f"device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")
        if self.timeout <= 0 or self.run_timeout <= 0:
            raise PlanMismatchError(f"timeouts must be positive, got {self.timeout} and {self.run_timeout}")


@dataclass(frozen=True)
class StageSetup:
    index: int
    device: str  # the plan's device id
    cores: tuple[int, ...] | None  # CPU cores to pin to; None: not pinned
    threads: int
    load: str | None  # co-runner load to start on this stage's cores or GPU
    gpu: int | None = None  # CUDA index on its host; None: the stage computes on CPU cores
    host: str = "local"  # where it runs: the cluster's host under torchrun, "local" for local processes

    @property
    def torch_device(self) -> str:
        return "cpu" if self.gpu is None else f"cuda:{self.gpu}"


Transport = Literal["gloo", "nccl"]


def choose_transport(stages: Sequence[StageSetup]) -> Transport:
    """How stage outputs travel: NCCL only when every stage has a GPU of its own.

    NCCL cannot connect two ranks on one GPU, nor a rank without a GPU; any other pipeline uses
    gloo, and a GPU stage then stages its tensors through host memory (see
    :attr:`RunSetup.staged`).

    >>> gpu = lambda k, g, host="local": StageSetup(k, f"gpu{k}", None, 1, None, g, host)
    >>> choose_transport([gpu(0, 0), gpu(1, 1)]), choose_transport([gpu(0, 0), gpu(1, 0)])
    ('nccl', 'gloo')
    >>> cpu = StageSetup(1, "cpu0", (0,), 1, None)
    >>> choose_transport([gpu(0, 0, "a"), gpu(1, 0, "b")]), choose_transport([gpu(0, 0), cpu])
    ('nccl', 'gloo')
    """
    places = [(s.host, s.gpu) for s in stages]
    if all(gpu is not None for _, gpu in places) and len(set(places)) == len(places):
        return "nccl"
    return "gloo"


@dataclass(frozen=True)
class RunSetup:
    """Everything a stage process needs, picklable: the plan as JSON, the options, each stage's setup."""

    plan: dict[str, Any]
    options: RunOptions
    stages: tuple[StageSetup, ...]
    microbatches: int
    cluster: dict[str, Any]
    notes: tuple[str, ...] = ()  # what the report must say about where the stages really ran
    loans: LoanSetup | None = None  # lenders, borrowed layers and memory caps (pipeplan.executor.lending)

    @property
    def backend(self) -> Transport:
        return choose_transport(self.stages)

    @property
    def device_type(self) -> Literal["cpu", "cuda"]:
        """"cuda" when any stage computes on a GPU."""
        return "cuda" if any(s.gpu is not None for s in self.stages) else "cpu"

    @property
    def staged(self) -> bool:
        """GPU stages send and receive through host memory (gloo carries CPU tensors only)."""
        return self.backend == "gloo" and self.device_type == "cuda"

    @property
    def world_size(self) -> int:
        """The stages' processes, and the lenders' that run no stage."""
        return len(self.stages) + (len(self.loans.extra) if self.loans is not None else 0)


def device_values(items: Sequence[str], flag: str, form: str) -> dict[str, str]:
    """A command line's ``DEVICE=VALUE`` items as a dict; ``flag`` and ``form`` (``"DEVICE=LEVEL, e.g.
    cpu1=1xcompute"``) say what to write in the error."""
    values: dict[str, str] = {}
    for item in items:
        device, sep, value = item.partition("=")
        if not sep or not device.strip() or not value.strip():
            raise PlanMismatchError(f"{flag} {item!r}: write {form}")
        values[device.strip()] = value.strip()
    return values


def parse_loads(items: Sequence[str]) -> dict[str, str]:
    """``["cpu1=1xcompute"]`` → ``{"cpu1": "1xcompute"}``; each level must parse as a Contention."""
    loads = device_values(items, "--load", "DEVICE=LEVEL, e.g. cpu1=1xcompute")
    for level in loads.values():
        Contention.parse(level)  # raises ValueError naming the problem
    return loads


def _cluster(plan: Plan, options: RunOptions) -> Cluster:
    spec = options.cluster or plan.cluster
    try:
        return load_cluster(spec)
    except ClusterError as exc:
        raise PlanMismatchError(f"cannot load cluster {spec!r} for the plan's devices ({exc}); pass the "
                                "cluster spec file with --cluster") from None


def _some(items: Sequence[str]) -> str:
    return ", ".join(items[:4]) + (f" and {len(items) - 4} more" if len(items) > 4 else "")


def _place(cluster: Cluster, plan: Plan, wanted: DeviceKind, gpus: int,
           local: bool) -> tuple[list[int | None], list[str]]:
    """The CUDA index each stage computes on (None: CPU cores), and notes for the report.

    A device with ``cores`` is CPU cores; one with ``gpu`` is that GPU of its host; any other device
    is a GPU, numbered in order of first use on its host.  ``--device cpu`` runs everything on CPU
    cores (noted); ``--device cuda`` puts CPU-core devices on GPUs too.
    """
    devices = [cluster.device(s.device) for s in plan.stages]
    if wanted == "cpu":
        on_gpus = [f"stage {k} on {d.id}" for k, d in enumerate(devices) if not d.cores]
        notes = [f"the plan puts {_some(on_gpus)} on GPU devices; --device cpu ran them on CPU cores, so their "
                 "measured times are not the plan's devices' and the errors compare unlike hardware"] if on_gpus else []
        return [None] * len(devices), notes
    if wanted == "cuda" and gpus == 0:
        raise PlanMismatchError("--device cuda: no CUDA device is available here")
    numbered: dict[tuple[str, str], int] = {}
    placed: list[int | None] = []
    for d in devices:
        if d.cores and wanted != "cuda":
            placed.append(None)
        elif d.gpu is not None:
            placed.append(d.gpu)
        else:
            per_host = [key for key in numbered if key[0] == d.host]
            placed.append(numbered.setdefault((d.host, d.id), len(per_host)))
    needing = [f"stage {k} on {d.id} ({d.type})" for k, (d, g) in enumerate(zip(devices, placed, strict=True))
               if g is not None]
    if needing and gpus == 0:
        raise PlanMismatchError(
            f"the plan puts {_some(needing)} on GPUs, but this machine has no CUDA device: run it where those "
            "GPUs are (or under torchrun there), or pass --device cpu to run it on CPU cores anyway (the report "
            "then says that the measured times are not those of the plan's devices)")
    beyond = [f"stage {k} on {d.id} would use GPU {g}" for k, (d, g) in enumerate(zip(devices, placed, strict=True))
              if g is not None and g >= gpus and (local or d.host == devices[0].host)]
    if beyond and local:
        raise PlanMismatchError(
            f"{_some(beyond)}, but this machine has {gpus} GPU{'s' if gpus != 1 else ''} (0–{gpus - 1}): give the "
            "devices a 'gpu:' index in the cluster spec (several devices may share one GPU)")
    return placed, []


def resolve(plan: Plan, options: RunOptions, *, gpus: int | None = None, local: bool = True) -> RunSetup:
    """Check ``options`` against ``plan`` and its cluster, and set up every stage.

    ``gpus`` is the number of CUDA devices of this machine (default: what torch sees), ``local``
    whether the stages run as local processes (rather than under ``torchrun``, across hosts).
    Raises :class:`PlanMismatchError` for a device the cluster lacks, a core this process may not
    use, a GPU this machine does not have, or a load on a device no stage runs on.
    """
    cluster = _cluster(plan, options)
    devices = [s.device for s in plan.stages]
    for device in devices:
        try:
            cluster.device(device)
        except (KeyError, ClusterError):
            raise PlanMismatchError(f"plan puts a stage on {device!r}, which cluster {cluster.name!r} does "
                                    f"not have ({', '.join(d.id for d in cluster.devices)})") from None
    for device in options.loads:
        if device not in devices:
            raise PlanMismatchError(f"--load names {device!r}, which runs no stage of this plan "
                                    f"(stages run on {', '.join(devices)})")
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    placed, notes = _place(cluster, plan, options.device, gpus, local)
    usable = os.sched_getaffinity(0)
    stages: list[StageSetup] = []
    for k, (device, gpu) in enumerate(zip(devices, placed, strict=True)):
        cores = tuple(cluster.device(device).cores or ()) if gpu is None else ()
        bad = [c for c in cores if c not in usable]
        if bad:
            raise PlanMismatchError(f"device {device!r} is cores {list(cores)}, but this process may only use "
                                    f"cores {sorted(usable)}")
        load = options.loads.get(device)
        if load is not None and gpu is None and not cores:
            raise PlanMismatchError(f"--load {device}={load}: device {device!r} has no 'cores' in cluster "
                                    f"{cluster.name!r}, so there is nowhere to start its co-runners")
        threads = options.threads or len(cores) or max(1, len(usable) // len(devices))
        host = "local" if local else cluster.device(device).host
        stages.append(StageSetup(k, device, cores or None, threads, load, gpu, host))
    microbatches = options.microbatches or plan.options.microbatches
    return RunSetup(plan.to_dict(), options, tuple(stages), microbatches, cluster.to_dict(), tuple(notes))
