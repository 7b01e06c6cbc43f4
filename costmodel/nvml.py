"""Read the current load of a local GPU from NVML, as a :class:`~pipeplan.costmodel.hardware.Contention`.

NVML (``nvidia-ml-py``, the ``gpu`` extra) reports what ``nvidia-smi`` shows: the share of the last
sample period a kernel was running, memory in use, and the processes holding a context. The
planner wants a device's load in its own terms, so :meth:`GpuLoad.contention` turns the others'
utilisation into ``Contention(utilization=u)``. ``pynvml`` is imported only when a load is read.

>>> try:
...     read_load(0)
... except NvmlError as exc:
...     "nvidia-ml-py" in str(exc) or "no NVIDIA GPU" in str(exc) or "index" in str(exc)
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pipeplan.costmodel.hardware import Contention

__all__ = ["GpuLoad", "NvmlError", "read_load"]

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

    def contention(self) -> Contention:
        """The load others put on the GPU, as a utilisation (idle when nothing runs)."""
        others = [p for p in self.processes if p != os.getpid()]
        if not others or self.utilization <= 0:
            return Contention()
        return Contention(utilization=min(self.utilization, _MAX_UTILIZATION))


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
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = nvml.nvmlDeviceGetName(handle)
        util = nvml.nvmlDeviceGetUtilizationRates(handle)
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        procs = tuple(p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    except nvml.NVMLError as exc:
        raise NvmlError(f"NVML could not read GPU {index}: {exc}") from None
    finally:
        nvml.nvmlShutdown()
    return GpuLoad(index, name.decode() if isinstance(name, bytes) else str(name), util.gpu / 100.0,
                   int(mem.used), int(mem.total), procs, os.getpid() in procs)
