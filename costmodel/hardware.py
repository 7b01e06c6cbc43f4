"""The hardware model every package reads: a device's capacity, how busy it is right now, and the
link between two devices.

These types live in ``costmodel`` (not ``planner``) because a cost model predicts the time of a
layer *on a device under a load* and of a tensor *over a link*; the planner's
:class:`pipeplan.costmodel.cluster.Cluster` is built from them (which devices, which link joins each pair).
"""

from __future__ import annotations

import math
import platform
import re
from functools import cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from pipeplan.costmodel.units import parse_bytes, parse_flops, parse_rate, parse_seconds

__all__ = ["ByteRate", "Bytes", "Contention", "ContentionKind", "Device", "FlopRate", "Link", "Seconds", "cpu_model",
           "cpu_name", "design", "same_cpu"]

# "tenant": another DNN inference process that launches its work back to back (it never waits
# for its own kernels), unlike the synthetic co-runners, which synchronise after every operation.
ContentionKind = Literal["compute", "memory", "mixed", "tenant"]

# A compute-bound co-runner still streams its operands, and a memory-bound one still issues
# instructions: the weight, relative to a full co-runner, it puts on the *other* resource.
_CROSS = 0.1

# Fields that accept "80GiB"-style strings as well as plain numbers in base units.
Bytes = Annotated[int, BeforeValidator(parse_bytes)]
FlopRate = Annotated[float, BeforeValidator(parse_flops)]
ByteRate = Annotated[float, BeforeValidator(parse_rate)]
Seconds = Annotated[float, BeforeValidator(parse_seconds)]


