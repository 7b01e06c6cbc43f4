"""Per-operator Gaussian-process regression: the smooth half of the learned cost model's main predictor.

Boosted trees are piecewise constant in every feature, so a shape between two profiled ones gets
one of their times. Layer time is smooth in the log sizes, so the main predictor blends the trees
(weight 0.3) with, per operator (``aten.conv2d``, ``aten.linear``, …, each with enough rows), the mean of a
Gaussian process with a Matérn (ν = 3/2) kernel that has one length scale per feature: an
interpolation between profiled shapes that learns which sizes matter for that operator. On the
shipped profiles the blend is clearly better than either alone on held-out shapes
(``benchmarks/costmodel_accuracy.py``).

scikit-learn fits each process (its kernel's hyperparameters by marginal likelihood); what
prediction needs is kept as plain arrays (standardisation, length scales, amplitude, training
inputs and dual weights), saved with ``numpy.savez`` and read back with ``allow_pickle=False``.
"""

from __future__ import annotations

import io
import math
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["MIN_ROWS", "OperatorGP", "fit_operator_gps", "gps_from_npz", "gps_to_npz"]

MIN_ROWS = 30  # fewer rows of an operator than this: the trees alone predict it
MAX_ROWS = 1500  # more: a seeded sample of this many fits it (the fit is cubic in the rows)
_SQRT3 = math.sqrt(3.0)
_CHUNK = 2048  # rows predicted at a time
_FIELDS = ("columns", "mean", "scale", "length", "x", "alpha", "constants")


@dataclass
class OperatorGP:
    """The posterior mean of one operator's Gaussian process, as arrays."""

    columns: np.ndarray  # the feature columns it reads (those that vary within the operator)
    mean: np.ndarray  # standardisation of those columns
    scale: np.ndarray
    length: np.ndarray  # the kernel's length scales, in standardised units
    x: np.ndarray  # training inputs, standardised and divided by the length scales
    alpha: np.ndarray  # dual weights: K⁻¹ (y − ȳ) / σ_y
    constants: np.ndarray  # [amplitude, ȳ, σ_y]

    def predict(self, features: np.ndarray) -> np.ndarray:
        """The mean at each row of ``features``, in chunks: the kernel matrix is rows × training rows."""
        return np.concatenate([self._predict(features[i:i + _CHUNK]) for i in range(0, len(features), _CHUNK)]
                              or [np.zeros(0)])

    def _predict(self, features: np.ndarray) -> np.ndarray:
        z = (features[:, self.columns] - self.mean) / self.scale / self.length
        squared = (z * z).sum(1)[:, None] + (self.x * self.x).sum(1)[None, :] - 2.0 * z @ self.x.T
        r = _SQRT3 * np.sqrt(np.maximum(squared, 0.0))
        amplitude, y_mean, y_std = self.constants
        return y_std * (amplitude * (1.0 + r) * np.exp(-r)) @ self.alpha + y_mean

    def check(self, numeric: int) -> None:
        """Raise ``ValueError`` unless the arrays have the shapes, types and values a fit gives."""
        m, n = len(self.x), len(self.columns)
        if (self.columns.ndim != 1 or not np.issubdtype(self.columns.dtype, np.integer) or n == 0
                or len(set(self.columns.tolist())) != n or self.columns.min() < 0 or self.columns.max() >= numeric):
            raise ValueError(f"columns must be distinct feature indices below {numeric}")
        shapes = {"mean": (n,), "scale": (n,), "length": (n,), "x": (m, n), "alpha": (m,), "constants": (3,)}
        for name, shape in shapes.items():
            value = getattr(self, name)
            if value.shape != shape or not np.issubdtype(value.dtype, np.floating) or not np.isfinite(value).all():
                raise ValueError(f"{name} must be finite floats of shape {shape}, got {value.dtype} {value.shape}")
        if (self.scale <= 0).any() or (self.length <= 0).any():
            raise ValueError("scales and length scales must be positive")


