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
from typing import Any, Literal

from costmodel.hardware import Contention
from executor.errors import PlanMismatchError
from executor.schedule import SCHEDULES, ScheduleName
from planner.cluster import Cluster, ClusterError, load_cluster
from planner.plan import Plan

__all__ = ["DeviceKind", "RunOptions", "RunSetup", "StageSetup", "parse_loads", "resolve"]

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


@dataclass(frozen=True)
class RunSetup:
    """Everything a stage process needs, picklable: the plan as JSON, the options, each stage's setup."""

    plan: dict[str, Any]
    options: RunOptions
    stages: tuple[StageSetup, ...]
    device_type: Literal["cpu", "cuda"]
    microbatches: int
    cluster: dict[str, Any]

    @property
    def backend(self) -> str:
        return "nccl" if self.device_type == "cuda" else "gloo"

    @property
    def world_size(self) -> int:
        return len(self.stages)


def parse_loads(items: Sequence[str]) -> dict[str, str]:
    """``["cpu1=1xcompute"]`` → ``{"cpu1": "1xcompute"}``; each level must parse as a Contention."""
    loads: dict[str, str] = {}
    for item in items:
        device, sep, level = item.partition("=")
        if not sep or not device.strip() or not level.strip():
            raise PlanMismatchError(f"--load {item!r}: write DEVICE=LEVEL, e.g. cpu1=1xcompute")
        Contention.parse(level)  # raises ValueError naming the problem
        loads[device.strip()] = level.strip()
    return loads


def _cluster(plan: Plan, options: RunOptions) -> Cluster:
    spec = options.cluster or plan.cluster
    try:
        return load_cluster(spec)
    except ClusterError as exc:
        raise PlanMismatchError(f"cannot load cluster {spec!r} for the plan's devices ({exc}); pass the "
                                "cluster spec file with --cluster") from None


def _device_type(cluster: Cluster, plan: Plan, wanted: DeviceKind) -> Literal["cpu", "cuda"]:
    import torch

    if wanted == "cuda" and not torch.cuda.is_available():
        raise PlanMismatchError("--device cuda: no CUDA device is available here")
    if wanted != "auto":
        return wanted
    cpu_devices = all(cluster.device(s.device).cores for s in plan.stages)
    return "cuda" if torch.cuda.is_available() and not cpu_devices else "cpu"


def resolve(plan: Plan, options: RunOptions) -> RunSetup:
    """Check ``options`` against ``plan`` and its cluster, and set up every stage.

    Raises :class:`PlanMismatchError` for a device the cluster lacks, a core this process may not
    use, or a load on a device no stage runs on.
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
    device_type = _device_type(cluster, plan, options.device)
    usable = os.sched_getaffinity(0)
    stages: list[StageSetup] = []
    for k, device in enumerate(devices):
        cores = tuple(cluster.device(device).cores or ()) if device_type == "cpu" else ()
        bad = [c for c in cores if c not in usable]
        if bad:
            raise PlanMismatchError(f"device {device!r} is cores {list(cores)}, but this process may only use "
                                    f"cores {sorted(usable)}")
        load = options.loads.get(device)
        if load is not None and device_type == "cpu" and not cores:
            raise PlanMismatchError(f"--load {device}={load}: device {device!r} has no 'cores' in cluster "
                                    f"{cluster.name!r}, so there is nowhere to start its co-runners")
        threads = options.threads or len(cores) or max(1, len(usable) // len(devices))
        stages.append(StageSetup(k, device, cores or None, threads, load))
    microbatches = options.microbatches or plan.options.microbatches
    return RunSetup(plan.to_dict(), options, tuple(stages), device_type, microbatches, cluster.to_dict())
