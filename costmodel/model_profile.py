"""A model profile: every layer of one model timed inside real forward passes, on one device.

``pipeplan profile MODEL`` (:mod:`pipeplan.executor.profile_model`) writes one of these tables per model and
device; :class:`pipeplan.costmodel.profiled.ProfiledCostModel` reads it. It is the first source of costs the
design trusts: a measured time of *this* layer in *this* model on *this* device, with the caches
and the glue operators a real pass has, which no per-layer sweep sees.

The file is JSON (``FORMAT``, ``VERSION``): what was profiled (model, source, granularity, batch,
dtype, the graph's layer names, kinds and FLOPs, and a digest of them), where (device type and CPU
model, cores, threads, torch version) and, per contention level, each layer's seconds. The table
lives in ``costmodel`` because reading it needs nothing but the graph's layers; taking it needs
the executor (it cuts the exported program into layers), which is why the profiler lives there.

>>> table = ModelProfile("m", granularity="leaf", batch_size=2, dtype="fp32", device_type="cpu-core",
...                      device_name="cpu", layers=[ProfiledLayer("fc", "linear", 64)],
...                      levels=[LevelTimes(Contention(), [1e-3], forward_s=1e-3)])
>>> ModelProfile.from_dict(table.to_dict()).levels[0].layer_s
[0.001]
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention
from pipeplan.errors import UserError

__all__ = ["FORMAT", "VERSION", "LevelTimes", "ModelProfile", "ProfileTableError", "ProfiledLayer", "default_path",
           "layers_digest"]

FORMAT = "pipeplan-model-profile"
VERSION = 1


class ProfileTableError(UserError, ValueError):
    """A model profile file that is missing, unreadable or inconsistent."""


@dataclass(frozen=True)
class ProfiledLayer:
    """A layer of the profiled graph: what a planner's layer must match to use its times."""

    name: str
    kind: str
    flops: int  # with the name, tells this layer from a namesake of another model or batch size


@dataclass
class LevelTimes:
    """Every layer's seconds under one contention level, in the table's layer order."""

    load: Contention
    layer_s: list[float]  # the time charged to each layer: raw minus the per-call overhead
    forward_s: float  # the eager whole forward under the same load, for the sum check
    graph_s: float | None = None  # the exported graph uncut (what a one-stage pipeline runs), same load
    raw_s: list[float] = field(default_factory=list)  # each layer's module call as timed
    overhead_s: list[float] = field(default_factory=list)  # an empty call with the same inputs/outputs
    statistic: str = "median"  # over passes: median idle, mean under load (waits for the CPU count)
    passes: int = 0
    loadavg: float | None = None  # the machine's 1-minute load average when the level started

    @property
    def sum_s(self) -> float:
        return sum(self.layer_s)


