"""What pipeplan knows about GPU models: datasheet peaks per data type, and recognising a device.

A cluster spec gives one ``peak_flops`` per device, "for the model's dtype". A GPU has several: its
CUDA cores run fp32 without tensor cores, its tensor cores run TF32, bf16 and fp16 several times
faster. :func:`recognise` maps a device type, as torch reports it (``NVIDIA H100 80GB HBM3``) or as
people write it (``H100-80GB``, ``h100 sxm``), to the datasheet figures, so that the GPU cost model
can pick the peak that a layer's dtype really runs at.

>>> recognise("NVIDIA H100 80GB HBM3").name
'H100-SXM'
>>> recognise("NVIDIA H100 80GB HBM3").peak("bf16") / 1e12
989.0
>>> recognise("cpu-core") is None
True
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from pipeplan.costmodel.hardware import Device

__all__ = ["DTYPES", "KNOWN_GPUS", "Dtype", "GpuSpec", "dtype_bytes", "gpu_device", "is_gpu", "recognise"]

Dtype = Literal["fp32", "tf32", "bf16", "fp16"]
DTYPES: tuple[Dtype, ...] = ("fp32", "tf32", "bf16", "fp16")
_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}


class GpuSpec(NamedTuple):
    """Datasheet figures of one GPU model (dense, no sparsity)."""

    name: str  # short name, also what ``gpu_device`` gives as the type when asked for one
    pattern: str  # regular expression (case-insensitive) matched against a device's type
    memory: int  # bytes
    fp32: float  # FLOP/s on CUDA cores (no tensor cores)
    tf32: float  # FLOP/s on tensor cores, fp32 operands rounded to TF32
    bf16: float  # FLOP/s on tensor cores
    fp16: float  # FLOP/s on tensor cores
    mem_bandwidth: float  # bytes/s
    l1_bandwidth: float  # bytes/s the SMs' L1 caches deliver: 128 B per clock per SM at the boost clock

    def peak(self, dtype: str) -> float:
        """FLOP/s of the dtype's arithmetic; ``ValueError`` for a dtype pipeplan does not model."""
        if dtype not in _BYTES:
            raise ValueError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
        value: float = getattr(self, dtype)
        return value


_GiB = 2**30


def _l1(sms: int, boost_hz: float) -> float:
    """L1 load bandwidth: 128 bytes per clock per SM (Volta to Hopper), at the boost clock."""
    return sms * 128 * boost_hz


# NVIDIA datasheets (SM counts and boost clocks from the architecture whitepapers). The H100 SXM5
# is what torch calls "NVIDIA H100 80GB HBM3".
KNOWN_GPUS: tuple[GpuSpec, ...] = (
    GpuSpec("H100-SXM", r"h100.*(hbm3|sxm)|h100-80gb$", 80 * _GiB, 67e12, 494.7e12, 989e12, 989e12, 3.35e12,
            _l1(132, 1.98e9)),
    GpuSpec("H100-PCIe", r"h100.*pcie", 80 * _GiB, 51e12, 378e12, 756e12, 756e12, 2.0e12, _l1(114, 1.755e9)),
    GpuSpec("H200", r"h200", 141 * _GiB, 67e12, 494.7e12, 989e12, 989e12, 4.8e12, _l1(132, 1.98e9)),
    GpuSpec("A100-80GB", r"a100.*80", 80 * _GiB, 19.5e12, 156e12, 312e12, 312e12, 2.039e12, _l1(108, 1.41e9)),
    GpuSpec("A100-40GB", r"a100", 40 * _GiB, 19.5e12, 156e12, 312e12, 312e12, 1.555e12, _l1(108, 1.41e9)),
)


def recognise(device_type: str) -> GpuSpec | None:
    """The known GPU a device type names (first match wins), or None."""
    for spec in KNOWN_GPUS:
        if re.search(spec.pattern, device_type, flags=re.IGNORECASE):
            return spec
    return None


def is_gpu(device: Device) -> bool:
    """Whether a device is a GPU: a known GPU model, or a type naming a GPU maker or CUDA."""
    if device.cores is not None:
        return False
    return recognise(device.type) is not None or bool(
        re.search(r"nvidia|cuda|gpu|tesla|geforce|rtx|radeon|instinct", device.type, flags=re.IGNORECASE))


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a modelled dtype (``tf32`` is stored as fp32)."""
    if dtype not in _BYTES:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return _BYTES[dtype]


def gpu_device(device_type: str, id: str = "gpu0", dtype: str = "fp32", host: str = "host0") -> Device:
    """A :class:`Device` with a known GPU's datasheet figures (``peak_flops`` for ``dtype``).

    >>> gpu_device("NVIDIA H100 80GB HBM3").mem_bandwidth / 1e12
    3.35
    """
    spec = recognise(device_type)
    if spec is None:
        names = ", ".join(s.name for s in KNOWN_GPUS)
        raise ValueError(f"unknown GPU type {device_type!r}: pipeplan knows {names}; "
                         "give its peak_flops and mem_bandwidth in the cluster spec instead")
    return Device(id=id, type=device_type, host=host, memory=spec.memory, peak_flops=spec.peak(dtype),
                  mem_bandwidth=spec.mem_bandwidth)
