"""Run a plan for real: check it, start the stages, measure them, and report against the prediction.

::

    from pipeplan.executor import RunOptions, run_plan
    report = run_plan("plan.json", options=RunOptions(batches=8, loads={"cpu1": "1xcompute"}))
    report = run_plan(plan, my_module, (example_batch,))      # your own module, no factory needed
    print(report.throughput, [s.error["compute"] for s in report.stages])

Everything that can be checked is checked before a process starts: the plan against the rebuilt
model (:func:`pipeplan.executor.validate.check_plan`), the cut into stages
(:func:`pipeplan.executor.stages.split_program`), the devices, cores and loads
(:func:`pipeplan.executor.options.resolve`), and for a plan that borrows memory, the lenders and
the weights they take from their stages (:mod:`pipeplan.executor.lending`).  Then the stages run as local
processes, or, when this process was started by ``torchrun``, this process runs its own stage and
rank 0 builds the report.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from pipeplan.costmodel.base import CostModel
from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.hardware import Contention, Device
from pipeplan.executor.errors import OutputMismatchError, PlanMismatchError
from pipeplan.executor.launch import failure_of, spawn, torchrun_env
from pipeplan.executor.lending import apply_loans, resolve_loans
from pipeplan.executor.options import RunOptions, RunSetup, resolve
from pipeplan.executor.report import RunReport, build_report
from pipeplan.executor.source import rebuild
from pipeplan.executor.validate import check_plan
from pipeplan.planner.plan import Plan

__all__ = ["Reprediction", "feed_back", "repredict", "repredict_run", "run_plan"]

log = logging.getLogger(__name__)


@dataclass
class Reprediction:
    """A run's stages predicted again (see :func:`repredict`): ``times`` as run where this CPU has a
    wake model, else back to back; ``back_to_back`` always; ``batch_seconds`` a measured batch's wall
    time as run (None without a wake model)."""

    times: list[float] | None
    back_to_back: list[float] | None
    batch_seconds: float | None
    spec: str | None
    notes: list[str]


def repredict(plan: Plan, graph: ModelGraph, setup: RunSetup,
              as_run: bool = True) -> tuple[list[float] | None, str | None, list[str]]:
    """Each stage's compute re-predicted under the load this run puts on its device.

    Returns ``(times, cost model spec, notes)``; ``times`` is None when the cost model cannot be
    loaded.  A device without ``--load`` is taken to be idle: the executor starts nothing on it.
    (A plan does not record the loads it was made under, so this is done for every run; the table
    shows it where it differs from the plan's figures.)

    The model is the plan's own (its ``costmodel`` spec, whose file must still have the plan's
    ``costmodel_digest``), unless the run names another; a missing or changed file is said in the
    notes and nothing is re-predicted, since another model's figures would pass for the plan's.

    With ``as_run`` (and CPU stages), each stage's waits are replayed from the run's schedule and
    priced by this CPU's wake model (:mod:`pipeplan.executor.as_run`); without, the back-to-back times.
    """
    found = repredict_run(plan, graph, setup)
    return (found.times if as_run else found.back_to_back), found.spec, found.notes


def repredict_run(plan: Plan, graph: ModelGraph, setup: RunSetup) -> Reprediction:
    """:func:`repredict`, both ways, with the batch time as run."""
    from pipeplan.executor.as_run import predict_as_run

    cluster = Cluster.from_dict(setup.cluster)
    loads = _loads(setup)
    model, notes = _run_cost_model(plan, setup)
    if model is None:
        return Reprediction(None, None, None, None, notes)
    spec = model.spec or model.name
    if not setup.options.costmodel and spec != plan.costmodel:
        notes.append(f"the plan's cost model {plan.costmodel!r} is {spec!r} on this machine (same file content)")
    layers = [[graph[name] for name in stage.layers] for stage in plan.stages]
    devices = [cluster.device(stage.device) for stage in plan.stages]
    loaded = [model.stage_time(ls, dev.with_load(loads[dev.id])) for ls, dev in zip(layers, devices, strict=True)]
    if not _on_cpu_cores(setup, devices):
        return Reprediction(loaded, loaded, None, spec, notes)
    idle = [model.stage_time(ls, dev.with_load(Contention())) for ls, dev in zip(layers, devices, strict=True)]
    replay, wake_notes = predict_as_run(plan, setup, idle, loaded, [loads[dev.id] for dev in devices])
    notes.extend(wake_notes)
    if replay is None:
        return Reprediction(loaded, loaded, None, spec, notes)
    return Reprediction(replay.computes, loaded, replay.batch_seconds, spec, notes)


def _on_cpu_cores(setup: RunSetup, devices: Sequence[Device]) -> bool:
    """Whether every stage is a CPU device of pinned cores, runs there, and on one host: what this
    CPU's wake model describes (a run across hosts may meet other CPUs and a network)."""
    return (all(s.gpu is None for s in setup.stages) and all(d.cores is not None for d in devices)
            and len({s.host for s in setup.stages}) == 1)


