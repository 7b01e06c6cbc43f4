"""The profiler notices when the device's own speed moves between its contention levels (a real co-tenant
appears mid-profile), names the levels whose rows hold it, and stops when asked to."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from pipeplan.costmodel.corunners import CoRunners
from pipeplan.costmodel.dataset_files import read_dataset
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.layerspecs import parse_spec
from pipeplan.costmodel.profile import ProfileSettings, profile, targets_from_specs
from pipeplan.costmodel.speed_drift import SpeedCheck, SpeedDrift, drift_verdict, drifted_levels

LEVELS = [Contention(), Contention(corunners=1, kind="memory")]
SHAPES = ["linear:m=16,k=64,n=64", "layernorm:m=64,c=256"]


@pytest.fixture
def tenant() -> Iterator[ExitStack]:
    """Holds the host's other tenant until the test ends: ``_profile`` starts it (two compute-bound processes
    pinned to core 0) once the first level is timed."""
    with ExitStack() as stack:
        yield stack


def _profile(out: Path, tenant: ExitStack, stop: bool, checks: list[SpeedCheck]) -> int:
    targets = targets_from_specs([parse_spec(s) for s in SHAPES])

    def arrive_after_first_level(done: int, total: int, what: str) -> None:
        if done == len(targets):  # the first level's last layer is timed: the tenant arrives before its check
            tenant.enter_context(CoRunners(Contention(corunners=2, kind="compute"), cores=[0]))

    settings = ProfileSettings(levels=LEVELS, cores=(0,), repeats=2, window=0.003, loaded_window=0.006, warmup=1,
                               stop_on_drift=stop)
    return profile(targets, out, settings, progress=arrive_after_first_level, checked=checks.append)


def test_a_tenant_arriving_mid_profile_names_the_level_timed_at_another_speed(tmp_path: Path,
                                                                                 tenant: ExitStack) -> None:
    checks: list[SpeedCheck] = []
    assert _profile(tmp_path / "data.csv", tenant, stop=False, checks=checks) == 4
    assert [c.level for c in checks] == ["idle", "1×memory"]
    after_idle = checks[0]
    assert after_idle.compute < 0.6, after_idle  # the matmul shares core 0 with two spinning processes
    # the tenant stays: the loaded level ran at the speed the idle level ended at, and only the idle rows
    # were taken at another speed than the rest
    assert after_idle.moved() and drifted_levels(checks) == ["idle"]
    assert "around level(s) idle: their rows" in drift_verdict(checks)


def test_stop_on_drift_stops_after_the_level_and_keeps_its_rows(tmp_path: Path, tenant: ExitStack) -> None:
    checks: list[SpeedCheck] = []
    out = tmp_path / "data.csv"
    with pytest.raises(SpeedDrift, match=r"while timing level idle .*rows measured so far are in .*data\.csv"):
        _profile(out, tenant, stop=True, checks=checks)
    assert [r["contention"] for r in read_dataset(out)] == ["idle", "idle"]  # the loaded level never started
    assert len(checks) == 1


def test_the_verdict_names_the_levels_on_both_sides_of_a_moved_check() -> None:
    steady, slow = SpeedCheck("idle", 1.02, 0.97), SpeedCheck("1×compute", 0.70, 0.95)
    checks = [steady, slow, SpeedCheck("2×compute", 0.99, 1.01), SpeedCheck("1×memory", 1.0, 1.0)]
    assert drifted_levels(checks) == ["1×compute", "2×compute"]  # 2×compute started in the spell
    assert drifted_levels(checks, tolerance=0.35) == []
    assert steady.describe() == "after idle: 1.02× compute, 0.97× memory speed of the start"
    assert drift_verdict([steady]) == "the device's idle speed held within 15% of the run's median through every level"
    spell = [SpeedCheck("idle", 1.0, 1.0), SpeedCheck("1×compute", 1.0, 1.25), SpeedCheck("2×compute", 1.0, 1.0)]
    assert drifted_levels(spell) == ["1×compute", "2×compute"]  # memory alone moved
    # a start taken in a fast moment: every check reads 0.7× of it, and only the first level's rows stand apart
    assert drifted_levels([SpeedCheck(level, 1.0, 0.7) for level in ("idle", "1×compute", "2×compute")]) == ["idle"]
