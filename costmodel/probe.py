"""A CPU no model was profiled on, in seconds instead of 45 minutes: probe it, scale a shipped model.

A learned CPU model describes the CPU it was profiled on; on another CPU its times are off by a
factor that depends on the kind of layer.  Profiling a new CPU takes about 45 minutes of one core
(``pipeplan profile``, the tuning set, ``pipeplan costmodel train``).  A **probe** takes about a
minute:

1. time every layer of a few small models of the tuning set (a decoder, a vision transformer, a
   ResNet, an EfficientNet: :data:`PROBE_MODELS`) *inside real forward passes* on one idle core,
   as ``pipeplan profile MODEL`` does — where the planner's predictions are used, glue included;
2. for each shipped model, predict the same layers as it predicts a graph's layers, and take per
   layer kind the ratio of the sums, measured ÷ predicted (time-weighted, as whole-model sums
   are): that kind's **factor**;
3. keep the base whose per-layer ratios scatter least around their kind's factor (the RMS of the
   log residuals, each layer weighted by its measured time).

:class:`ProbedCostModel` then predicts like its base — contention handling included, a ratio that
carries across CPUs better than absolute times — times the factor of each layer's kind.  A kind
the probe has no layer of takes the geometric mean of the probed layers nearest in arithmetic
intensity (FLOPs per byte), the roofline's own axis.  The probe models come from the tuning set,
never from the evaluation set the targets are measured on (``benchmarks/model_profile.py``).

The probe is stored per CPU (``$PIPEPLAN_PROBE_DIR`` or ``probes/`` in the user data directory);
``learned`` uses it on a CPU without a shipped model, ``probed:BASE`` names one explicitly, and
``pipeplan costmodel probe`` makes it.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeplan.costmodel.base import CostModel, LayerMemory
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention, Device, cpu_file, cpu_model
from pipeplan.errors import UserError

__all__ = ["FORMAT", "NEAREST", "PROBE_MODELS", "Probe", "ProbeError", "ProbedCostModel", "default_path", "fit",
           "load_probe", "measure", "run_probe"]

log = logging.getLogger(__name__)

FORMAT = "pipeplan.cpu-probe"
NEAREST = 5  # probed layers whose factors a kind never probed borrows, nearest in intensity


class ProbeError(UserError, ValueError):
    """No probe of this CPU, or a probe file that cannot be read."""


def default_path(cpu: str | None = None) -> Path:
    """Where this machine's (or ``cpu``'s) probe lives: ``$PIPEPLAN_PROBE_DIR`` or the user data directory."""
    return cpu_file("PIPEPLAN_PROBE_DIR", "probes", cpu)


@dataclass
class ProbePoint:
    """One probed layer: its kind, intensity, the time measured, and each base's prediction."""

    config: str
    kind: str
    intensity: float  # FLOPs per byte moved
    seconds: float
    predicted: dict[str, float]  # base spec → seconds it predicts alone


@dataclass
class Probe:
    """What a probe measured on one CPU, and the factors it gives each base."""

    cpu: str
    measured_at: str
    cores: list[int]
    seconds_taken: float
    points: list[ProbePoint]
    base: str = ""  # the chosen base's spec
    factors: dict[str, dict[str, float]] = field(default_factory=dict)  # base → kind → factor
    spread: dict[str, float] = field(default_factory=dict)  # base → RMS of log10 residuals

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": 1, **asdict(self)}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Probe:
        if doc.get("format") != FORMAT:
            raise ProbeError(f"not a CPU probe (format {doc.get('format')!r}, expected {FORMAT!r})")
        points = [ProbePoint(**p) for p in doc["points"]]
        fields = {k: doc[k] for k in ("cpu", "measured_at", "cores", "seconds_taken", "base", "factors", "spread")}
        return cls(points=points, **fields)

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1))
        tmp.replace(path)  # atomic: a crash never leaves half a file
        return path


PROBE_MODELS = ("opt", "deit", "resnet", "efficientnet")  # tuning-set factories (pipeplan.costmodel.tuning_models)


def measure(cores: Sequence[int] = (0,), seconds: float = 1.0, models: Sequence[str] = PROBE_MODELS,
            progress: Callable[[str], None] | None = None) -> list[tuple[str, Layer, float]]:
    """Every layer of each of ``models`` timed inside real forward passes on ``cores`` (one thread, idle)."""
    import torch

    from pipeplan.costmodel import tuning_models
    from pipeplan.costmodel.capture import capture_program
    from pipeplan.executor.profile_model import ModelProfileSettings, profile_built

    factories = {n for n, f in vars(tuning_models).items() if inspect.isfunction(f) and not n.startswith("_")}
    unknown = [m for m in models if m not in factories]
    if unknown or not models:
        raise ProbeError(f"probe models {unknown or 'none'}: choose tuning-set factories such as "
                         f"{', '.join(PROBE_MODELS)} (pipeplan.costmodel.tuning_models)")
    out = []
    settings = ModelProfileSettings(cores=list(cores), seconds_per_level=seconds, min_passes=5)
    for name in models:
        if progress:
            progress(name)
        torch.manual_seed(0)
        model, args = getattr(tuning_models, name)()
        model.eval()
        captured = capture_program(model, args, name=name)
        table = profile_built(model, args, name=name, settings=settings, captured=captured)
        by_name = {la.name: la for la in captured.graph.layers}
        out += [(f"{name}/{la.name}", by_name[la.name], t) for la, t in zip(table.layers, table.levels[0].layer_s,
                                                                          strict=True) if t > 0]
    return out


