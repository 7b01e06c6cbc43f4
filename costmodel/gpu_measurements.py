"""The shared H100 measurements, typed, with the graphs of the models they time and a fixed split.

``costmodel/data/gpu/h100-fp32-corunners.json`` times 15 zoo configurations (``name@batch``) idle
and under six co-runner loads on one H100 (how: ``costmodel/data/gpu/README.md``). The GPU cost
model is fitted on the :data:`CALIBRATION` configurations only; :data:`EVALUATION` holds out whole
models (bert-base, convnext-tiny, tinygpt, inception: a transformer, a CNN unlike ResNet, and two
short launch-bound passes) and is never used to choose a constant.

Leaf graphs of the 15 configurations are shipped in ``zoo-graphs-leaf.json.gz`` (captured with
:func:`pipeplan.costmodel.zoo.capture_model`; capturing the transformers takes seconds each), so that the
fit, the benchmark and the test read the same layers; :func:`capture_graphs` rewrites the file.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.hardware import Contention

__all__ = ["CALIBRATION", "DATA_DIR", "EVALUATION", "GRAPHS_PATH", "LOADS", "MEASUREMENTS_PATH", "Measured",
           "capture_graphs", "graphs", "measurements"]

DATA_DIR = Path(__file__).parent / "data" / "gpu"
MEASUREMENTS_PATH = DATA_DIR / "h100-fp32-corunners.json"
GRAPHS_PATH = DATA_DIR / "zoo-graphs-leaf.json.gz"
LOADS = ("1xcompute", "2xcompute", "1xmemory", "2xmemory", "1xmixed", "50%compute")

EVALUATION = frozenset({"bert-base@8", "bert-base@32", "convnext-tiny@32", "tinygpt@8", "inception@32"})
CALIBRATION = frozenset({"gpt2@1", "gpt2@8", "gpt2@32", "vit-base@8", "vit-base@32", "resnet-50@8",
                         "resnet-50@32", "resnet-50@64", "rescnn@64", "mlp@256"})


@dataclass(frozen=True)
class Measured:
    """One configuration's measurements (seconds, medians)."""

    key: str  # "name@batch"
    model: str
    batch: int
    idle: float  # wall clock of a whole forward, launch to completion
    loaded: dict[str, float]  # load (as written in LOADS) → wall clock under it
    modules: dict[str, float]  # leaf module path → CUDA-event span inside a real pass, idle

    @property
    def split(self) -> str:
        return "evaluation" if self.key in EVALUATION else "calibration"

    def wall(self, load: str) -> float:
        """Wall clock under ``load`` ("idle" or one of :data:`LOADS`)."""
        return self.idle if load == "idle" else self.loaded[load]


def load_contention(load: str) -> Contention:
    """The :class:`Contention` a level of the measurements was taken under."""
    return Contention.parse(load)


@cache
def measurements(path: Path = MEASUREMENTS_PATH) -> tuple[Measured, ...]:
    """Every configuration of the measurement file, in its order."""
    doc = json.loads(path.read_text())
    out = []
    for key, raw in doc["models"].items():
        missing = [lv for lv in LOADS if lv not in raw["levels"]]
        if missing:
            raise ValueError(f"{path}: configuration {key} lacks loads {missing}")
        out.append(Measured(key, raw["name"], int(raw["batch"]), float(raw["idle"][0]),
                            {lv: float(raw["levels"][lv][0]) for lv in LOADS},
                            {k: float(v) for k, v in raw["per_module_s"].items()}))
    unsplit = {m.key for m in out} - CALIBRATION - EVALUATION
    if unsplit:
        raise ValueError(f"configurations {sorted(unsplit)} are in neither the calibration nor the evaluation set")
    return tuple(out)


def capture_graphs(path: Path = GRAPHS_PATH) -> dict[str, ModelGraph]:
    """Capture every measured configuration at leaf granularity and write them to ``path``."""
    from pipeplan.costmodel.zoo import capture_model

    captured = {m.key: capture_model(m.model, batch_size=m.batch, granularity="leaf") for m in measurements()}
    with gzip.open(path, "wt") as f:
        json.dump({key: g.to_dict() for key, g in captured.items()}, f, separators=(",", ":"))
    graphs.cache_clear()
    return captured


@cache
def graphs(path: Path = GRAPHS_PATH) -> dict[str, ModelGraph]:
    """The shipped leaf graphs of the measured configurations, by ``name@batch``."""
    try:
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc}; "
                         "run `python -m pipeplan.costmodel.gpu_fit --capture` to write it") \
            from None
    return {key: ModelGraph.from_dict(raw) for key, raw in doc.items()}