@dataclass
class ModelProfile:
    """One model's per-layer table on one device (see the module docstring)."""

    model: str
    granularity: str
    batch_size: int
    dtype: str
    device_type: str  # what cluster specs call the device ("cpu-core")
    device_name: str  # the CPU model (pipeplan.costmodel.hardware.cpu_model) or GPU name
    layers: list[ProfiledLayer]
    levels: list[LevelTimes]
    cores: list[int] = field(default_factory=lambda: [0])
    threads: int = 1
    source: dict[str, Any] = field(default_factory=dict)  # how to rebuild the model (pipeplan.costmodel.source)
    torch_version: str = ""
    measured_at: str = ""

    def __post_init__(self) -> None:
        names = [la.name for la in self.layers]
        if len(set(names)) != len(names):
            raise ProfileTableError(f"model profile of {self.model!r} names a layer twice")
        for level in self.levels:
            if len(level.layer_s) != len(self.layers):
                raise ProfileTableError(
                    f"model profile of {self.model!r}: level {level.load.describe()!r} has {len(level.layer_s)} "
                    f"times for {len(self.layers)} layers; profile the model again")
            bad = [n for n, t in zip(names, level.layer_s, strict=True) if not t >= 0.0]
            if bad:
                raise ProfileTableError(f"model profile of {self.model!r}: level {level.load.describe()!r} has "
                                        f"negative or missing times for {', '.join(bad[:3])}")
        if self.idle is None:
            raise ProfileTableError(f"model profile of {self.model!r} has no idle level: a slowdown is relative to "
                                    "the idle time; profile it with --levels idle,...")

    @property
    def idle(self) -> LevelTimes | None:
        return self.level(Contention())

    @property
    def digest(self) -> str:
        return layers_digest(self.layers)

    def level(self, load: Contention) -> LevelTimes | None:
        """The level measured under exactly ``load``, if any."""
        return next((lv for lv in self.levels if lv.load == load), None)

    def index(self) -> dict[tuple[str, int], int]:
        """(layer name, FLOPs) → position in the table."""
        return {(la.name, la.flops): i for i, la in enumerate(self.layers)}

    # -- files --------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "model": self.model, "source": self.source,
            "granularity": self.granularity, "batch_size": self.batch_size, "dtype": self.dtype,
            "device": {"type": self.device_type, "name": self.device_name, "cores": self.cores,
                       "threads": self.threads},
            "torch_version": self.torch_version, "measured_at": self.measured_at, "graph_digest": self.digest,
            "layers": [{"name": la.name, "kind": la.kind, "flops": la.flops} for la in self.layers],
            "levels": [{"load": lv.load.model_dump(exclude_defaults=True), "describe": lv.load.describe(),
                        "statistic": lv.statistic, "passes": lv.passes, "loadavg": lv.loadavg,
                        "forward_s": lv.forward_s, "graph_s": lv.graph_s, "layer_s": lv.layer_s, "raw_s": lv.raw_s,
                        "overhead_s": lv.overhead_s} for lv in self.levels],
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "model profile") -> ModelProfile:
        """Read :meth:`to_dict`'s form; raises :class:`ProfileTableError` naming the missing or bad field."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ProfileTableError(f"{where} is not a model profile (no \"format\": {FORMAT!r}); write one with "
                                    "`pipeplan profile MODEL`")
        if data.get("version") != VERSION:
            raise ProfileTableError(f"{where}: version {data.get('version')!r}, this pipeplan reads version "
                                    f"{VERSION}; profile the model again")
        try:
            device = data["device"]
            layers = [ProfiledLayer(str(la["name"]), str(la["kind"]), int(la["flops"])) for la in data["layers"]]
            levels = [LevelTimes(Contention.model_validate(lv["load"]), [float(t) for t in lv["layer_s"]],
                                 forward_s=float(lv["forward_s"]), graph_s=_float(lv.get("graph_s")),
                                 raw_s=[float(t) for t in lv.get("raw_s", [])],
                                 overhead_s=[float(t) for t in lv.get("overhead_s", [])],
                                 statistic=str(lv.get("statistic", "median")), passes=int(lv.get("passes", 0)),
                                 loadavg=lv.get("loadavg")) for lv in data["levels"]]
            table = cls(model=str(data["model"]), granularity=str(data["granularity"]),
                        batch_size=int(data["batch_size"]), dtype=str(data["dtype"]),
                        device_type=str(device["type"]), device_name=str(device["name"]),
                        cores=[int(c) for c in device.get("cores") or []], threads=int(device.get("threads", 1)),
                        layers=layers, levels=levels, source=dict(data.get("source") or {}),
                        torch_version=str(data.get("torch_version", "")), measured_at=str(data.get("measured_at", "")))
        except KeyError as exc:
            raise ProfileTableError(f"{where}: missing field {exc.args[0]!r}; profile the model again") from None
        except (TypeError, ValueError, ValidationError) as exc:
            if isinstance(exc, ProfileTableError):
                raise ProfileTableError(f"{where}: {exc}") from None
            raise ProfileTableError(f"{where}: malformed field ({type(exc).__name__}: {exc}); profile the model "
                                    "again") from None
        recorded = data.get("graph_digest")
        if recorded is not None and recorded != table.digest:
            raise ProfileTableError(f"{where}: its layers do not match its graph_digest (edited by hand?); "
                                    "profile the model again")
        return table

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> ModelProfile:
        path = Path(path)
        if not path.is_file():
            raise ProfileTableError(f"model profile {str(path)!r}: no such file; write it with "
                                    "`pipeplan profile MODEL --out FILE`")
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ProfileTableError(f"model profile {str(path)!r} is not readable JSON ({exc}); profile the "
                                    "model again") from None
        return cls.from_dict(data, where=f"model profile {str(path)!r}")


def layers_digest(layers: Sequence[ProfiledLayer | Layer]) -> str:
    """``sha256:…`` of the layers' names, kinds and FLOPs: the same graph gives the same digest."""
    text = "\n".join(f"{la.name}\t{la.kind}\t{la.flops}" for la in layers)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "x"


def default_path(model: str, device_name: str, directory: str | Path = "profiles") -> Path:
    """Where ``pipeplan profile MODEL`` writes by default: ``profiles/<model>-<device>.json``.

    >>> default_path("gpt2", "Intel(R) Xeon(R) Processor").as_posix()
    'profiles/gpt2-intel-r-xeon-r-processor.json'
    """
    return Path(directory) / f"{_slug(model)}-{_slug(device_name)}.json"