class Contention(BaseModel):
    """Other work sharing a device, described the way the profiler creates it.

    Either by co-runners (``corunners`` processes of a ``kind``: compute-bound dense matmul,
    memory-bound streaming copies, a mix, or ``tenant``: real inference jobs launching back to
    back), each working ``duty`` of the time, or by measured ``utilization`` (the share of the
    device that others use, 0 ≤ u < 1).  ``Contention()`` is an idle device.

    >>> Contention(corunners=1, kind="memory").shares()[1]
    0.5
    >>> Contention(utilization=0.25).shares()
    (0.25, 0.25)
    >>> Contention(corunners=1, kind="compute", duty=0.5).shares()[0]
    0.3333333333333333
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    corunners: int = Field(0, ge=0, le=64, description="number of co-running processes")
    kind: ContentionKind = Field("compute", description="character of the co-runners' work")
    duty: float = Field(1.0, gt=0.0, le=1.0, description="share of the time each co-runner works")
    utilization: float | None = Field(
        None, ge=0.0, lt=1.0, description="measured share of the device used by others"
    )

    @model_validator(mode="after")
    def _one_description(self) -> Contention:
        if self.utilization is not None and self.corunners:
            raise ValueError("give either 'corunners' or 'utilization' for a device's load, not both")
        if self.utilization is not None and self.duty != 1.0:
            raise ValueError("'duty' describes co-runners; a measured 'utilization' already is a share of the time")
        return self

    @classmethod
    def parse(cls, text: str) -> Contention:
        """Read a load as written on a command line.

        ``"idle"`` or ``"0"``; ``"2xmemory"`` (two memory-bound co-runners); ``"1"`` (one
        compute-bound co-runner); ``"3xTenant"`` (three inference processes launching back to
        back); ``"50%compute"`` (one compute co-runner working half of the time; ``"2x50%memory"``
        for two); ``"0.3"``, ``"30%"`` or ``"30% used"`` (utilisation). Whatever :meth:`describe`
        writes reads back as the same load (a utilisation to the whole percent it shows).

        >>> Contention.parse("2xmemory").describe(), Contention.parse("30%").describe()
        ('2×memory', '30% used')
        >>> Contention.parse("3xTenant").kind, Contention.parse("50%compute").describe()
        ('tenant', '50%compute')
        >>> Contention.parse("30% used") == Contention(utilization=0.3)
        True
        """
        t = text.strip().lower().replace("×", "x")
        t = re.sub(r"%\s*used$", "%", t)  # describe()'s form of a utilisation
        if t in ("idle", "0", "none"):
            return cls()
        try:
            duty = re.fullmatch(r"(?:(\d+)x)?([\d.]+)%([a-z]+)", t)
            if duty:
                return cls(corunners=int(duty[1] or 1), kind=duty[3], duty=float(duty[2]) / 100.0)
            if t.endswith("%"):
                return cls(utilization=float(t[:-1]) / 100.0)
            if "x" in t:
                count, kind = t.split("x", 1)
                return cls(corunners=int(count), kind=kind)
            if "." in t:
                return cls(utilization=float(t))
            return cls(corunners=int(t))
        except ValueError as exc:
            raise ValueError(
                f"cannot read load {text!r}: use 'idle', a co-runner count with a kind such as "
                f"'2xmemory', '1xcompute' or '2xtenant', a duty-cycled co-runner such as '50%compute', "
                f"or a utilisation such as '0.3' or '30%' ({exc})"
            ) from None

    @property
    def idle(self) -> bool:
        return self.corunners == 0 and not self.utilization

    def shares(self) -> tuple[float, float]:
        """(compute share, memory-bandwidth share) taken by the other work, each in [0, 1).

        n equal co-runners time-share a resource with the layer, so together they hold
        n / (n + 1) of it; a co-runner of the other kind takes a small cross share. A co-runner
        working ``duty`` of the time counts as ``duty`` of one; a tenant holds both resources.
        """
        if self.utilization is not None:
            return (self.utilization, self.utilization)
        n = self.corunners * self.duty
        if n == 0:
            return (0.0, 0.0)
        full = n / (n + 1)
        cross = (n * _CROSS) / (1 + n * _CROSS)
        if self.kind == "tenant":
            return (full, full)
        if self.kind == "compute":
            return (full, cross)
        if self.kind == "memory":
            return (cross, full)
        half = (n / 2) / (n / 2 + 1)
        return (half, half)

    def describe(self) -> str:
        if self.utilization is not None:
            # whole percents, and never "100%", which parse() refuses (a utilisation is below 1)
            return f"{min(round(self.utilization * 100), 99)}% used"
        if self.corunners == 0:
            return "idle"
        if self.duty != 1.0:
            count = f"{self.corunners}×" if self.corunners > 1 else ""
            return f"{count}{self.duty * 100:g}%{self.kind}"
        return f"{self.corunners}×{self.kind}"


class Device(BaseModel):
    """One accelerator (or CPU core group) that can hold a pipeline stage.

    >>> Device(id="gpu0", type="A100-80GB", memory="80GiB", peak_flops="312TFLOPS",
    ...        mem_bandwidth="2039GB/s").memory
    85899345920
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")
    type: str = Field("generic", max_length=128, description="device model, e.g. A100-80GB")
    host: str = Field("host0", min_length=1, max_length=128, description="machine it sits in")
    memory: Bytes = Field(..., description="memory capacity in bytes")
    peak_flops: FlopRate = Field(..., description="peak FLOP/s for the model's dtype")
    mem_bandwidth: ByteRate = Field(..., description="memory bandwidth in bytes/s")
    load: Contention = Field(default_factory=Contention, description="current contention")
    slowdown: float | None = Field(
        None, gt=0, le=1000,
        description="measured: this device runs this many times slower than its cost model predicts "
                    "(a deployment's drift re-plan sets it; every planner multiplies the device's times by it; "
                    "none: 1)",
    )
    cores: list[int] | None = Field(
        None, description="CPU cores this device is (for CPU devices): the executor pins to them"
    )
    gpu: int | None = Field(
        None, ge=0, le=1023,
        description="which physical GPU of its host this device is (CUDA index); several devices may name one GPU",
    )

    @model_validator(mode="after")
    def _positive(self) -> Device:
        for field in ("memory", "peak_flops", "mem_bandwidth"):
            value = getattr(self, field)
            if not value > 0:
                raise ValueError(f"device {self.id!r}: {field} must be positive, got {value!r}")
        if self.cores and self.gpu is not None:
            raise ValueError(f"device {self.id!r}: give either 'cores' (a CPU device) or 'gpu' (a GPU index), not both")
        return self

    def with_load(self, load: Contention) -> Device:
        """A copy of this device under another load."""
        return self.model_copy(update={"load": load})


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields in ``/proc/cpuinfo`` (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


@cache
def cpu_name() -> str:
    """This machine's CPU model as ``/proc/cpuinfo`` names it ("AMD EPYC")."""
    return _cpuinfo().get("model name") or platform.processor() or "cpu"


@cache
def cpu_model() -> str:
    """The CPU's name with its family, model and stepping, what profiles record as ``device_name``:
    a hypervisor may show one name for several generations (the project's VMs called two AMD CPUs
    "AMD EPYC" whose layer times differed by 30–40%), but not one family and model.

    >>> cpu_model().startswith(cpu_name())
    True
    """
    info = _cpuinfo()
    parts = [f"{key} {info[key]}" for key in ("cpu family", "model", "stepping") if info.get(key)]
    return f"{cpu_name()} ({', '.join(parts)})" if parts else cpu_name()


# Profiles recorded before the family and model were (2026-11-22) give the CPU's name alone.  Where
# the project knows which design took one, that design decides: the shipped Xeon profile was taken
# on a Xeon of family 6, model 167 (164 GFLOP/s, 13.6 GB/s on one core), and a Xeon of model 207
# sharing its name was 14% off where model 167 is 11% (benchmarks/README.md); model 207 has a profile
# of its own since 2026-11-29.
NAME_ONLY_DESIGNS = {"Intel(R) Xeon(R) Processor": "Intel(R) Xeon(R) Processor (cpu family 6, model 167)"}


def same_cpu(profiled: str) -> bool:
    """Whether a profile's ``device_name`` describes this machine's CPU: its :func:`cpu_model` up to
    the stepping (a revision of the same design), or, for profiles recorded before the family and
    model were, its name — unless the design behind that name is known (:data:`NAME_ONLY_DESIGNS`).

    >>> same_cpu(cpu_model()) and not same_cpu("Some Other CPU 9000")
    True
    """
    return design(profiled) == design(cpu_model()) or (profiled not in NAME_ONLY_DESIGNS and profiled == cpu_name())


def design(name: str) -> str:
    """The CPU design a ``device_name`` stands for: a :func:`cpu_model` string without its stepping, or,
    for a name recorded alone, the design known behind it (:data:`NAME_ONLY_DESIGNS`; else the name).

    >>> design("AMD EPYC (cpu family 25, model 17, stepping 1)")
    'AMD EPYC (cpu family 25, model 17)'
    >>> design("Intel(R) Xeon(R) Processor")
    'Intel(R) Xeon(R) Processor (cpu family 6, model 167)'
    """
    return re.sub(r", stepping [^,)]*\)$", ")", NAME_ONLY_DESIGNS.get(name, name))


def cpu_file(env: str, folder: str, cpu: str | None = None) -> Path:
    """A file measured on this machine's (or ``cpu``'s) CPU: in the folder ``$env`` names, else in
    ``folder`` of the user data directory; named after the CPU.

    >>> cpu_file("NO_SUCH_VARIABLE", "probes", "AMD EPYC (cpu family 25, model 17)").name
    'amd-epyc-cpu-family-25-model-17.json'
    """
    import os

    chosen = os.environ.get(env)
    if chosen:
        directory = Path(chosen)
    else:
        from platformdirs import user_data_dir

        directory = Path(user_data_dir("pipeplan")) / folder
    slug = re.sub(r"[^a-z0-9]+", "-", (cpu or cpu_model()).lower()).strip("-")[:80] or "cpu"
    return directory / f"{slug}.json"


class Link(BaseModel):
    """The path between two devices; it is the same in both directions.

    >>> Link(bandwidth="100GB/s", latency="5us").time(1e9)
    0.010005
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    bandwidth: ByteRate = Field(..., description="bytes/s one transfer gets")
    latency: Seconds = Field(0.0, description="seconds before the first byte arrives")

    @model_validator(mode="after")
    def _sane(self) -> Link:
        # Finite bandwidth only: an infinite one would make to_dict() emit non-JSON 'Infinity'.
        if not (self.bandwidth > 0 and math.isfinite(self.bandwidth)):
            raise ValueError(f"bandwidth must be positive, got {self.bandwidth:g} B/s")
        if not (self.latency >= 0 and math.isfinite(self.latency)):
            raise ValueError(f"latency must be non-negative, got {self.latency:g} s")
        return self

    def time(self, nbytes: float) -> float:
        """Seconds to send ``nbytes``: latency + nbytes / bandwidth; nothing to send costs 0."""
        if nbytes < 0:
            raise ValueError(f"cannot send a negative number of bytes ({nbytes})")
        if nbytes == 0:
            return 0.0
        return self.latency + nbytes / self.bandwidth
