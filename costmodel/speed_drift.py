"""Did the device's own speed move while a profile timed its contention levels?

A profile times level after level (co-runners start once per level), so a slow spell of the host that
begins between two levels is written into the later level's rows as if it were that level's contention,
silently: on a VM of the Xeon of model 207 a spell during the idle level made the large-map convolutions'
idle rows 1.43× slow, and every slowdown measured against them too small (``benchmarks/README.md``, "The
Xeon of model 207 gets depthwise convolutions, not shipped"). Nothing in the rows shows it.

So the profiler measures the device idle before the first level and again after each one (the matmul and
copy of :class:`~pipeplan.costmodel.profile.SpeedProbe`, on buffers kept for the run, two seconds each) and prints
each level's speed as a fraction of the start's. At the end it names the levels at either end of which the device
ran more than the tolerance off the run's median speed: their rows were taken at another speed than the others',
so time those layers again (``pipeplan profile --layers … --replace``) before a model is trained on them. Both
figures repeat within ±1% on a quiet core when the buffers are kept; with fresh buffers for every copy (as
:func:`~pipeplan.costmodel.profile.measure_device` allocates) the copy read 25–37 GB/s within minutes on a Zen 4 VM,
and the first profiles with this check named levels for it whose rows agreed with a second pass within 2%.
A spell that starts and ends inside one level is not seen; ``python -m pipeplan.costmodel.steadiness``
before a run says whether the host is in one.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeplan.errors import UserError  # nothing heavier: the CLI reads DRIFT_TOLERANCE while building its parser

__all__ = ["DRIFT_TOLERANCE", "MODEL_REMEDY", "SWEEP_REMEDY", "SpeedCheck", "SpeedDrift", "SpeedWatch",
           "check_tolerance", "drift_verdict", "drifted_levels"]

log = logging.getLogger(__name__)

# Well above the probe's repeatability on kept buffers (±1%), well below the spells seen (1.3–1.5×).
DRIFT_TOLERANCE = 0.15


def check_tolerance(tolerance: float | None) -> None:
    """Refuse a drift tolerance that is not a fraction (None: no checks).

    >>> check_tolerance(1.5)
    Traceback (most recent call last):
    ...
    ValueError: drift tolerance must be a fraction between 0 and 1, got 1.5
    """
    if tolerance is not None and not 0 < tolerance < 1:
        raise ValueError(f"drift tolerance must be a fraction between 0 and 1, got {tolerance}")


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


class SpeedWatch:
    """A profile's checks: the device's speed measured at the start, then again after every level.

    ``measure`` gives (FLOP/s, bytes/s) now (:meth:`~pipeplan.costmodel.profile.SpeedProbe.measure`). Each check
    goes to ``checked`` (without one, a check that moved is logged as a warning); with ``stop``, a level at whose
    end the speed had moved from the start's by more than ``tolerance`` raises :class:`SpeedDrift` (the run's
    median, which the final verdict uses, is not known yet)."""

    def __init__(self, measure: Callable[[], tuple[float, float]], tolerance: float = DRIFT_TOLERANCE,
                 stop: bool = False, checked: Callable[[SpeedCheck], None] | None = None,
                 written_to: str = "the dataset") -> None:
        self.measure, self.tolerance, self.stop = measure, tolerance, stop
        self.checked, self.written_to = checked, written_to
        self.start = measure()
        self.checks: list[SpeedCheck] = []

    def after(self, level: str) -> SpeedCheck:
        """Measure again now that ``level`` is timed (its co-runners stopped), and report it."""
        now = self.measure()
        check = SpeedCheck(level, now[0] / self.start[0], now[1] / self.start[1])
        self.checks.append(check)
        if self.checked:
            self.checked(check)
        elif check.moved(self.tolerance):
            log.warning("device speed moved: %s", check.describe())
        if self.stop and check.moved(self.tolerance):
            raise SpeedDrift(f"stopped: the device's idle speed moved more than {self.tolerance:.0%} while timing "
                             f"level {level} ({check.describe()}); the rows measured so far are in {self.written_to}, "
                             "the last level's included: time them again when the core is steady")
        return check


def drifted_levels(checks: Sequence[SpeedCheck], tolerance: float = DRIFT_TOLERANCE) -> list[str]:
    """The levels at either end of which the device ran more than ``tolerance`` off the run's median speed (over
    the start and every check): a level starts where the one before it ended, the first at the start itself.
    Slowdowns are ratios of a level's rows to the idle rows, so what matters is that the levels ran at one speed;
    against the median, a start taken in a short fast or slow moment names the first level, not every other."""
    compute = statistics.median([1.0, *(c.compute for c in checks)])
    memory = statistics.median([1.0, *(c.memory for c in checks)])
    off = [max(abs(c / compute - 1.0), abs(m / memory - 1.0)) > tolerance
           for c, m in [(1.0, 1.0), *((c.compute, c.memory) for c in checks)]]
    return [check.level for i, check in enumerate(checks) if off[i] or off[i + 1]]


# What to do about a sweep's drifted levels; a model profile is written whole, so it is taken again instead.
SWEEP_REMEDY = "Time these layers again with --replace"
MODEL_REMEDY = "Profile the model again"


def drift_verdict(checks: Sequence[SpeedCheck], tolerance: float = DRIFT_TOLERANCE, remedy: str = SWEEP_REMEDY) -> str:
    """What to do about the levels whose speed moved (``remedy``, then when and why), or that none did."""
    drifted = drifted_levels(checks, tolerance)
    if drifted:
        return (f"warning: the device's idle speed was more than {tolerance:.0%} off the run's median around level(s) "
                f"{', '.join(drifted)}: their rows were taken at another speed than the others'. {remedy} once "
                "`python -m pipeplan.costmodel.steadiness` says the core is steady, before using them")
    return f"the device's idle speed held within {tolerance:.0%} of the run's median through every level"