def _loads(setup: RunSetup) -> dict[str, Contention]:
    return {s.device: Contention.parse(s.load) if s.load else Contention() for s in setup.stages}


def _run_cost_model(plan: Plan, setup: RunSetup) -> tuple[CostModel | None, list[str]]:
    """The cost model this run re-predicts with (see :func:`repredict`), or None and why."""
    from pipeplan.costmodel.provenance import load_recorded_cost_model
    from pipeplan.costmodel.registry import load_cost_model

    notes: list[str] = []
    try:
        if setup.options.costmodel:
            model = load_cost_model(setup.options.costmodel)
            if plan.costmodel_digest is not None and model.digest != plan.costmodel_digest:
                notes.append(f"stage times re-predicted with {setup.options.costmodel!r} as asked, not with the "
                             f"plan's cost model {plan.costmodel!r} ({plan.costmodel_digest})")
        else:
            model = load_recorded_cost_model(plan.costmodel, plan.costmodel_digest)
    except ValueError as exc:
        return None, [f"stage times not re-predicted under the run's load: {exc}"]
    return model.for_model(plan.model), notes


def feed_back(plan: Plan, graph: ModelGraph, setup: RunSetup, measured: Sequence[float]) -> list[str]:
    """Record each stage's predicted and ``measured`` compute (seconds per microbatch) in the calibration store
    (:mod:`pipeplan.costmodel.calibration`), and say how the device factors change the stages' errors."""
    from pipeplan.costmodel.calibration import CalibratedCostModel, CalibrationStore, device_key, record_run
    from pipeplan.executor.as_run import predict_as_run

    if setup.notes:  # the stages did not run on the plan's devices: their times calibrate nothing
        return []
    model, _ = _run_cost_model(plan, setup)
    if model is None:
        return []
    base = model.base if isinstance(model, CalibratedCostModel) else model
    cluster = Cluster.from_dict(setup.cluster)
    loads = _loads(setup)
    devices = [cluster.device(stage.device).with_load(loads[stage.device]) for stage in plan.stages]
    layers = [[graph[name] for name in stage.layers] for stage in plan.stages]
    predicted = [base.stage_time(ls, d) for ls, d in zip(layers, devices, strict=True)]
    if _on_cpu_cores(setup, devices):  # a stage's factor is what is left once its waits are priced
        idle = [base.stage_time(ls, d.with_load(Contention())) for ls, d in zip(layers, devices, strict=True)]
        replay, _ = predict_as_run(plan, setup, idle, predicted, [d.load for d in devices])
        predicted = replay.computes if replay is not None else predicted
    store = CalibrationStore()
    before = CalibratedCostModel(base, store, plan.model)
    factors_before = [before.factor(d) for d in devices]
    # the model's own stage times behind each distinct (device, load) factor: the note says whose runs spoke
    own = {(device_key(d), d.load.describe()): before.own_runs(d) for d in devices}
    if not record_run(base, [(d, d.load, p, m) for d, p, m in zip(devices, predicted, measured, strict=True)],
                      plan.model, store):
        return []
    after = CalibratedCostModel(base, store, plan.model)
    factors_after = [after.factor(d) for d in devices]

    def median_error(factors: list[float]) -> float:
        return statistics.median(abs(m / (p * f) - 1) for p, m, f in zip(predicted, measured, factors, strict=True))

    shown = ", ".join(f"{d.id} {b:.2f}→{a:.2f}" for d, b, a in zip(devices, factors_before, factors_after,
                                                                    strict=True))
    if all(own.values()):
        source = f"{sum(own.values())} stage times of {plan.model}'s earlier runs"
    elif any(own.values()):
        source = (f"{plan.model}'s earlier runs for {sum(map(bool, own.values()))} of {len(own)} devices and loads, "
                  "other models' runs for the rest")
    else:
        source = f"other models' runs; {plan.model} had none"
    return [f"calibration ({store.path}): {base.spec or base.name}'s stage compute was off by a median "
            f"{median_error(factors_before):.0%} with the device factors before this run (from {source}), "
            f"{median_error(factors_after):.0%} with them after it ({shown}); plan with "
            f"--costmodel calibrated:{base.spec or base.name} to use them"]


