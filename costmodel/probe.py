"""A CPU no model was profiled on, in seconds instead of 45 minutes: probe it, scale a shipped model.

A learned CPU model describes the CPU it was profiled on; on another CPU its times are off by a
factor that depends on the kind of layer (on a Zen 3 EPYC, the Zen 4's model put matmuls 1.5× and
activations 2.5× too fast).  Profiling a new CPU takes about 45 minutes of one core
(``pipeplan profile``, the tuning set, ``pipeplan costmodel train``).  A **probe** takes seconds:

1. time a few layers of every sweep kind (``linear``, ``conv2d``, ``attention``, ``layernorm``,
   ``gelu``, …, shapes from :func:`pipeplan.costmodel.layerspecs.default_sweep`) alone on one idle core,
   as the profiler times them;
2. for each shipped model, predict the same layers as *it* would have measured them alone (the
   sweep estimator, before its in-model correction), and take per layer kind the geometric mean of
   measured ÷ predicted: that kind's **factor**;
3. keep the base whose shape dependence matches this CPU best: the smallest spread of the log
   ratios around their kind's factor.

:class:`ProbedCostModel` then predicts like its base — in-model correction and contention handling
included, since those are ratios that carry across CPUs better than absolute times — times the
factor of each layer's kind.  A kind the probe has no layer of takes the geometric mean of the
probed layers nearest in arithmetic intensity (FLOPs per byte), the roofline's own axis.

The probe is stored per CPU (``$PIPEPLAN_PROBE_DIR`` or ``probes/`` in the user data directory);
``learned`` uses it on a CPU without a shipped model, ``probed:BASE`` names one explicitly, and
``pipeplan costmodel probe`` makes it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeplan.costmodel.base import CostModel, LayerMemory
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention, Device, cpu_model
from pipeplan.errors import UserError

__all__ = ["FORMAT", "NEAREST", "Probe", "ProbeError", "ProbedCostModel", "default_path", "fit", "load_probe",
           "measure", "run_probe"]

log = logging.getLogger(__name__)

FORMAT = "pipeplan.cpu-probe"
NEAREST = 5  # probed layers whose factors a kind never probed borrows, nearest in intensity


class ProbeError(UserError, ValueError):
    """No probe of this CPU, or a probe file that cannot be read."""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80] or "cpu"


def default_path(cpu: str | None = None) -> Path:
    """Where this machine's (or ``cpu``'s) probe lives: ``$PIPEPLAN_PROBE_DIR`` or the user data directory."""
    env = os.environ.get("PIPEPLAN_PROBE_DIR")
    if env:
        folder = Path(env)
    else:
        from platformdirs import user_data_dir

        folder = Path(user_data_dir("pipeplan")) / "probes"
    return folder / f"{_slug(cpu or cpu_model())}.json"


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


def _isolated(base: CostModel, layers: Sequence[Layer], device: Device) -> list[float]:
    """``base``'s times for ``layers`` each timed alone (a learned model's sweep estimator, before
    its in-model correction; any other model's own times)."""
    from pipeplan.costmodel.learned import LearnedCostModel

    if isinstance(base, LearnedCostModel):
        return base.isolated_times(layers, device)
    return base.layer_times(layers, device, Contention())


def measure(cores: Sequence[int] = (0,), per_kind: int = 4, window: float = 0.02, repeats: int = 3,
            progress: Callable[[str], None] | None = None) -> tuple[list[tuple[str, Layer, float]], Device]:
    """Time ``per_kind`` sweep layers of every kind alone on ``cores`` (one thread), idle."""
    from pipeplan.costmodel.layerspecs import default_sweep
    from pipeplan.costmodel.profile import ProfileSettings, measure_device, pinned, targets_from_specs, time_call

    settings = ProfileSettings(cores=list(cores), threads=1)
    device = measure_device(settings)
    targets = targets_from_specs(default_sweep(per_kind=per_kind, seed=7))
    out = []
    with pinned(list(cores), 1):
        for target in targets:
            if progress:
                progress(target.config)
            out.append((target.config, target.layer, time_call(target.run, window, repeats)[0]))
    return out, device


def fit(measured: Sequence[tuple[str, Layer, float]], device: Device, bases: Sequence[CostModel],
        cores: Sequence[int] = (0,), seconds_taken: float = 0.0) -> Probe:
    """The factors of each base on ``measured`` and the base that fits this CPU best."""
    if not measured:
        raise ProbeError("a probe needs at least one measured layer")
    layers = [layer for _, layer, _ in measured]
    predicted = {b.spec or b.name: _isolated(b, layers, device) for b in bases}
    points = [ProbePoint(config, layer.kind, layer.flops / max(1, layer.bytes_read + layer.bytes_written), seconds,
                         {spec: times[i] for spec, times in predicted.items()})
              for i, (config, layer, seconds) in enumerate(measured)]
    probe = Probe(cpu=cpu_model(), measured_at=datetime.now(UTC).isoformat(timespec="seconds"), cores=list(cores),
                  seconds_taken=seconds_taken, points=points)
    for spec in predicted:
        logs: dict[str, list[float]] = defaultdict(list)
        for p in points:
            if p.seconds > 0 and p.predicted[spec] > 0:
                logs[p.kind].append(math.log10(p.seconds / p.predicted[spec]))
        probe.factors[spec] = {kind: 10 ** (sum(v) / len(v)) for kind, v in sorted(logs.items())}
        residuals = [x - math.log10(probe.factors[spec][kind]) for kind, v in logs.items() for x in v]
        probe.spread[spec] = math.sqrt(sum(r * r for r in residuals) / len(residuals)) if residuals else math.inf
    probe.base = min(probe.spread, key=lambda s: probe.spread[s])
    return probe


def run_probe(bases: Sequence[CostModel], cores: Sequence[int] = (0,), per_kind: int = 4,
              progress: Callable[[str], None] | None = None) -> Probe:
    """Measure this CPU and fit ``bases`` to it (see the module docstring)."""
    started = time.monotonic()
    measured, device = measure(cores, per_kind, progress=progress)
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
        from pipeplan.costmodel.learned import LearnedCostModel

        base = (self.base.layer_times(layers, device, load, check_cpu=False) if isinstance(self.base, LearnedCostModel)
                else self.base.layer_times(layers, device, load))
        return [t * self.factor(la) for t, la in zip(base, layers, strict=True)]

    def stage_overhead(self, device: Device, load: Contention | None = None) -> float:
        return self.base.stage_overhead(device, load)

    def layer_memory(self, layer: Layer) -> LayerMemory:
        return self.base.layer_memory(layer)
