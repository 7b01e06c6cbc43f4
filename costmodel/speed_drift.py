"""Did the device's own speed move while a profile timed its contention levels?

A profile times level after level (co-runners start once per level), so a slow spell of the host that
begins between two levels is written into the later level's rows as if it were that level's contention,
silently: on a VM of the Xeon of model 207 a spell during the idle level made the large-map convolutions'
idle rows 1.43× slow, and every slowdown measured against them too small (``benchmarks/README.md``, "The
Xeon of model 207 gets depthwise convolutions, not shipped"). Nothing in the rows shows it.

So the profiler measures the device idle before the first level and again after each one (the matmul and
copy of :func:`~pipeplan.costmodel.profile.measure_device`, about half a second each, repeatable within
±1% compute and ±5% copy on a quiet core) and reports each level's speed as a fraction of the start's.
A level whose speed at either end moved by more than the tolerance is named: its rows hold the spell, so
time its layers again (``pipeplan profile --layers … --replace``) before a model is trained on them.
A spell that starts and ends inside one level is not seen; ``python -m pipeplan.costmodel.steadiness``
before a run says whether the host is in one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeplan.errors import UserError

if TYPE_CHECKING:  # the CLI reads DRIFT_TOLERANCE while building its parser: no heavy imports here
    from pipeplan.costmodel.hardware import Device

__all__ = ["DRIFT_TOLERANCE", "SpeedCheck", "SpeedDrift", "drift_verdict", "drifted_levels", "speed_check",
           "stop_if_drifted"]

# Well above measure_device's own repeatability (±1% compute, ±5% copy), well below the spells seen (1.3–1.5×).
DRIFT_TOLERANCE = 0.15


class SpeedDrift(UserError):
    """The device's idle speed moved during a profile that was asked to stop when it does."""


@dataclass(frozen=True)
class SpeedCheck:
    """The device's idle speed after a contention level, as a fraction of its speed before the first level
    (below 1: slower)."""

    level: str  # the level just timed, as Contention.describe() names it
    compute: float  # matmul FLOP/s now ÷ at the start
    memory: float  # copy bandwidth now ÷ at the start

    def moved(self, tolerance: float = DRIFT_TOLERANCE) -> bool:
        return max(abs(self.compute - 1.0), abs(self.memory - 1.0)) > tolerance

    def describe(self) -> str:
        return f"after {self.level}: {self.compute:.2f}× compute, {self.memory:.2f}× memory speed of the start"


def speed_check(level: str, start: Device, now: Device) -> SpeedCheck:
    return SpeedCheck(level, now.peak_flops / start.peak_flops, now.mem_bandwidth / start.mem_bandwidth)


def drifted_levels(checks: Sequence[SpeedCheck], tolerance: float = DRIFT_TOLERANCE) -> list[str]:
    """The levels whose speed at their start or end had moved: a level starts where the one before it ended
    (the first at the start itself), so a moved check names the level it ends and the one after it."""
    drifted = []
    for i, check in enumerate(checks):
        if check.moved(tolerance) or (i > 0 and checks[i - 1].moved(tolerance)):
            drifted.append(check.level)
    return drifted


def drift_verdict(checks: Sequence[SpeedCheck], tolerance: float = DRIFT_TOLERANCE) -> str:
    """What to do about the levels whose speed moved, or that none did."""
    drifted = drifted_levels(checks, tolerance)
    if drifted:
        return (f"warning: the device's idle speed moved more than {tolerance:.0%} around level(s) "
                f"{', '.join(drifted)}: their rows hold that spell as if it were their contention. Time these "
                "layers again with --replace once `python -m pipeplan.costmodel.steadiness` says the core is "
                "steady, before training on them")
    return f"the device's idle speed held within {tolerance:.0%} through every level"


def stop_if_drifted(checks: Sequence[SpeedCheck], tolerance: float, written_to: str) -> None:
    """Raise :class:`SpeedDrift` naming the level if the newest check moved (for ``--stop-on-drift``)."""
    if checks and checks[-1].moved(tolerance):
        raise SpeedDrift(f"stopped: the device's idle speed moved more than {tolerance:.0%} while timing level "
                         f"{checks[-1].level} ({checks[-1].describe()}); the rows measured so far are in "
                         f"{written_to}, the last level's included: time them again when the core is steady")
