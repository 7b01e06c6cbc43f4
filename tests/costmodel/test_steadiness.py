"""The steadiness check: the swing statistic, the verdict and a real measurement on this machine's core."""

from __future__ import annotations

import os

import pytest

from pipeplan.costmodel.steadiness import STEADY, Steadiness, measure_steadiness, swing, warn_if_unsteady


def test_swing_is_the_90th_over_the_10th_percentile() -> None:
    assert swing([2.0] * 10) == 1.0
    assert swing([float(t) for t in range(1, 12)]) == pytest.approx(10.0 / 2.0)  # inclusive deciles of 1..11
    with pytest.raises(ValueError, match="at least 10 samples, got 3"):
        swing([1.0, 2.0, 3.0])


def test_a_few_slow_samples_make_a_core_unsteady() -> None:
    quiet = Steadiness(0, (1e-3,) * 20, (2e-3,) * 20, 2e6, 4e6)
    assert quiet.steady and quiet.compute_swing == 1.0
    assert quiet.describe().startswith("core 0 steady: swing 1.00× compute, 1.00× memory")
    assert "median 2 GFLOP/s, 2.0 GB/s" in quiet.describe()
    # two samples in twenty 5× slower: the host's other tenant took the core for a moment
    busy = Steadiness(1, (1e-3,) * 18 + (5e-3, 5e-3), (2e-3,) * 20, 2e6, 4e6)
    assert busy.compute_swing == pytest.approx(1.4) and busy.compute_swing > STEADY
    assert not busy.steady
    assert f"core 1 UNSTEADY (above {STEADY:g}×): swing 1.40× compute" in busy.describe()


def test_measures_this_core_and_says_so() -> None:
    before = os.sched_getaffinity(0)
    core = min(before)
    said: list[str] = []
    found = warn_if_unsteady(core, said.append, seconds=0.3)
    assert found.core == core and len(found.matmul_s) == len(found.copy_s) >= 20
    assert all(t > 0 for t in found.matmul_s + found.copy_s)
    assert said[0] == found.describe()
    # the warning follows the verdict, whichever this machine gives now
    assert len(said) == (1 if found.steady else 2)
    assert os.sched_getaffinity(0) == before  # the pinning was undone
    assert measure_steadiness(0.1, core).copy_bytes == 2 * 32 * 2**20