def fit(measured: Sequence[tuple[str, Layer, float]], device: Device, bases: Sequence[CostModel],
        cores: Sequence[int] = (0,), seconds_taken: float = 0.0) -> Probe:
    """The factors of each base on ``measured`` and the base that fits this CPU best."""
    if not measured:
        raise ProbeError("a probe needs at least one measured layer")
    layers = [layer for _, layer, _ in measured]
    predicted = {b.spec or b.name: _quiet_times(b, layers, device) for b in bases}
    points = [ProbePoint(config, layer.kind, layer.flops / max(1, layer.bytes_read + layer.bytes_written), seconds,
                         {spec: times[i] for spec, times in predicted.items()})
              for i, (config, layer, seconds) in enumerate(measured)]
    probe = Probe(cpu=cpu_model(), measured_at=datetime.now(UTC).isoformat(timespec="seconds"), cores=list(cores),
                  seconds_taken=seconds_taken, points=points)
    for spec in predicted:
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for p in points:
            if p.predicted[spec] > 0:
                sums[p.kind][0] += p.seconds
                sums[p.kind][1] += p.predicted[spec]
        probe.factors[spec] = {kind: m / q for kind, (m, q) in sorted(sums.items())}
        weighted = [(p.seconds, math.log10(p.seconds / p.predicted[spec] / probe.factors[spec][p.kind]))
                    for p in points if p.predicted[spec] > 0]
        total = sum(w for w, _ in weighted)
        probe.spread[spec] = math.sqrt(sum(w * r * r for w, r in weighted) / total) if total > 0 else math.inf
    probe.base = min(probe.spread, key=lambda s: probe.spread[s])
    return probe


def _quiet_times(base: CostModel, layers: Sequence[Layer], device: Device,
                 load: Contention | None = None) -> list[float]:
    """``base``'s times for ``layers`` on ``device`` (idle unless ``load``), without the warning that
    this CPU is not the one it was profiled on (the probe is what answers it)."""
    from pipeplan.costmodel.learned import LearnedCostModel

    load = load if load is not None else Contention()
    if isinstance(base, LearnedCostModel):
        return base.layer_times(layers, device, load, check_cpu=False)
    return base.layer_times(layers, device, load)


def run_probe(bases: Sequence[CostModel], cores: Sequence[int] = (0,), seconds: float = 1.0,
              models: Sequence[str] = PROBE_MODELS, progress: Callable[[str], None] | None = None) -> Probe:
    """Measure this CPU and fit ``bases`` to it (see the module docstring)."""
    from pipeplan.costmodel.profile import ProfileSettings, measure_device

    started = time.monotonic()
    device = measure_device(ProfileSettings(cores=list(cores), threads=1))
    measured = measure(cores, seconds, models, progress=progress)
    return fit(measured, device, bases, cores, time.monotonic() - started)


def load_probe(path: Path | None = None) -> Probe:
    path = path or default_path()
    if not path.is_file():
        raise ProbeError(f"this CPU ({cpu_model()!r}) has not been probed ({path} is missing): run "
                         "`pipeplan costmodel probe` (about a minute of one core)")
    try:
        return Probe.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProbeError(f"cannot read the CPU probe {path}: {exc}") from None


class ProbedCostModel(CostModel):
    """``base``'s times on this CPU, each layer's scaled by its kind's probed factor."""

    def __init__(self, base: CostModel, probe: Probe) -> None:
        key = base.spec or base.name
        if key not in probe.factors:
            raise ProbeError(f"the probe of {probe.cpu!r} has no factors for cost model {key!r} "
                             f"(it has {', '.join(sorted(probe.factors))}): run `pipeplan costmodel probe` again")
        self.base, self.probe = base, probe
        self.factors = probe.factors[key]
        self.name = f"probed:{base.name}"
        self.spec = f"probed:{key}"
        self.digest = base.digest
        # (log intensity, log factor) of every probed layer, for kinds the probe has no layer of
        self._points = sorted((math.log10(max(p.intensity, 1e-6)), math.log10(p.seconds / p.predicted[key]))
                              for p in probe.points if p.seconds > 0 and p.predicted.get(key, 0) > 0)
        self._by_kind: dict[str, float] = {}

    def factor(self, layer: Layer) -> float:
        """The factor of ``layer``'s kind; for a kind never probed, the geometric mean over the
        ``NEAREST`` probed layers closest in log intensity (ties to the lower intensity)."""
        if layer.kind in self.factors:
            return self.factors[layer.kind]
        if layer.kind not in self._by_kind:
            x = math.log10(max(layer.flops / max(1, layer.bytes_read + layer.bytes_written), 1e-6))
            nearest = sorted(self._points, key=lambda p: abs(p[0] - x))[:NEAREST]
            self._by_kind[layer.kind] = 10 ** (sum(y for _, y in nearest) / len(nearest)) if nearest else 1.0
        return self._by_kind[layer.kind]

    def layer_time(self, layer: Layer, device: Device, load: Contention | None = None) -> float:
        return self.layer_times([layer], device, load)[0]

    def layer_times(self, layers: Sequence[Layer], device: Device, load: Contention | None = None) -> list[float]:
        if any(la.parts for la in layers):  # a block: each leaf scaled by its own kind's factor
            leaves = [p for la in layers for p in (la.parts or [la])]
            times = iter(self.layer_times(leaves, device, load))
            return [sum(next(times) for _ in (la.parts or [la])) for la in layers]
        base = _quiet_times(self.base, layers, device, load if load is not None else device.load)
        return [t * self.factor(la) for t, la in zip(base, layers, strict=True)]

    def stage_overhead(self, device: Device, load: Contention | None = None) -> float:
        return self.base.stage_overhead(device, load)

    def layer_memory(self, layer: Layer) -> LayerMemory:
        return self.base.layer_memory(layer)
