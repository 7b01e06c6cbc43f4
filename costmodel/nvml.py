"""Read the current load of a local GPU from NVML, as a :class:`~pipeplan.costmodel.hardware.Contention`.

NVML (``nvidia-ml-py``, the ``gpu`` extra) reports what ``nvidia-smi`` shows: the share of the last
sample period a kernel was running, memory in use, and the processes holding a context. The
planner wants a device's load in its own terms, so :meth:`GpuLoad.contention` turns the others'
utilisation into ``Contention(utilization=u)``. ``pynvml`` is imported only when a load is read.

NVML's utilisation counts every process, this one included; what other work takes is (the rule of
:meth:`GpuLoad.contention`):

- no other process holds a context, or nothing ran: idle;
- this process holds none: the whole utilisation is the others';
- this process holds one and NVML's per-process samples give its own share ``s``
  (``nvmlDeviceGetProcessUtilization``, :func:`own_share`): ``max(0, u − s)``;
- it holds one and NVML has no samples for it: ``u`` split evenly over the processes, the others'
  part ``u · others / processes``.

>>> try:
...     read_load(0)
... except NvmlError as exc:
...     "nvidia-ml-py" in str(exc) or "no NVIDIA GPU" in str(exc) or "index" in str(exc)
True
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipeplan.costmodel.hardware import Contention

__all__ = ["GpuLoad", "NvmlError", "own_share", "read_load"]

_MAX_UTILIZATION = 0.99  # Contention.utilization must stay below 1


class NvmlError(RuntimeError):
    """NVML cannot be used here: the library is not installed, there is no GPU, or a bad index."""


@dataclass(frozen=True)
class GpuLoad:
    """A GPU's load at one moment."""

    index: int
    name: str  # as NVML names the device ("NVIDIA H100 80GB HBM3")
    utilization: float  # share of the last sample period a kernel ran, 0–1 (every process)
    memory_used: int  # bytes
    memory_total: int  # bytes
    processes: tuple[int, ...]  # PIDs holding a compute context
    own: bool  # whether this process is among them (its own work is then part of utilization)
    own_utilization: float | None = None  # this process's share of the same period, from NVML's
    # per-process samples; None when NVML gave none (then the rule splits utilization evenly)
    uuid: str = ""  # NVML's "GPU-…" UUID, to match a CUDA device whatever the index order

    @property
    def others(self) -> list[int]:
        """The PIDs of the other processes holding a context on the GPU."""
        return [p for p in self.processes if p != os.getpid()]

    def contention(self) -> Contention:
        """The load others put on the GPU, as a utilisation (idle when nothing runs), with this
        process's own share taken out (the module's rule)."""
        others = self.others
        if not others or self.utilization <= 0:
            return Contention()
        used = self.utilization
        if self.own and self.own_utilization is not None:
            used = max(0.0, used - self.own_utilization)
        elif self.own:
            used *= len(others) / (len(others) + 1)
        return Contention(utilization=min(used, _MAX_UTILIZATION)) if used > 0 else Contention()


def own_share(samples: Iterable[tuple[int, float]], pid: int) -> float | None:
    """This process's utilisation from NVML's per-process samples ``(pid, SM share 0–1)``: the mean
    of ``pid``'s samples; 0 when other processes have samples and it has none; None when there are none.

    >>> own_share([(7, 0.2), (9, 0.5), (7, 0.6)], 7), own_share([(9, 0.5)], 7), own_share([], 7)
    (0.4, 0.0, None)
    """
    samples = list(samples)
    mine = [share for p, share in samples if p == pid]
    if not samples:
        return None
    return sum(mine) / len(mine) if mine else 0.0


def _pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise NvmlError("reading a GPU's load needs nvidia-ml-py: pip install 'pipeplan[gpu]' "
                        "(or pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlError(f"no NVIDIA GPU can be read here: NVML did not start ({exc}); "
                        "is the NVIDIA driver installed and a GPU visible?") from None
    return pynvml


def read_load(index: int = 0) -> GpuLoad:
    """The current load of GPU ``index`` (NVML's numbering); :class:`NvmlError` says why not."""
    nvml = _pynvml()
    try:
        count = nvml.nvmlDeviceGetCount()
        if not 0 <= index < count:
            raise NvmlError(f"GPU index {index} is out of range: this machine has {count} NVIDIA GPU(s)")
        return _read(nvml, index)
    except nvml.NVMLError as exc:
        raise NvmlError(f"NVML could not read GPU {index}: {exc}") from None
    finally:
        nvml.nvmlShutdown()


def read_loads() -> list[GpuLoad]:
    """The current load of every GPU NVML sees, in its numbering; :class:`NvmlError` says why not."""
    nvml = _pynvml()
    try:
        return [_read(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]
    except nvml.NVMLError as exc:
        raise NvmlError(f"NVML could not read the GPUs' load: {exc}") from None
    finally:
        nvml.nvmlShutdown()


def _read(nvml: Any, index: int) -> GpuLoad:
    """One GPU's readings (NVML started by the caller)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    util = nvml.nvmlDeviceGetUtilizationRates(handle)
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    procs = tuple(p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    try:  # the samples NVML kept (the last few seconds); it raises NotFound when it kept none
        samples = [(s.pid, s.smUtil / 100.0) for s in nvml.nvmlDeviceGetProcessUtilization(handle, 0)]
    except nvml.NVMLError:
        samples = []
    return GpuLoad(index, _text(nvml.nvmlDeviceGetName(handle)), util.gpu / 100.0, int(mem.used), int(mem.total),
                   procs, os.getpid() in procs, own_share(samples, os.getpid()), _text(nvml.nvmlDeviceGetUUID(handle)))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
