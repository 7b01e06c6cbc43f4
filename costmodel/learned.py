"""Contention-aware cost models learned from profiles (scikit-learn), saved without pickle.

Three estimators are fitted on the same features (:mod:`pipeplan.costmodel.dataset`), all predicting
log10 of the measured forward time:

- ``main``: the predictor: gradient-boosted trees (``HistGradientBoostingRegressor``) blended, for
  each operator with enough rows, with a Gaussian process over the log sizes (:mod:`pipeplan.costmodel.smooth`),
  which interpolates between profiled shapes where the trees can only step;
- ``linear``: ridge regression on the same log features: the baseline it must beat;
- ``tree``: a depth-limited decision tree, fitted to explain: its feature importances, summed per
  factor (layer type, FLOPs, bytes, intensity, batch, contention level and kind), show what decides
  the time.

:class:`LearnedCostModel` implements :class:`~pipeplan.costmodel.base.CostModel`. For a device type it was
profiled on it predicts the time directly (with the profiled device's measured FLOP/s and bandwidth,
whatever a cluster spec claims). For any other device it keeps what transfers: the roofline time of
the idle device, multiplied by the learned slowdown of that layer under that load.

A model may also carry an :class:`~pipeplan.costmodel.in_model.InModelCorrection`, fitted on layers timed
inside real forward passes of other architectures (``train --in-model``): predictions of a captured
graph's layers (:meth:`LearnedCostModel.layer_times`) are then multiplied by it, because a layer in a
pass is not the layer the sweep timed alone; :meth:`~LearnedCostModel.predict_rows` stays the
sweep's, which is what its held-out evaluation measures.

Files are a zip of ``meta.json`` (format, version, feature names, library versions, training
summary, held-out evaluation), ``estimators.skops``, ``smooth.npz`` (the Gaussian processes as
plain arrays) and, when fitted, ``in_model.skops`` (older files without it load as before).
Loading checks the metadata first and refuses a file whose features differ from this code's; the
estimators are loaded with skops, which never unpickles: only an explicit list of scikit-learn
types may be constructed; the arrays are read with ``allow_pickle=False``.
"""

from __future__ import annotations

import json
import logging
import math
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.base import CostModel
from pipeplan.costmodel.dataset import CATEGORICAL, NUMERIC, contention_features, layer_features
from pipeplan.costmodel.dataset_files import single_dtype
from pipeplan.costmodel.estimators import (
    Fitted,
    encode,
    feature_names,
    fit_estimators,
    held_out_split,
    known_ops,
    numeric_of,
    operators,
    predict_log_time,
    vocabulary_of,
)
from pipeplan.costmodel.evaluation import coverage, evaluate_split, judgement
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import NAME_ONLY_DESIGNS, Contention, Device, cpu_model, same_cpu
from pipeplan.costmodel.in_model import InModelCorrection, family_cross_validation
from pipeplan.costmodel.kernel_range import kernel_range, within_range
from pipeplan.costmodel.smooth import gps_from_npz, gps_to_npz
from pipeplan.costmodel.unseen_ops import UNSEEN_OPS, roofline_floor, unseen
from pipeplan.errors import UserError

__all__ = ["FORMAT", "VERSION", "LearnedCostModel", "ModelFileError", "reference_figures"]

FORMAT = "pipeplan.costmodel"
VERSION = 2  # 2: the main predictor blends in per-operator Gaussian processes (smooth.npz)
# The only types skops may construct beyond its built-in safe set (numpy arrays, dicts, ...).
_TRUSTED = ("sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor", "sklearn.tree._tree.Tree")
_ESTIMATORS = ("main", "linear", "tree")

log = logging.getLogger(__name__)


class ModelFileError(UserError, ValueError):
    """A cost-model file that cannot be used: wrong format, other features, unsafe content."""


