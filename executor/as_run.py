"""Each stage's compute as the executor's schedule will run it: when it waits, and how it runs after.

A cost model gives a stage's compute *back to back*.  In a pipeline a stage also waits — for its
input, for its sends to be taken, at the end of a batch — and on a CPU a stage that waited runs
differently (:class:`~pipeplan.costmodel.wake.WakeModel`: colder on an idle core, faster beside
co-runners that never sleep).  So the prediction of a run replays the executor's schedule
(:mod:`pipeplan.executor.schedule`) on the predicted times, microbatch by microbatch, the way its
processes step through it:

- both schedules post the receive of microbatch i + 1 before i runs (the batch's first when the
  stage starts the batch), run i when its data is there, and post its sends;
- ``gpipe``: at the end of a batch a stage waits until the next stage has taken every send.  The
  first stage therefore runs a batch's microbatches back to back and then waits for the slowest
  stage to take the last one: a loaded first stage gets one wake per batch.
- ``1f1b``: a stage also keeps at most ``in_flight`` sends untaken (default: the stages after it),
  waiting for the oldest before going on.

A send is taken when the receiver has posted its receive and the data has crossed
(``max(send posted, receive posted) + transfer``, the plan's ``recv`` of the receiving stage), plus
the wake model's receive delay for each end on a core under a load: the receiver's threads wake for
the data only when the scheduler lets them, and so do the sender's, which hand it over (gloo's
transfers need both; a two-stage GPT-NeoX whose first stage shared its core with two compute
co-runners spent 7.8 ms a microbatch in its sends, for 1.7 ms of compute).  Each
microbatch's compute is the wake model's :meth:`~pipeplan.costmodel.wake.WakeModel.woken_time`
after the time the stage spent since its previous compute ended; where there are two stages or
more, :meth:`~pipeplan.costmodel.wake.WakeModel.in_pipeline` instead: a stage on a loaded core
earns only the share of the credit measured in pipelines, and pays what a pipeline stage pays
beyond its module's time (both measured in two-stage pipelines, so a lone stage, which the
profile's back-to-back times describe, keeps the whole credit and pays nothing more); a stage's figure is
the mean over the measured batches, as the run report's is.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.wake import WakeModel

if TYPE_CHECKING:
    from pipeplan.executor.options import RunSetup
    from pipeplan.planner.plan import Plan
    from pipeplan.planner.problem import Problem

__all__ = ["AsRun", "StageLoad", "plan_as_run", "plan_stage_loads", "predict_as_run", "simulate_as_run",
           "stage_times_as_run"]

_FIRST_WAIT = 1.0  # seconds "asleep" before a stage's first microbatch ever: as cold as it gets


@dataclass(frozen=True)
class StageLoad:
    """One stage as the pipeline runs it: back-to-back compute idle and under its device's load
    (seconds per microbatch), the transfer of its input, and that load (None: idle)."""

    idle: float
    loaded: float
    recv: float = 0.0
    load: Contention | None = None


@dataclass(frozen=True)
class AsRun:
    """What the replay predicts: each stage's mean compute per microbatch, and the seconds a measured
    batch takes (the run report's wall time over its batches: first stage's start to last stage's end)."""

    computes: list[float]
    batch_seconds: float


def stage_times_as_run(wake: WakeModel, stages: Sequence[StageLoad], microbatches: int, schedule: str = "gpipe",
                       in_flight: int | None = None, batches: int = 8, warmup: int = 2) -> list[float]:
    """Each stage's mean compute per microbatch over ``batches`` measured batches after ``warmup``,
    replaying ``schedule`` as the module docstring says."""
    return simulate_as_run(wake, stages, microbatches, schedule, in_flight, batches, warmup).computes


def simulate_as_run(wake: WakeModel, stages: Sequence[StageLoad], microbatches: int, schedule: str = "gpipe",
                    in_flight: int | None = None, batches: int = 8, warmup: int = 2) -> AsRun:
    """The replay itself (see :func:`stage_times_as_run`)."""
    if schedule not in ("gpipe", "1f1b"):
        raise ValueError(f"unknown schedule {schedule!r}: choose gpipe or 1f1b")
    k_stages, m = len(stages), microbatches
    bounded = schedule == "1f1b"
    clock = [0.0] * k_stages  # when each stage is free to go on
    last_end = [-_FIRST_WAIT] * k_stages
    send_posted: list[dict[int, float]] = [{} for _ in stages]  # stage → global microbatch → when
    recv_posted: list[dict[int, float]] = [{} for _ in stages]
    pending: list[deque[int]] = [deque() for _ in stages]
    computes: list[list[float]] = [[] for _ in stages]
    limit = [max(1, k_stages - k - 1) if in_flight is None else in_flight for k in range(k_stages)]
    window_start = 0.0

    def taken(k: int, mb: int) -> float:
        """When stage k + 1 has the data of stage k's send of microbatch ``mb`` (a receive not posted
        yet will be when stage k + 1 is next free: it has not reached that microbatch)."""
        return (max(send_posted[k][mb], recv_posted[k + 1].get(mb, clock[k + 1])) + stages[k + 1].recv
                + wake.receive_delay(stages[k + 1].load) + wake.receive_delay(stages[k].load))

    for b in range(warmup + batches):
        for i in range(m):
            mb = b * m + i
            for k, stage in enumerate(stages):
                if k and i == 0:  # the batch's first receive, when the stage starts the batch
                    recv_posted[k][mb] = clock[k]
                arrival = clock[k] if k == 0 else taken(k - 1, mb)
                start = max(clock[k], arrival)
                if (b, i, k) == (warmup, 0, 0):
                    window_start = start
                if k and i + 1 < m:
                    recv_posted[k][mb + 1] = start  # posted before microbatch i runs
                compute = (wake.in_pipeline if k_stages > 1 else wake.woken_time)(
                    stage.idle, stage.loaded, start - last_end[k], stage.load)
                clock[k] = last_end[k] = start + compute
                if b >= warmup:
                    computes[k].append(compute)
                if k + 1 == k_stages:
                    continue  # the last stage keeps its outputs
                send_posted[k][mb] = clock[k]
                pending[k].append(mb)
                while bounded and len(pending[k]) > limit[k]:
                    clock[k] = max(clock[k], taken(k, pending[k].popleft()))
                if i + 1 == m:  # both schedules wait for a batch's sends at its end
                    while pending[k]:
                        clock[k] = max(clock[k], taken(k, pending[k].popleft()))
    return AsRun([statistics.fmean(c) for c in computes], (last_end[-1] - window_start) / batches)


def predict_as_run(plan: Plan, setup: RunSetup, idle: list[float], loaded: list[float],
                   loads: list[Contention]) -> tuple[AsRun | None, list[str]]:
    """A run's CPU stages replayed with this CPU's wake model, or None, with a note, where it has
    none (``$PIPEPLAN_WAKE=none``: no note)."""
    wake, notes = _this_cpus_wake_model()
    if wake is None:
        return None, notes
    stages = [StageLoad(i, t, s.recv, load) for i, t, s, load in zip(idle, loaded, plan.stages, loads, strict=True)]
    options = setup.options
    replay = simulate_as_run(wake, stages, setup.microbatches, options.schedule, options.in_flight,
                             batches=max(options.batches, 1), warmup=options.warmup)
    return replay, [f"stage computes include their waits for input, priced by the wake model of {wake.cpu} "
                    f"({wake.source})"]


def plan_as_run(problem: Problem, plan: Plan, schedule: str = "gpipe") -> tuple[AsRun, WakeModel] | None:
    """What ``plan`` should do when run here with ``schedule``: its stages (:func:`plan_stage_loads`)
    replayed with this CPU's wake model; None where the plan is not one the replay covers or this CPU
    has no wake model."""
    wake, _ = _this_cpus_wake_model()
    if wake is None:
        return None
    stages = plan_stage_loads(problem, plan)
    if stages is None:
        return None
    return simulate_as_run(wake, stages, plan.options.microbatches, schedule), wake


def plan_stage_loads(problem: Problem, plan: Plan) -> list[StageLoad] | None:
    """``plan``'s stages as the replay takes them, for a plan of CPU devices of pinned cores on one
    host that borrows no memory; None otherwise (this CPU's wake model says nothing of GPUs, borrowed
    memory, other hosts or the network).  A stage's idle time is its planned compute scaled by the
    cost model's idle ÷ loaded ratio, so that a device's calibration factor carries over."""
    devices = [problem.cluster.device(s.device) for s in plan.stages]
    if plan.harvest is not None or any(d.cores is None for d in devices) or len({d.host for d in devices}) > 1:
        return None
    stages = []
    for stage, device in zip(plan.stages, devices, strict=True):
        layers = [problem.graph[name] for name in stage.layers]
        loaded = problem.costmodel.stage_time(layers, device)
        idle = problem.costmodel.stage_time(layers, device.with_load(Contention()))
        ratio = idle / loaded if loaded > 0 else 1.0
        stages.append(StageLoad(stage.compute * ratio, stage.compute, stage.recv, device.load))
    return stages


def _this_cpus_wake_model() -> tuple[WakeModel | None, list[str]]:
    """This CPU's wake model (:func:`~pipeplan.costmodel.wake.find_wake_model`), or None and why
    (nothing said where ``$PIPEPLAN_WAKE=none`` turned it off)."""
    from pipeplan.costmodel.wake import WakeError, find_wake_model, wake_off

    try:
        wake = find_wake_model()
    except WakeError as exc:
        return None, [f"stage waits not priced: {exc}"]
    if wake is None and not wake_off():
        return None, ["stage waits not priced: this CPU has no wake model (`pipeplan costmodel wake`, about "
                      "three minutes); stages are predicted at their back-to-back times"]
    if wake is not None and wake.credit and not wake.pipeline_credit:
        return wake, [f"the wake model {wake.source} has no share of its credit measured in pipelines (written "
                      "before the probe measured it, or with --no-pipeline): a loaded stage earns the whole credit, "
                      "which put loaded stages 40% off in the median on held-out models, against 10.5% with the "
                      "share (benchmarks/README.md); `pipeplan costmodel wake` measures it"]
    return wake, []
