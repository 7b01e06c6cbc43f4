"""Problem refuses numbers no planner can use, naming what is wrong (the service guards its own
requests too; these are for library and CLI users)."""

from __future__ import annotations

import pytest

from pipeplan.planner.problem import PlanError
from tests.planner_problems import DATA, PARAMS, TIMES, make_chain, make_cluster, make_problem


def test_a_device_too_slow_to_time_is_named() -> None:
    # A peak of 1e-320 FLOP/s (a subnormal) turns every layer's time into inf.
    with pytest.raises(PlanError, match=r"layer 'a' a time of inf s on device 'd1'.*peak_flops"):
        make_problem(cluster=make_cluster(peaks=(1e9, 1e-320, 1e9)))


def test_sizes_past_int64_are_refused_before_solving() -> None:
    with pytest.raises(PlanError, match=r"the model's memory \(\d+ bytes\) is past 1152921504606846976 bytes"):
        make_problem(graph=make_chain(TIMES, DATA, [p * 2**60 for p in PARAMS]))
    with pytest.raises(PlanError, match="the cluster's memory"):
        make_problem(cluster=make_cluster(memory=2**59))


def test_ordinary_numbers_pass() -> None:
    problem = make_problem()
    assert problem.time[0] == [1.0, 1.0, 1.0]
    assert problem.capacity == [10**6] * 3
