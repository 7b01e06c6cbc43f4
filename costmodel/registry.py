"""Find a cost model by name: what the CLI's ``--costmodel`` and the service's ``costmodel`` field take.

- ``"analytic"``: the roofline model (no data needed);
- ``"learned"``: the contention-aware model shipped for this machine's CPU. pipeplan ships one
  profile and model per CPU the project's 2-core VMs have had (``costmodel/data/``; how each was
  made is in ``costmodel/data/README.md``); a CPU with none of its own gets the first, which warns;
- ``"learned-NAME"``: the shipped model of one CPU, whatever this machine is (``learned-xeon``);
- ``"analytic-gpu"``: the host/device queue model of eager PyTorch on a GPU with time-sliced sharing,
  fitted on an H100 (:mod:`pipeplan.costmodel.gpu`);
- ``"gpu"``: the best GPU model shipped: ``learned-h100`` once a GPU profile and its model exist
  (``GPU_LEARNED``), ``analytic-gpu`` until then;
- ``"probed"`` / ``"probed:BASE"``: a shipped model scaled per layer kind to this CPU by a probe of
  it (``pipeplan costmodel probe``, :mod:`pipeplan.costmodel.probe`); ``learned`` uses it on a CPU
  with no model of its own once the probe exists;
- ``"table:FILE"``: seconds per layer and device type (or id) from any profiler, CSV or JSON
  (:mod:`pipeplan.costmodel.table`);
- anything else: the path of a model file written by ``pipeplan costmodel train``.

A model loaded from a file carries ``spec`` and ``digest`` (:mod:`pipeplan.costmodel.provenance`), which a
plan records, so that a run re-predicts with that very model.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pipeplan.costmodel.base import CostModel

__all__ = ["GPU_LEARNED", "GPU_NAMES", "SHIPPED",
           "SHIPPED_DATASET", "SHIPPED_MODEL", "SHIPPED_NAMES", "Shipped", "file_version",
           "load_cost_model", "resolve_model_path", "shipped_for"]

_DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Shipped:
    """A profile shipped with pipeplan and the model trained on it."""

    name: str  # what ``learned-NAME`` selects
    cpu: str  # the profiled machine's CPU, as its rows' device_name records it
    dataset: Path
    model: Path

    @property
    def in_model(self) -> Path:
        """The in-model rows its model's correction was fitted on (``inmodel-cpu-NAME.csv`` beside the profile)."""
        return self.dataset.with_name(self.dataset.name.replace("profile-", "inmodel-", 1))


SHIPPED = (
    Shipped("xeon", "Intel(R) Xeon(R) Processor", _DATA / "profile-cpu-xeon.csv", _DATA / "learned-cpu-xeon.zip"),
    Shipped("epyc", "AMD EPYC (cpu family 26, model 2, stepping 1)", _DATA / "profile-cpu-epyc.csv",
            _DATA / "learned-cpu-epyc.zip"),
    Shipped("epyc-zen4", "AMD EPYC (cpu family 25, model 17, stepping 1)", _DATA / "profile-cpu-epyc-zen4.csv",
            _DATA / "learned-cpu-epyc-zen4.zip"),
    Shipped("epyc-zen3", "AMD EPYC (cpu family 25, model 1, stepping 1)", _DATA / "profile-cpu-epyc-zen3.csv",
            _DATA / "learned-cpu-epyc-zen3.zip"),
    Shipped("xeon-207", "Intel(R) Xeon(R) Processor (cpu family 6, model 207, stepping 2)",
            _DATA / "profile-cpu-xeon-207.csv", _DATA / "learned-cpu-xeon-207.zip"),
)
# ``learned-NAME`` → the shipped model it names
SHIPPED_NAMES = {f"learned-{s.name}": s for s in SHIPPED}
# The fallback for a CPU pipeplan has no profile of (and what the tests train on).
SHIPPED_MODEL = SHIPPED[0].model
SHIPPED_DATASET = SHIPPED[0].dataset

# The learned GPU model ``gpu`` prefers. No GPU profile has been taken with the wall-clock profiler
# yet (issue 15, item 5), so this file does not exist and ``gpu`` is ``analytic-gpu``.
GPU_LEARNED = _DATA / "gpu" / "learned-h100.zip"
GPU_NAMES = ("gpu", "analytic-gpu", "learned-h100")


