"""The per-operator Gaussian processes of the learned cost model (costmodel/smooth.py)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from pipeplan.costmodel.smooth import MIN_ROWS, fit_operator_gps, gps_from_npz, gps_to_npz


def _smooth_surface(x: np.ndarray) -> np.ndarray:
    return 0.8 * np.sin(x[:, 0]) + 0.3 * x[:, 1] ** 2  # column 2 is constant, column 3 is noise-free junk


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, list[str]]:
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.uniform(-2, 2, 120), rng.uniform(-1, 1, 120), np.full(120, 3.0),
                         rng.uniform(0, 1, 120), rng.integers(0, 2, 120)])  # last: a one-hot column
    ops = ["aten.conv2d"] * 100 + ["aten.tanh"] * 20
    return x, _smooth_surface(x), ops


def test_each_operator_with_enough_rows_gets_a_process_that_interpolates(data) -> None:
    x, y, ops = data
    gps = fit_operator_gps(x, y, ops, numeric=4)
    assert set(gps) == {"aten.conv2d"}  # 20 tanh rows < MIN_ROWS
    assert ops.count("aten.tanh") < MIN_ROWS
    gp = gps["aten.conv2d"]
    assert gp.columns.tolist() == [0, 1, 3]  # the constant column is dropped, the one-hot never read
    rng = np.random.default_rng(1)
    new = np.column_stack([rng.uniform(-1.8, 1.8, 50), rng.uniform(-0.9, 0.9, 50), np.full(50, 3.0),
                           rng.uniform(0, 1, 50), np.zeros(50)])
    error = np.abs(gp.predict(new) - _smooth_surface(new))
    assert error.max() < 0.05, error.max()  # a smooth surface from 100 points, between them
    # The feature the surface ignores gets a longer length scale than those it depends on.
    assert gp.length[2] > max(gp.length[0], gp.length[1])


def test_the_array_form_predicts_what_scikit_learn_predicts(data) -> None:
    x, y, ops = data
    gp = fit_operator_gps(x, y, ops, numeric=4)["aten.conv2d"]
    rows = np.array([op == "aten.conv2d" for op in ops])
    # scikit-learn's own fit of the same kernel on the same standardised data (deterministic).
    z = (x[rows][:, gp.columns] - gp.mean) / gp.scale
    y_mean, y_std = y[rows].mean(), y[rows].std()
    kernel = (ConstantKernel(1.0, (1e-3, 1e3)) * Matern(np.ones(3), (1e-2, 1e3), nu=1.5)
              + WhiteKernel(1e-3, (1e-6, 1e-1)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reference = GaussianProcessRegressor(kernel, random_state=0).fit(z, (y[rows] - y_mean) / y_std)
    probe = np.random.default_rng(2).uniform(-1.5, 1.5, (30, 5))
    expected = y_std * reference.predict((probe[:, gp.columns] - gp.mean) / gp.scale) + y_mean
    np.testing.assert_allclose(gp.predict(probe), expected, rtol=1e-8, atol=1e-10)
    assert gp.predict(probe[:0]).shape == (0,)


def test_an_operator_with_a_single_shape_is_left_to_the_trees() -> None:
    x = np.tile([1.0, 2.0, 3.0], (40, 1))
    assert fit_operator_gps(x, np.linspace(0, 1, 40), ["aten.tanh"] * 40, numeric=3) == {}


def test_round_trip_through_npz_and_refusal_of_pickled_arrays(data) -> None:
    x, y, ops = data
    gps = fit_operator_gps(x, y, ops, numeric=4)
    back = gps_from_npz(gps_to_npz(gps), numeric=4)
    assert set(back) == set(gps)
    np.testing.assert_array_equal(back["aten.conv2d"].predict(x), gps["aten.conv2d"].predict(x))
    evil = io.BytesIO()
    np.savez(evil, ops=np.array([object()], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        gps_from_npz(evil.getvalue(), numeric=4)


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_malformed_archives_are_refused_naming_the_problem(data) -> None:
    x, y, ops = data
    good = fit_operator_gps(x, y, ops, numeric=4)["aten.conv2d"]
    fields = {f"0/{name}": getattr(good, name) for name in ("columns", "mean", "scale", "length", "x", "alpha",
                                                            "constants")}
    ok = {"ops": np.array(["aten.conv2d"]), **fields}
    assert set(gps_from_npz(_npz(**ok), numeric=4)) == {"aten.conv2d"}
    npy = io.BytesIO()
    np.save(npy, np.zeros(3))
    cases = [
        ("not an npz", b"garbage"),
        ("not an npz", npy.getvalue()),
        ("missing", _npz(**{k: v for k, v in ok.items() if k != "0/alpha"})),
        ("distinct operator names", _npz(**{**ok, "ops": np.array("aten.conv2d")})),
        ("feature indices below 4", _npz(**{**ok, "0/columns": np.array([0, 1, 9])})),
        ("alpha must be finite floats", _npz(**{**ok, "0/alpha": good.alpha[:-1]})),
        ("must be positive", _npz(**{**ok, "0/length": -good.length})),
    ]
    for expected, blob in cases:
        with pytest.raises(ValueError, match=expected):
            gps_from_npz(blob, numeric=4)
