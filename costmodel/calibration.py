"""Runs feed back: stage times measured by ``pipeplan run`` calibrate later predictions.

Every run records, per stage, what the cost model predicted for the stage's compute under the
run's load and what was measured.  A device's **calibration factor** for a cost model and a load is
the geometric mean of measured / predicted over its most recent observations (``WINDOW``): a
ratio, so a stage of 1 ms and one of 100 ms weigh alike, and a geometric mean, so that one run
2× slow and one 2× fast cancel.  :class:`CalibratedCostModel` multiplies another model's layer
times by it (``--costmodel calibrated:learned``).

A cost model's error depends on the model it prices (its layers' sizes and kinds), not only on the
device: on the Zen 4 the learned model priced UniVNet 32% low and DAC's encoder 58% high, so a factor
pooled over every model carries one model's error to the next.  So a plan for a model that has runs of
its own takes the factor of those runs; a model never run takes the device's factor over all models.

Keys: the cost model (its content digest, or its spec when it has no file), the device type and,
for CPU cores, the CPU model (a profile of one CPU says nothing of another), and the load as
``Contention.describe`` writes it.  A load never observed on a device takes the device's idle
factor: the base model's own contention handling then carries the slowdown.  The order, first found:
this model's runs under this load, this model's idle runs, every model's runs under this load, every
model's idle runs.

The store is one JSON file: ``$PIPEPLAN_CALIBRATION`` or ``calibration.json`` in the user data
directory.  Writes replace the file atomically, so a crash never leaves half a file.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeplan.costmodel.base import CostModel, LayerMemory
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention, Device, cpu_model

__all__ = ["WINDOW", "CalibratedCostModel", "CalibrationStore", "Observation", "default_path", "device_key",
           "model_key", "record_run"]

log = logging.getLogger(__name__)

WINDOW = 50  # observations per key that count: recent runs describe the device as it is now
_FORMAT = "pipeplan.calibration"


def default_path() -> Path:
    """``$PIPEPLAN_CALIBRATION``, else ``calibration.json`` in the user data directory."""
    env = os.environ.get("PIPEPLAN_CALIBRATION")
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("pipeplan")) / "calibration.json"


def model_key(model: CostModel) -> str:
    """What identifies a cost model across runs: its file's digest, else its spec or name."""
    return model.digest or model.spec or model.name


def device_key(device: Device) -> str:
    """A device's type; for CPU cores, with this machine's CPU model (profiles differ by CPU)."""
    return f"{device.type} on {cpu_model()}" if device.cores else device.type


@dataclass(frozen=True)
class Observation:
    """One stage of one run: predicted and measured compute per microbatch, in seconds."""

    costmodel: str
    device: str
    load: str
    predicted: float
    measured: float
    model: str = ""
    at: float = 0.0  # Unix time of the run

    def __post_init__(self) -> None:
        if not (self.predicted > 0 and self.measured > 0 and math.isfinite(self.predicted)
                and math.isfinite(self.measured)):
            raise ValueError(f"an observation needs positive finite times, got predicted {self.predicted!r} "
                             f"and measured {self.measured!r}")