def shipped_for(cpu: str | None = None) -> Shipped:
    """The shipped profile of ``cpu`` (a ``device_name``; default: this machine's CPU), or the
    fallback when there is none: the first, whose model carries the in-model correction.  (On a Zen 4
    EPYC before it had a model of its own, the Zen 5 EPYC's model was closer per layer, 22% against
    the Xeon's 37%, but further on whole models, 49% against 32%, having no correction.)"""
    from pipeplan.costmodel.hardware import same_cpu

    return next((s for s in SHIPPED if (s.cpu == cpu if cpu is not None else same_cpu(s.cpu))), SHIPPED[0])


def _probed_here() -> bool:
    """Whether this machine's CPU has no shipped model but has been probed."""
    from pipeplan.costmodel.hardware import same_cpu
    from pipeplan.costmodel.probe import default_path

    return not any(same_cpu(s.cpu) for s in SHIPPED) and default_path().is_file()


def resolve_model_path(spec: str) -> Path:
    """The file a learned-model spec names (``"learned"``: the shipped one for this CPU)."""
    shipped = shipped_for() if spec == "learned" else SHIPPED_NAMES.get(spec)
    path = shipped.model if shipped is not None else Path(spec)
    if not path.is_file():
        raise ValueError(f"cost model {spec!r}: no such model file (use 'analytic', 'learned', 'gpu', "
                         "'analytic-gpu', "
                         f"{', '.join(repr(n) for n in SHIPPED_NAMES)} or the path of a file written by "
                         "`pipeplan costmodel train`)")
    return path


def file_version(path: Path) -> tuple[int, int, int, int]:
    """What changes whenever a file's content may have: modification and change times (ns), size and
    inode. The change time cannot be set back by copying tools (``cp -p``, ``rsync -t``)."""
    st = path.stat()
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino


@lru_cache(maxsize=8)
def _load_learned(path: str, version: tuple[int, int, int, int]) -> CostModel:
    from pipeplan.costmodel.learned import LearnedCostModel

    del version  # part of the cache key only: a retrained file is read again
    return LearnedCostModel.load(path)


def _load_gpu(name: str) -> CostModel:
    """``gpu``, ``analytic-gpu`` or ``learned-h100`` (see the module docstring)."""
    from pipeplan.costmodel.gpu import GpuCostModel

    if name == "analytic-gpu" or (name == "gpu" and not GPU_LEARNED.is_file()):
        return GpuCostModel()
    if not GPU_LEARNED.is_file():
        raise ValueError(f"cost model {name!r}: no GPU profile has been shipped yet ({GPU_LEARNED} is missing); "
                         "use 'gpu' or 'analytic-gpu', or profile a GPU with `pipeplan profile --gpu 0` and train one")
    return _load_learned(str(GPU_LEARNED.resolve()), file_version(GPU_LEARNED))


def load_cost_model(spec: str = "analytic") -> CostModel:
    """The cost model named by ``spec``; raises ``ValueError`` naming the problem otherwise.

    >>> load_cost_model("analytic").name, load_cost_model("GPU").name
    ('analytic', 'analytic-gpu')
    """
    from pipeplan.costmodel.analytic import RooflineModel

    if spec == "analytic":
        return RooflineModel()
    if spec.startswith("calibrated:"):  # another model scaled by what runs measured (pipeplan.costmodel.calibration)
        from pipeplan.costmodel.calibration import CalibratedCostModel

        return CalibratedCostModel(load_cost_model(spec.removeprefix("calibrated:")))
    if spec == "probed" or spec.startswith("probed:") or (spec == "learned" and _probed_here()):
        from pipeplan.costmodel.probe import ProbedCostModel, load_probe

        probe = load_probe()
        base = spec.removeprefix("probed").removeprefix(":") if spec != "learned" else ""
        return ProbedCostModel(load_cost_model(base or probe.base), probe)
    if spec.startswith("table:"):  # any profiler's seconds per layer and device type (pipeplan.costmodel.table)
        from pipeplan.costmodel.table import load_table

        return load_table(spec)
    if spec.startswith("profile:"):  # a model's measured per-layer table (pipeplan.costmodel.profiled)
        from pipeplan.costmodel.profiled import load_profiled

        return load_profiled(spec)
    if spec.strip().lower() in GPU_NAMES:
        return _load_gpu(spec.strip().lower())
    from pipeplan.costmodel.provenance import stamped

    path = resolve_model_path(spec)
    return stamped(_load_learned(str(path.resolve()), file_version(path)), spec, path)
