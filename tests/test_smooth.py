"""The per-operator Gaussian processes of the learned cost model (costmodel/smooth.py)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern

from costmodel.smooth import MIN_ROWS, fit_operator_gps, gps_from_npz, gps_to_npz


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
    z = (x[rows][:, gp.columns] - gp.mean) / gp.scale
    amplitude, y_mean, y_std = gp.constants
    # The same kernel, fixed, with the white noise the fit found folded into alpha by scikit-learn itself.
    reference = GaussianProcessRegressor(ConstantKernel(amplitude, "fixed") * Matern(gp.length, "fixed", nu=1.5),
                                         alpha=1e-10, optimizer=None)
    reference.fit(z, (y[rows] - y_mean) / y_std)
    reference.alpha_ = gp.alpha  # the fitted dual weights (noise included)
    probe = np.random.default_rng(2).uniform(-1.5, 1.5, (30, 5))
    expected = y_std * reference.predict((probe[:, gp.columns] - gp.mean) / gp.scale) + y_mean
    np.testing.assert_allclose(gp.predict(probe), expected, rtol=1e-9, atol=1e-12)


def test_round_trip_through_npz_and_refusal_of_pickled_arrays(data) -> None:
    x, y, ops = data
    gps = fit_operator_gps(x, y, ops, numeric=4)
    back = gps_from_npz(gps_to_npz(gps))
    assert set(back) == set(gps)
    np.testing.assert_array_equal(back["aten.conv2d"].predict(x), gps["aten.conv2d"].predict(x))
    evil = io.BytesIO()
    np.savez(evil, ops=np.array([object()], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        gps_from_npz(evil.getvalue())
