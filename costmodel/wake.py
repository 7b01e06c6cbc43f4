"""How a pipeline stage that waits for its input runs when its input arrives: the wake model of a CPU.

A cost model times layers *back to back*: the profile runs a layer again and again, and under a
load it shares the core with the co-runners all the time.  In a pipeline only the bottleneck stage
computes all the time; every other stage computes for part of the cycle and sleeps in a receive
for the rest.  Two things then happen on a CPU, both measured on this project's VMs
(``benchmarks/README.md``, issue 16):

- **after a sleep the work runs slower on an idle core**: the caches went cold and the core's clock
  dropped while it waited — on the Zen 4 VM a 0.47 ms layer chain takes 0.6 ms after sleeping 1 ms
  and 0.9 ms after 16 ms;
- **a woken task runs ahead of co-runners that never sleep**: Linux's fair scheduler places a task
  that slept so that it soon runs, at full speed for a while (up to a couple of milliseconds on the
  VMs) before it shares the core again — a 2.7 ms stage beside two compute co-runners took 5 ms in a
  pipeline where its back-to-back time under that load was 9.7 ms.  How long depends on the sleep
  and on the co-runners (beside one co-runner the credit fades after sleeps of 8 ms or more, beside
  two it does not), so it is measured per load and sleep rather than derived from the scheduler.

:class:`WakeModel` holds both, measured per CPU by :mod:`pipeplan.costmodel.wake_probe` on a
reference workload (``pipeplan costmodel wake``): an idle *penalty* ``a(S) + b(S)·w`` for work ``w``
after a sleep ``S``, and per probed load a *credit* ``x(S)`` of full-speed time after a sleep, both
interpolated between the probed sleeps.  A stage of idle time ``w`` and back-to-back time ``L = s·w``
under its load then takes, woken after ``S``::

    w' = w + a(S) + b(S)·w                       (the penalty)
    t  = w'·s                                    if the load shares no core time (idle, s ≈ 1)
    t  = min(w', x(S)) + max(0, w' − x(S))·s     otherwise (x of the probed load nearest the stage's)

where, in a pipeline, a stage earns only the share ``pipeline_credit`` of ``x`` measured for its
load on the probe's reference pipelines (:mod:`pipeplan.costmodel.wake_pipeline`: a fifth to a third
beside two compute co-runners on the project's Zen 4 VM; the whole where a file has no share); and,
in a pipeline, ``stage_fixed + stage_rate·t`` more per microbatch: what the probe's own
two-stage pipeline of the reference workload measured beyond its modules' back-to-back times (the
stage coming back to its module after its schedule's own work, and running beside the other stage;
less what a stage's figures already hold: :meth:`WakeModel.in_pipeline`); and a stage on a core
under a load receives its input ``recv_delay`` later (its threads wake only when the scheduler lets
them; measured with two real processes, :meth:`WakeModel.receive_delay`).  The replay
(:mod:`pipeplan.executor.as_run`) charges the same delay where the *sender* is on a loaded core,
whose threads must also wake to hand a message over; that is not measured separately but assumed
(a first stage beside two compute co-runners, in a real run, spent 7.8 ms a microbatch in its sends).

:meth:`WakeModel.in_pipeline` is the whole of it for one microbatch.

:mod:`pipeplan.executor.as_run` replays the executor's schedule on a plan's stages to find each
one's waits, and prices every microbatch with this model: what ``pipeplan run`` predicts and
reports beside the back-to-back figure.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from pipeplan.costmodel.hardware import Contention, cpu_file, same_cpu
from pipeplan.errors import UserError

__all__ = ["FORMAT", "SHIPPED", "WakeError", "WakeModel", "default_path", "find_wake_model", "least_squares",
           "log_rms", "wake_off"]

FORMAT = "pipeplan.wake"
SHIPPED = Path(__file__).parent / "data" / "wake"
_TIME_SHARED = 1.05  # a back-to-back slowdown above this means the core's time is shared


class WakeError(UserError, ValueError):
    """A wake model file that cannot be read, or measurements too few to fit one."""


@dataclass
class WakeModel:
    """What a CPU does to a stage that slept: idle penalty per sleep, full-speed credit under load.

    ``sleeps`` are the probed sleeps (seconds, ascending, all > 0); ``penalty_fixed[i]`` and
    ``penalty_rate[i]`` are ``a`` and ``b`` after ``sleeps[i]``; ``credit[level][i]`` is the
    full-speed time after ``sleeps[i]`` under a probed load (named as ``Contention.describe`` writes
    it); ``grid`` keeps the raw measurements (level → rows of ``[work, sleep, seconds]``, work the
    idle back-to-back time) so that a model can be refitted or inspected.
    """

    cpu: str
    measured_at: str
    sleeps: list[float]
    penalty_fixed: list[float]
    penalty_rate: list[float]
    credit: dict[str, list[float]] = field(default_factory=dict)
    # a pipeline stage's microbatch beyond its module's back-to-back time: fixed seconds + rate × that time
    stage_fixed: float = 0.0
    stage_rate: float = 0.0
    recv_delay: dict[str, float] = field(default_factory=dict)  # load → extra seconds for a message to arrive
    # load → share of the credit a stage in a pipeline earns (measured on reference pipelines; 1 where not)
    pipeline_credit: dict[str, float] = field(default_factory=dict)
    grid: dict[str, list[list[float]]] = field(default_factory=dict)
    fit_error: dict[str, float] = field(default_factory=dict)  # level → RMS of log residuals
    source: str = ""

    def __post_init__(self) -> None:
        n = len(self.sleeps)
        if n == 0 or len(self.penalty_fixed) != n or len(self.penalty_rate) != n:
            raise WakeError(f"a wake model needs one penalty per probed sleep: {n} sleeps, "
                            f"{len(self.penalty_fixed)} fixed and {len(self.penalty_rate)} rate terms")
        if any(b <= a for a, b in zip(self.sleeps, self.sleeps[1:], strict=False)) or self.sleeps[0] <= 0:
            raise WakeError(f"probed sleeps must be positive and ascending, got {self.sleeps}")
        if self.stage_fixed < 0 or self.stage_rate < 0:
            raise WakeError(f"a pipeline stage's extra time cannot be negative: {self.stage_fixed} s + "
                            f"{self.stage_rate} × its time")
        for level, credits in self.credit.items():
            if len(credits) != n or min(credits, default=0.0) < 0:
                raise WakeError(f"load {level!r} needs one credit ≥ 0 per probed sleep ({n}), got {credits}")
        for level, share in self.pipeline_credit.items():
            if not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
                raise WakeError(f"load {level!r}: a pipeline stage earns a share of the credit between 0 and 1, "
                                f"got {share}")

    # --- prediction -----------------------------------------------------------------------------
    def _at(self, values: Sequence[float], sleep: float) -> float:
        """``values`` (one per probed sleep) at ``sleep``: linear between probed sleeps, from 0 at no
        sleep, and the longest probed sleep's beyond it (a core that slept long is as cold as it gets)."""
        if sleep <= 0:
            return 0.0
        xs, ys = [0.0, *self.sleeps], [0.0, *values]
        if sleep >= xs[-1]:
            return ys[-1]
        i = bisect.bisect_right(xs, sleep)
        return ys[i - 1] + (sleep - xs[i - 1]) / (xs[i] - xs[i - 1]) * (ys[i] - ys[i - 1])

    def penalty(self, sleep: float) -> tuple[float, float]:
        """``(a, b)`` after ``sleep`` seconds on an idle core."""
        return self._at(self.penalty_fixed, sleep), self._at(self.penalty_rate, sleep)

    def level_for(self, load: Contention | None) -> str | None:
        """The probed load whose credit ``load`` takes: the same one, else the same kind with the
        nearest number of co-runners, else the nearest number of any kind (None: none probed, or a
        load that shares no core time, which earns no credit)."""
        if not self.credit or load is None or not (load.corunners or load.utilization):
            return None
        if load.describe() in self.credit:
            return load.describe()
        probed = [(lv, Contention.parse(lv)) for lv in sorted(self.credit)]
        count = load.corunners or 1  # a measured utilisation: one co-runner's worth
        return min(probed, key=lambda p: (p[1].kind != load.kind, abs(p[1].corunners - count)))[0]

    def woken_time(self, idle: float, loaded: float, sleep: float, load: Contention | None = None,
                   share: float = 1.0) -> float:
        """Seconds for work of back-to-back time ``idle`` on an idle core and ``loaded`` under ``load``,
        started after sleeping ``sleep`` seconds (see the module's formula), earning ``share`` of the
        probed credit."""
        if idle <= 0:
            return max(loaded, 0.0)
        a, b = self.penalty(sleep)
        woken = idle + a + b * idle
        slowdown = max(loaded / idle, 1.0)
        level = self.level_for(load)
        if slowdown <= _TIME_SHARED or level is None:
            return woken * slowdown
        credit = self._at(self.credit[level], sleep) * share
        return min(woken, credit) + max(0.0, woken - credit) * slowdown

    def in_pipeline(self, idle: float, loaded: float, sleep: float, load: Contention | None = None) -> float:
        """:meth:`woken_time` with the share of the credit a pipeline stage earns under its load
        (``pipeline_credit``), plus what a pipeline stage pays per microbatch beyond its module's time.

        Two parts of that extra are already in the figures for some stages, and are not charged twice:
        the fixed part is a cold return to the module, and a wait's idle penalty ``a(S)`` is one too
        (a stage pays the larger); the rate is running beside other work, which a stage on a core
        whose time it shares with co-runners already does in its loaded back-to-back time.
        """
        level = self.level_for(load)
        share = self.pipeline_credit.get(level, 1.0) if level is not None else 1.0
        woken = self.woken_time(idle, loaded, sleep, load, share)
        fixed = max(0.0, self.stage_fixed - self.penalty(sleep)[0])
        shared = idle > 0 and loaded / idle > _TIME_SHARED and level is not None
        return woken + fixed + (0.0 if shared else self.stage_rate * woken)

    def receive_delay(self, load: Contention | None) -> float:
        """Extra seconds a stage's input takes to reach it on a core under ``load`` (the probed load
        nearest it, as for the credit; 0 on an idle core or where none was probed)."""
        level = self.level_for(load)
        return self.recv_delay.get(level, 0.0) if level is not None else 0.0

    # --- files ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": 1, **asdict(self)}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> WakeModel:
        if doc.get("format") != FORMAT:
            raise WakeError(f"not a wake model (format {doc.get('format')!r}, expected {FORMAT!r})")
        names = [f.name for f in fields(cls) if f.name != "source"]  # where it was read from is not in the file
        try:
            return cls(**{k: doc[k] for k in names if k in doc})
        except TypeError as exc:
            raise WakeError(f"wake model is missing a field: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> WakeModel:
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise WakeError(f"cannot read wake model {path}: {exc}") from None
        model = cls.from_dict(doc)
        model.source = str(path)
        return model

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        doc = self.to_dict()
        doc.pop("source", None)
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(path)  # atomic: a crash never leaves half a file
        return path


def default_path(cpu: str | None = None) -> Path:
    """Where this machine's (or ``cpu``'s) wake model is written: ``$PIPEPLAN_WAKE_DIR`` or ``wake/``
    in the user data directory."""
    return cpu_file("PIPEPLAN_WAKE_DIR", "wake", cpu)


def find_wake_model() -> WakeModel | None:
    """This CPU's wake model: ``$PIPEPLAN_WAKE`` (a file, or ``none`` for no model), else the user's
    own probe (:func:`default_path`), else a shipped one measured on the same CPU design, else None
    (stages are then predicted at their back-to-back times)."""
    if wake_off():
        return None
    chosen = os.environ.get("PIPEPLAN_WAKE", "").strip()
    if chosen:
        return WakeModel.load(chosen)
    own = default_path()
    if own.exists():
        return WakeModel.load(own)
    for path in sorted(SHIPPED.glob("*.json")):
        model = WakeModel.load(path)
        if same_cpu(model.cpu):
            return model
    return None


def wake_off() -> bool:
    """Whether ``$PIPEPLAN_WAKE`` is ``none``: stages predicted back to back, and nothing said of it."""
    return os.environ.get("PIPEPLAN_WAKE", "").strip().lower() == "none"


def log_rms(pairs: Sequence[tuple[float, float]]) -> float:
    """RMS of ``log(predicted / measured)`` over ``(predicted, measured)`` pairs."""
    logs = [math.log(p / m) for p, m in pairs if p > 0 and m > 0]
    return math.sqrt(sum(x * x for x in logs) / len(logs)) if logs else 0.0


def least_squares(ws: Sequence[float], extra: Sequence[float]) -> tuple[float, float]:
    """``(a, b)`` ≥ 0 minimising Σ (a + b·w − extra)²; a negative term is dropped and the other refitted."""
    n = len(ws)
    mw, me = statistics.fmean(ws), statistics.fmean(extra)
    var = sum((w - mw) ** 2 for w in ws)
    b = sum((w - mw) * (e - me) for w, e in zip(ws, extra, strict=True)) / var if var > 0 and n > 1 else 0.0
    a = me - b * mw
    if b < 0:
        return max(me, 0.0), 0.0
    if a < 0:
        b = max(sum(w * e for w, e in zip(ws, extra, strict=True)) / sum(w * w for w in ws), 0.0)
        return 0.0, b
    return a, b