def fit_operator_gps(x: np.ndarray, target: np.ndarray, ops: Sequence[str], numeric: int,
                     seed: int = 0) -> dict[str, OperatorGP]:
    """One process per operator with at least :data:`MIN_ROWS` rows, on the first ``numeric``
    (continuous) feature columns of ``x``."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    ops_array = np.asarray(ops)
    rng = np.random.default_rng(seed)
    out: dict[str, OperatorGP] = {}
    for op in sorted(set(ops_array.tolist())):
        rows = np.flatnonzero(ops_array == op)
        if len(rows) < MIN_ROWS:
            continue
        if len(rows) > MAX_ROWS:
            rows = np.sort(rng.choice(rows, MAX_ROWS, replace=False))
        features = x[rows, :numeric]
        columns = np.flatnonzero(features.std(0) > 1e-9)
        if not len(columns):  # one shape only: nothing to interpolate, the trees predict it
            continue
        mean, scale = features[:, columns].mean(0), features[:, columns].std(0)
        z = (features[:, columns] - mean) / scale
        y_mean, y_std = float(target[rows].mean()), float(target[rows].std()) or 1.0
        kernel = (ConstantKernel(1.0, (1e-3, 1e3)) * Matern(np.ones(len(columns)), (1e-2, 1e3), nu=1.5)
                  + WhiteKernel(1e-3, (1e-6, 1e-1)))
        with warnings.catch_warnings():  # a length scale at its bound: that feature does not matter
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp = GaussianProcessRegressor(kernel, random_state=seed).fit(z, (target[rows] - y_mean) / y_std)
        fitted = gp.kernel_.k1  # amplitude × Matérn (the white noise only sits on the training diagonal)
        length = np.atleast_1d(fitted.k2.length_scale).astype(float)
        out[op] = OperatorGP(columns, mean, scale, length, z / length, gp.alpha_.ravel(),
                             np.array([fitted.k1.constant_value, y_mean, y_std]))
    return out


def gps_to_npz(gps: dict[str, OperatorGP]) -> bytes:
    """The processes as one ``.npz`` (operator names in an array, arrays under ``i/field``)."""
    arrays: dict[str, np.ndarray] = {"ops": np.array(sorted(gps), dtype=str)}
    for i, op in enumerate(sorted(gps)):
        for name in _FIELDS:
            arrays[f"{i}/{name}"] = getattr(gps[op], name)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def gps_from_npz(blob: bytes, numeric: int) -> dict[str, OperatorGP]:
    """What :func:`gps_to_npz` wrote, for ``numeric`` continuous features; never unpickles, and
    raises ``ValueError`` naming what is wrong with anything else."""
    try:
        data = np.load(io.BytesIO(blob), allow_pickle=False)
    except (OSError, EOFError, ValueError) as exc:
        raise ValueError(f"not an npz archive ({exc})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError("not an npz archive")
    with data:
        try:
            ops_array = data["ops"]
            if ops_array.ndim != 1 or ops_array.dtype.kind != "U" or len(set(ops_array.tolist())) != len(ops_array):
                raise ValueError("'ops' must list distinct operator names")
            ops = [str(op) for op in ops_array]
            expected = {"ops", *(f"{i}/{name}" for i in range(len(ops)) for name in _FIELDS)}
            if set(data.files) != expected:
                raise ValueError(f"arrays {sorted(set(data.files) ^ expected)[:4]} are missing or unexpected")
            gps = {op: OperatorGP(*(np.asarray(data[f"{i}/{name}"]) for name in _FIELDS)) for i, op in enumerate(ops)}
        except (KeyError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"unreadable array ({exc})") from None
    for op, gp in gps.items():
        try:
            gp.check(numeric)
        except ValueError as exc:
            raise ValueError(f"operator {op}: {exc}") from None
    return gps