def reference_figures(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each device type's peak FLOP/s and bandwidth to predict with: the median over its rows' figures.

    Each profile run measures the device once and stamps its rows with those figures; a profile grown over
    several runs holds several. The last row's (what this took before) moved every prediction of a model with
    the spell of its latest run: 80 layers appended from a slow spell of the Zen 4 made its figures 78 GFLOP/s and
    20 GB/s, where its 14,658 earlier rows' median is 93 and 25.

    >>> reference_figures([{"device_type": "c", "peak_flops": f, "mem_bandwidth": 2 * f} for f in (1.0, 3.0, 2.0)])
    {'c': {'peak_flops': 2.0, 'mem_bandwidth': 4.0}}
    """
    figures: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        figures.setdefault(str(r["device_type"]), []).append((float(r["peak_flops"]), float(r["mem_bandwidth"])))
    return {device: {"peak_flops": float(np.median([f for f, _ in pairs])),
                     "mem_bandwidth": float(np.median([b for _, b in pairs]))} for device, pairs in figures.items()}


def beyond_the_sweep(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The meta that says how a model fitted on sweep ``rows`` prices what they never timed: layers of more
    operators (:func:`~pipeplan.costmodel.kernel_range.kernel_range`) and operators outside their vocabulary
    (:mod:`~pipeplan.costmodel.unseen_ops`). Training and refitting the in-model correction both set it."""
    return {**kernel_range(rows), "unseen_ops": UNSEEN_OPS}


@dataclass
class LearnedCostModel(CostModel):
    """A fitted, contention-aware cost model; build with :meth:`train` or :meth:`load`."""

    fitted: Fitted
    vocabulary: dict[str, list[str]]
    reference_devices: dict[str, dict[str, float]]  # profiled Device.type → its measured figures
    meta: dict[str, Any] = field(default_factory=dict)
    name: str = "learned"
    in_model: InModelCorrection | None = None
    _warned_cpu: bool = field(default=False, init=False, repr=False, compare=False)

    # -- training -----------------------------------------------------------------------------------
    @classmethod
    def train(cls, rows: Sequence[dict[str, Any]], seed: int = 0, evaluate: bool = True,
              progress: Callable[[str], None] | None = None,
              in_model_rows: Sequence[dict[str, Any]] = ()) -> LearnedCostModel:
        """Fit on every row; with ``evaluate``, first measure the error on held-out shapes.

        ``in_model_rows`` (layers timed inside real passes, :mod:`pipeplan.costmodel.tuning_set`) add the
        in-model correction; with ``evaluate`` its whole-model error is first measured with each
        architecture family held out in turn (``meta["in_model"]``).

        ``progress`` hears each phase as it starts (on 2 cores the whole training, evaluation
        included, took 1 min on the 5,572-row Xeon profile and 2.5 min on the 8,092-row EPYC one,
        most of it fitting the Gaussian processes)."""
        say = progress or (lambda _: None)
        if not rows:
            raise ValueError("cannot train a cost model on an empty dataset")
        dtype = single_dtype(rows)  # no dtype feature: a model describes one dtype (meta "dtype"; older files fp32)
        vocabulary = vocabulary_of(rows)
        references = reference_figures(rows)
        meta: dict[str, Any] = {
            "rows": len(rows), "configs": len({r["config"] for r in rows}),
            "levels": sorted({str(r["contention"]) for r in rows}),
            "device_names": sorted({str(r.get("device_name", "")) for r in rows}), "seed": seed, "dtype": dtype,
        }
        test_rows: list[dict[str, Any]] = []
        if evaluate:
            train_idx, test_idx = held_out_split(rows, seed=seed)
            test_rows = [rows[i] for i in test_idx]
            say(f"fitting on the {len(train_idx)} rows of 3/4 of the shapes, to evaluate on the other 1/4")
            held_out = fit_estimators([rows[i] for i in train_idx], vocabulary, seed)
            meta["evaluation"] = evaluate_split(held_out, vocabulary, test_rows)
            too_small = judgement(meta["evaluation"])
            if too_small is not None:
                meta["evaluation"]["cannot_judge"] = too_small
                log.warning("held-out evaluation: %s", too_small)
        meta["coverage"] = coverage(rows, test_rows)
        meta.update(beyond_the_sweep(rows))  # set before the in-model fit, which reads predictions through it
        say(f"fitting on all {len(rows)} rows")
        model = cls(fit_estimators(rows, vocabulary, seed), vocabulary, references, meta)
        model.meta["importances"] = model.importances()
        if in_model_rows:
            model.fit_in_model(in_model_rows, seed=seed, evaluate=evaluate, progress=say)
        return model

    def fit_in_model(self, rows: Sequence[dict[str, Any]], seed: int = 0, evaluate: bool = True,
                     progress: Callable[[str], None] | None = None) -> None:
        """Fit (and with ``evaluate`` first cross-validate) the in-model correction on ``rows``."""
        unknown = sorted({str(r["device_type"]) for r in rows} - self.reference_devices.keys())
        if unknown:
            raise ValueError(f"in-model rows of device types {unknown} that the sweep never profiled "
                             f"({sorted(self.reference_devices)}): profile both on the same device")
        # At prediction time the sweep model sees the reference figures, so it must here too.
        rows = [{**r, **self.reference_devices[str(r["device_type"])]} for r in rows]
        sweep_log = np.log10(self.predict_rows(rows))
        summary: dict[str, Any] = {"rows": len(rows), "models": len({r["source"] for r in rows})}
        if evaluate:
            summary.update(family_cross_validation(rows, sweep_log, seed, progress, self.fitted.numeric))
        if progress:
            progress(f"fitting the in-model correction on all {len(rows)} in-model rows")
        self.in_model = InModelCorrection.fit(rows, sweep_log, seed, self.fitted.numeric)
        self.meta["in_model"] = summary

    def refit_in_model(self, rows: Sequence[dict[str, Any]], in_model_rows: Sequence[dict[str, Any]],
                       evaluate: bool = True, progress: Callable[[str], None] | None = None) -> None:
        """Keep the sweep estimators, fitted on the sweep ``rows``, and fit the in-model correction again on
        ``in_model_rows``: seconds, where the sweep's fit takes minutes. What the sweep ``rows`` say of
        operator counts (:func:`~pipeplan.costmodel.kernel_range.kernel_range`) and the device's figures
        (:func:`reference_figures`) are read again too, and unseen operators are priced at the roofline
        (:mod:`~pipeplan.costmodel.unseen_ops`), so a file from before any of them gains it."""
        configs = len({r["config"] for r in rows})
        if (self.meta.get("rows"), self.meta.get("configs")) != (len(rows), configs):
            raise ModelFileError(f"the sweep was fitted on {self.meta.get('rows')} rows of {self.meta.get('configs')} "
                                 f"configurations, not these {len(rows)} of {configs}: train it on them")
        self.meta.update(beyond_the_sweep(rows))
        self.reference_devices = reference_figures(rows)  # a file from before took its last row's
        self.fit_in_model(in_model_rows, seed=int(self.meta.get("seed", 0)), evaluate=evaluate, progress=progress)

    def importances(self) -> dict[str, float]:
        """The explaining tree's feature importances, summed per factor (one-hot columns together)."""
        names = feature_names(self.vocabulary, self.fitted.numeric)
        out: dict[str, float] = {}
        for name, value in zip(names, self.fitted.estimators["tree"].feature_importances_, strict=True):
            factor = name.split("=", 1)[0]
            out[factor] = out.get(factor, 0.0) + float(value)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    # -- prediction ---------------------------------------------------------------------------------
    def predict_rows(self, rows: Sequence[dict[str, Any]], estimator: str = "main") -> np.ndarray:
        """Predicted seconds for dataset-style rows."""
        if estimator not in self.fitted.estimators:
            raise ValueError(f"no estimator {estimator!r}: choose from {', '.join(self.fitted.estimators)}")
        rows = known_ops(rows, self.vocabulary)
        most, dispatch = self.meta.get("sweep_kernels"), self.meta.get("dispatch_s")
        if most is None or dispatch is None:  # a file from before kernel_range: every count through the trees
            return self._predict(rows, estimator)
        every = rows  # the roofline floor of an unseen operator counts all of its layer's operators
        floor = (unseen(rows, self.vocabulary) if self.meta.get("unseen_ops") == UNSEEN_OPS
                 else np.zeros(len(rows), dtype=bool))
        rows, beyond = within_range(rows, most)
        times = self._predict(rows, estimator)
        if not beyond.any() and not floor.any():
            return times
        # both slow down under load (co-runners or a measured "30% used") as the trees say the rest of their layer does
        loaded = [i for i, r in enumerate(rows) if (beyond[i] or floor[i]) and r["contention_kind"] != "none"]
        slowdown = np.ones(len(rows))
        if loaded:
            idle = self._predict([{**rows[i], **contention_features(Contention())} for i in loaded], estimator)
            slowdown[loaded] = np.maximum(1.0, times[loaded] / idle)
        times = times + beyond * dispatch * slowdown
        times[floor] = roofline_floor([r for r, f in zip(every, floor, strict=True) if f], dispatch) * slowdown[floor]
        return times

    def _predict(self, rows: Sequence[dict[str, Any]], estimator: str) -> np.ndarray:
        x = encode(rows, self.vocabulary, self.fitted.numeric)
        return np.power(10.0, predict_log_time(self.fitted, estimator, x, operators(rows)))

    def _row(self, layer: Layer, device_type: str, figures: dict[str, float], load: Contention) -> dict[str, Any]:
        return {**layer_features(layer), "device_type": device_type, **figures, **contention_features(load)}

    def layer_time(self, layer: Layer, device: Device, load: Contention | None = None) -> float:
        return self.layer_times([layer], device, load)[0]

    def layer_times(self, layers: Sequence[Layer], device: Device, load: Contention | None = None, *,
                    check_cpu: bool = True) -> list[float]:
        """Every layer in one batch: a whole graph costs one call of each estimator, not one per layer.

        A layer with ``parts`` (a block) costs the sum of its leaf layers' predictions: the model was
        fitted on leaf layers, and a block's totals describe none (on the zoo's tinygpt, by blocks,
        the whole model came out at 47% of its leaf-by-leaf prediction).  ``check_cpu=False`` skips
        the warning that this machine's CPU is not the profiled one (a probed model scales for it)."""
        load = load if load is not None else device.load
        if not layers:
            return []
        if any(la.parts for la in layers):
            leaves = iter(self.layer_times([p for la in layers for p in (la.parts or [la])], device, load,
                                           check_cpu=check_cpu))
            return [sum(next(leaves) for _ in (la.parts or [la])) for la in layers]
        if device.type in self.reference_devices:
            if check_cpu:
                self._check_same_cpu(device)
            figures = self.reference_devices[device.type]
            times = self.predict_rows([self._row(la, device.type, figures, load) for la in layers])
            if self.in_model is not None:  # the layers of a graph run inside a pass: correct the sweep
                idle_rows = [self._row(la, device.type, figures, Contention()) for la in layers]
                idle_log = np.log10(times if load.idle else self.predict_rows(idle_rows))
                times = times * np.power(10.0, self.in_model.log_factor(idle_rows, idle_log))
            return times.tolist()
        idle = RooflineModel().layer_times(layers, device, Contention())
        if load.idle:
            return idle
        device_type, figures = next(iter(self.reference_devices.items()))
        loaded = self.predict_rows([self._row(la, device_type, figures, load) for la in layers])
        unloaded = self.predict_rows([self._row(la, device_type, figures, Contention()) for la in layers])
        return [t * max(1.0, float(a / b)) for t, a, b in zip(idle, loaded, unloaded, strict=True)]

    def _check_same_cpu(self, device: Device) -> None:
        """Warn, once per model, when a CPU device of the profiled type is predicted on a machine
        whose CPU is not the one profiled: its times are that CPU's (models made on one of the
        project's CPUs were 32–35% off on the other, measured)."""
        profiled = [n for n in self.meta.get("device_names", []) if n]
        if self._warned_cpu or device.cores is None or not profiled or any(map(same_cpu, profiled)):
            return
        self._warned_cpu = True
        shown = [repr(NAME_ONLY_DESIGNS.get(n, n)) for n in profiled]  # a name alone, with its known design
        log.warning("cost model %r was profiled on %s, but this machine's CPU is %r: its times for %r "
                    "describe that CPU; for this one run `pipeplan profile` and `pipeplan costmodel train`",
                    self.name, " and ".join(shown), cpu_model(), device.type)

    # -- files --------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        import sklearn
        import skops.io as sio

        meta = {"format": FORMAT, "version": VERSION, "features": feature_names(self.vocabulary, self.fitted.numeric),
                "vocabulary": self.vocabulary, "reference_devices": self.reference_devices,
                "sklearn_version": sklearn.__version__, **self.meta}
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("meta.json", json.dumps(meta, indent=1, default=_json_default))
            zf.writestr("estimators.skops", sio.dumps(self.fitted.estimators))
            zf.writestr("smooth.npz", gps_to_npz(self.fitted.smooth))
            if self.in_model is not None:
                zf.writestr("in_model.skops", sio.dumps({"estimator": self.in_model.estimator,
                                                         "vocabulary": self.in_model.vocabulary}))

    @classmethod
    def load(cls, path: str | Path) -> LearnedCostModel:

        try:
            with zipfile.ZipFile(path) as zf:
                meta = json.loads(zf.read("meta.json"))
                if meta.get("format") != FORMAT or meta.get("version") != VERSION:
                    raise ModelFileError(f"{path}: format {meta.get('format')!r} version {meta.get('version')!r}, "
                                         f"expected {FORMAT!r} version {VERSION}: a file of another pipeplan; "
                                         "retrain it with `pipeplan costmodel train PROFILE.csv`")
                blob = zf.read("estimators.skops")
                smooth_blob = zf.read("smooth.npz")
                in_model_blob = zf.read("in_model.skops") if "in_model.skops" in zf.namelist() else None
        except (OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
            raise ModelFileError(f"{path}: not a pipeplan cost-model file ({exc})") from None
        vocabulary = meta.get("vocabulary") or {}
        # a file trained before some numeric features were added predicts with those it has
        numeric = numeric_of(meta.get("features") or [])
        if (set(vocabulary) != set(CATEGORICAL) or numeric is None
                or meta.get("features") != feature_names(vocabulary, numeric)):
            raise ModelFileError(f"{path}: trained on features {meta.get('features')}, but this pipeplan "
                                 f"computes {feature_names(vocabulary) if vocabulary else list(NUMERIC)}: retrain it")
        estimators = _skops_loads(path, "estimators.skops", blob)
        in_model = _load_in_model(path, in_model_blob, numeric) if in_model_blob is not None else None
        if not isinstance(estimators, dict) or set(estimators) != set(_ESTIMATORS):
            raise ModelFileError(f"{path}: expected estimators {list(_ESTIMATORS)}")
        try:
            smooth = gps_from_npz(smooth_blob, len(numeric))
        except ValueError as exc:  # not an npz, a missing or malformed array, or pickled objects
            raise ModelFileError(f"{path}: corrupt smooth.npz ({exc})") from None
        known = {"format", "version", "features", "vocabulary", "reference_devices", "sklearn_version"}
        rest = {k: v for k, v in meta.items() if k not in known}
        rest["sklearn_version"] = meta.get("sklearn_version")
        return cls(Fitted(estimators, smooth, numeric), vocabulary, meta["reference_devices"], rest, in_model=in_model)


def _skops_loads(path: str | Path, member: str, blob: bytes) -> Any:
    """A skops member of a model file, refusing any type beyond skops' safe set and :data:`_TRUSTED`."""
    import skops.io as sio

    try:
        untrusted = set(sio.get_untrusted_types(data=blob))
    except Exception as exc:  # skops raises various types on a corrupt archive
        raise ModelFileError(f"{path}: corrupt {member} ({exc})") from None
    unexpected = untrusted - set(_TRUSTED)
    if unexpected:
        raise ModelFileError(f"{path}: refusing to load types {sorted(unexpected)}")
    return sio.loads(blob, trusted=sorted(untrusted))


def _load_in_model(path: str | Path, blob: bytes, numeric: tuple[str, ...]) -> InModelCorrection:
    """The in-model correction of a model file, fitted on the same ``numeric`` features as its sweep model."""
    state = _skops_loads(path, "in_model.skops", blob)
    if not isinstance(state, dict) or set(state) != {"estimator", "vocabulary"}:
        raise ModelFileError(f"{path}: in_model.skops holds no in-model correction")
    return InModelCorrection(state["estimator"], state["vocabulary"], numeric)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