def _finish(plan: Plan, setup: RunSetup, graph: ModelGraph, results: list[dict[str, object]]) -> RunReport:
    found = repredict_run(plan, graph, setup)
    report = build_report(plan, setup, results, found.times, found.spec, [*setup.notes, *found.notes],
                          found.back_to_back, found.batch_seconds)
    if setup.options.calibrate:
        report.notes += feed_back(plan, graph, setup, [s.measured["compute"] for s in report.stages])
    if report.check is not None and not report.check["ok"]:
        raise OutputMismatchError(f"the pipeline's outputs differ from the unsplit model's: "
                                  f"{report.check['message']}", report)
    return report


def run_plan(plan: Plan | str | Path, module: nn.Module | None = None, inputs: Any = None,
             options: RunOptions | None = None, *, kwargs: Mapping[str, Any] | None = None) -> RunReport | None:
    """Run ``plan`` (a Plan or a plan JSON file) and return the report.

    The model is rebuilt from the plan's source (a zoo name or a factory), or is ``module`` called
    on ``inputs`` (a tensor or a tuple of positional inputs; ``kwargs`` for keyword inputs): one
    microbatch, as the plan was made for.

    Under ``torchrun`` only rank 0 returns the report; the other ranks return None.  Raises
    :class:`~pipeplan.executor.errors.PlanMismatchError` before starting anything for a plan that cannot run,
    :class:`~pipeplan.executor.errors.StageFailure` naming the stage when one fails, and
    :class:`~pipeplan.executor.errors.OutputMismatchError` when the outputs differ from the unsplit model's.
    """
    if isinstance(module, RunOptions):
        raise TypeError("run_plan(plan, module, inputs, options): pass the options as options=RunOptions(...)")
    options = options or RunOptions()
    if not isinstance(plan, Plan):
        plan = Plan.load(plan)
    env = torchrun_env()
    setup = resolve_loans(plan, resolve(plan, options, local=env is None))
    rebuilt = rebuild(plan, module, inputs, kwargs)
    check_plan(plan, rebuilt.captured.graph)
    from pipeplan.executor.lender import LenderBuild
    from pipeplan.executor.stage_build import StageBuild, build_stages
    from pipeplan.executor.worker import Phases, describe_failure, run_stage

    # Cutting the stages here refuses what cannot cross a stage boundary before anything starts.
    builds = build_stages(plan, rebuilt, options.check_batches > 0, fingerprint=env is not None)
    # Lent weights leave their stages here, for the lenders' processes (plan.harvest; none: no change).
    ranks: list[StageBuild | LenderBuild] = [*builds, *apply_loans(builds, setup)]
    if env is None:
        log.info("running %d stages as local processes (%s)", setup.world_size, setup.backend)
        rebuildable = module is None
        return _finish(plan, setup, rebuilt.captured.graph, spawn(setup, ranks, rebuilt.modules, rebuildable))

    rank, world = env
    if world != setup.world_size:
        lenders = setup.world_size - len(setup.stages)
        raise PlanMismatchError(f"torchrun started {world} processes, but the plan has {len(setup.stages)} stages"
                                + (f" and {lenders} lender{'s that run' if lenders > 1 else ' that runs'} no stage"
                                   if lenders else "")
                                + f": use --nproc-per-node (times --nnodes) = {setup.world_size}")
    phases = Phases()
    try:
        results = run_stage(rank, setup, "env://", phases, ranks[rank])
    except Exception as exc:
        failure = describe_failure(exc, phases.current)
        raise failure_of(setup, rank, failure["message"], failure["details"]) from exc
    return _finish(plan, setup, rebuilt.captured.graph, results) if results is not None else None
