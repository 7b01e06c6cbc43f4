"""An analytic roofline cost model: usable for any device with no profile at all.

time = max(FLOPs / (peak · (1 − c)), bytes / (bandwidth · (1 − m))) + kernels · overhead

where ``c`` and ``m`` are the compute and memory-bandwidth shares that other work holds on the
device (:meth:`pipeplan.costmodel.hardware.Contention.shares`).  This is the classic roofline (Williams,
Waterman and Patterson, CACM 2009) applied layer by layer, with a fixed per-operator dispatch cost
so that tiny layers are not predicted as free.
"""

from __future__ import annotations

from pipeplan.costmodel.base import CostModel
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention, Device

__all__ = ["DEFAULT_OVERHEAD", "RooflineModel", "compute_bound"]

# Per-operator launch/dispatch overhead: a CUDA kernel launch through PyTorch's eager dispatcher
# costs a few microseconds; on a CPU the dispatcher alone costs about as much.
DEFAULT_OVERHEAD = {"cpu": 3e-6, "gpu": 5e-6}


def compute_bound(flops: float, bytes_moved: float, device: Device) -> bool:
    """Whether work of ``flops`` over ``bytes_moved`` sits under ``device``'s compute roof: its
    arithmetic intensity (FLOPs per byte) reaches the ridge point, peak FLOP/s ÷ bandwidth, where the
    roofline's two roofs meet.  Work that moves no bytes is compute-bound.

    >>> dev = Device(id="d", memory="1GiB", peak_flops=100e12, mem_bandwidth=1e12)  # ridge: 100 FLOP/B
    >>> compute_bound(1e9, 1e6, dev), compute_bound(1e6, 1e6, dev), compute_bound(0, 0, dev)
    (True, False, True)
    """
    if bytes_moved == 0:
        return True
    return flops / bytes_moved >= device.peak_flops / device.mem_bandwidth


class RooflineModel(CostModel):
    """Roofline time of a layer on a device, slowed by the device's contention.

    >>> from pipeplan.costmodel.graph import Layer
    >>> layer = Layer("fc", "linear", "Linear", 0, flops=2_000_000, bytes_read=1000,
    ...               bytes_written=1000, param_bytes=800, activation_bytes=1000, kernels=1)
    >>> dev = Device(id="d", memory="1GiB", peak_flops=1e9, mem_bandwidth=1e9)
    >>> RooflineModel(overhead=0.0).layer_time(layer, dev)
    0.002
    >>> RooflineModel(overhead=0.0).layer_time(layer, dev, Contention(corunners=1, kind="compute"))
    0.004
    """

    name = "analytic"

    def __init__(self, overhead: float | None = None, compute_efficiency: float = 1.0,
                 memory_efficiency: float = 1.0) -> None:
        for label, value in (("compute_efficiency", compute_efficiency),
                             ("memory_efficiency", memory_efficiency)):
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{label} must be in (0, 1], got {value}")
        if overhead is not None and overhead < 0:
            raise ValueError(f"overhead must be non-negative seconds, got {overhead}")
        self.overhead = overhead
        self.compute_efficiency = compute_efficiency
        self.memory_efficiency = memory_efficiency

    def _overhead(self, device: Device) -> float:
        if self.overhead is not None:
            return self.overhead
        is_cpu = device.cores is not None or "cpu" in device.type.lower()
        return DEFAULT_OVERHEAD["cpu" if is_cpu else "gpu"]

    def layer_time(self, layer: Layer, device: Device, load: Contention | None = None) -> float:
        compute_taken, memory_taken = (load if load is not None else device.load).shares()
        flop_rate = device.peak_flops * self.compute_efficiency * (1.0 - compute_taken)
        byte_rate = device.mem_bandwidth * self.memory_efficiency * (1.0 - memory_taken)
        compute = layer.flops / flop_rate
        memory = (layer.bytes_read + layer.bytes_written) / byte_rate
        return max(compute, memory) + layer.kernels * self._overhead(device)
