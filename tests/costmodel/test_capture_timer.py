"""Capture's time budget for a custom operator's body leaves an outer timer (pytest-timeout's) running."""

from __future__ import annotations

import signal
import time

import pytest

from pipeplan.costmodel.capture.ops import _budget, _OverBudget


def test_an_outer_timer_survives_the_budget_and_a_slow_body_is_stopped() -> None:
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        with _budget(5.0):
            time.sleep(0.01)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 29.0 < left < 30.0  # still running, less what the block took
        with pytest.raises(_OverBudget), _budget(0.05):
            time.sleep(1.0)
        assert 28.0 < signal.getitimer(signal.ITIMER_REAL)[0] < 30.0 and not fired
        signal.setitimer(signal.ITIMER_REAL, 0.05)  # an outer timer due inside the block still fires
        with pytest.raises(_OverBudget), _budget(5.0):
            time.sleep(1.0)
        time.sleep(0.05)
        assert fired == [1]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