class CalibrationStore:
    """The observations on file, and the factors they give.

    >>> store = CalibrationStore(Path(tempfile.mkdtemp()) / "c.json")
    >>> store.add([Observation("analytic", "T4", "idle", 1.0, 2.0), Observation("analytic", "T4", "idle", 1.0, 8.0)])
    >>> [store.factor(m, "T4", load) for m, load in [("analytic", "idle"), ("analytic", "1×compute"), ("x", "idle")]]
    [4.0, 4.0, 1.0]
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()

    def observations(self) -> list[Observation]:
        if not self.path.is_file():
            return []
        try:
            doc = json.loads(self.path.read_text())
            if doc.get("format") != _FORMAT:
                raise ValueError(f"format {doc.get('format')!r} is not {_FORMAT!r}")
            return [Observation(**row) for row in doc["observations"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"calibration file {self.path} is malformed ({exc}); remove it to start afresh, "
                             "or point PIPEPLAN_CALIBRATION elsewhere") from None

    def add(self, new: Sequence[Observation]) -> None:
        """Append ``new``; only the last ``WINDOW`` observations per key and model are kept."""
        rows = self.observations() + list(new)
        kept: list[Observation] = []
        seen: dict[tuple[str, str, str, str], int] = {}
        for obs in reversed(rows):
            key = (obs.costmodel, obs.device, obs.load, obs.model)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] <= WINDOW:
                kept.append(obs)
        kept.reverse()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"format": _FORMAT, "version": 1, "observations": [asdict(o) for o in kept]}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".calibration-")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, self.path)

    def factor(self, costmodel: str, device: str, load: str, model: str = "") -> float:
        """Geometric mean of measured / predicted for the key, from ``model``'s own runs when it has any
        (module docstring: the order); 1 for a device never observed with this cost model."""
        return self.chosen(costmodel, device, load, model)[0]

    def chosen(self, costmodel: str, device: str, load: str, model: str = "") -> tuple[float, int]:
        """:meth:`factor`, and how many of ``model``'s own stage times it comes from (0: other models' runs,
        or none at all)."""
        rows = [o for o in self.observations() if (o.costmodel, o.device) == (costmodel, device)]
        for own, wanted in ((True, load), (True, "idle"), (False, load), (False, "idle")):
            if own and not model:
                continue
            ratios = [o.measured / o.predicted for o in rows
                      if o.load == wanted and (not own or o.model == model)][-WINDOW:]
            if ratios:
                return math.exp(sum(math.log(r) for r in ratios) / len(ratios)), len(ratios) if own else 0
        return 1.0, 0


class CalibratedCostModel(CostModel):
    """Another cost model's times, scaled by each device's calibration factor under its load: the factor of
    ``model``'s own runs when it has some (:meth:`for_model`), else of every model's."""

    def __init__(self, base: CostModel, store: CalibrationStore | None = None, model: str = "") -> None:
        self.base = base
        self.store = store or CalibrationStore()
        self.model = model
        self.name = f"calibrated:{base.name}"
        self.spec = f"calibrated:{base.spec or base.name}"
        self.digest = base.digest
        self._chosen: dict[tuple[str, str], tuple[float, int]] = {}

    def factor(self, device: Device, load: Contention | None = None) -> float:
        return self._chosen_for(device, load)[0]

    def own_runs(self, device: Device, load: Contention | None = None) -> int:
        """How many of this model's own stage times :meth:`factor` comes from on ``device`` under ``load``
        (0: the factor is other models', or 1 for want of any run)."""
        return self._chosen_for(device, load)[1]

    def _chosen_for(self, device: Device, load: Contention | None) -> tuple[float, int]:
        load = load if load is not None else device.load
        key = (device_key(device), load.describe())
        if key not in self._chosen:
            self._chosen[key] = self.store.chosen(model_key(self.base), *key, model=self.model)
        return self._chosen[key]

    def for_model(self, model: str) -> CalibratedCostModel:
        return self if model == self.model else CalibratedCostModel(self.base, self.store, model)

    def layer_time(self, layer: Layer, device: Device, load: Contention | None = None) -> float:
        return self.base.layer_time(layer, device, load) * self.factor(device, load)

    def layer_times(self, layers: Sequence[Layer], device: Device, load: Contention | None = None) -> list[float]:
        f = self.factor(device, load)
        return [t * f for t in self.base.layer_times(layers, device, load)]

    def stage_overhead(self, device: Device, load: Contention | None = None) -> float:
        # the factor was measured on whole stages (base.stage_time), overhead included
        return self.base.stage_overhead(device, load) * self.factor(device, load)

    def layer_memory(self, layer: Layer) -> LayerMemory:
        return self.base.layer_memory(layer)


def record_run(base: CostModel, stages: Sequence[tuple[Device, Contention, float, float]], model: str = "",
               store: CalibrationStore | None = None) -> list[Observation]:
    """Record each stage's (device, load, predicted compute by ``base``, measured compute)."""
    now = time.time()
    obs = [Observation(model_key(base), device_key(d), load.describe(), predicted, measured, model, now)
           for d, load, predicted, measured in stages if predicted > 0 and measured > 0]
    if obs:
        (store or CalibrationStore()).add(obs)
    return obs
