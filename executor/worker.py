"""One stage process: pin it, build its stage, run the batches, measure, check, report to rank 0.

The same function runs under the local launcher (:mod:`pipeplan.executor.launch`, one spawned process per
stage) and under ``torchrun`` (one process per stage, possibly on several hosts).  Rank k runs
stage k.  The local launcher hands each process its stage module, pickled; under ``torchrun`` every
process rebuilds the model from the plan's source and proves, by a digest of the weights, that it
built the same one as the others.

Clock: on one host every process reads the same monotonic clock, and rank 0's reading after a
barrier is the run's epoch; across hosts each process takes its own reading after that barrier,
so cross-host times are as good as the barrier's skew.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import time
import traceback
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage

from pipeplan.costmodel.corunners import CoRunners
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.profile import retain_freed_memory
from pipeplan.costmodel.source import build_source, flat_inputs
from pipeplan.executor.check import compare_outputs, tensor_leaves, tolerance
from pipeplan.executor.errors import RunError
from pipeplan.executor.harvest_stream import Streamer, attach
from pipeplan.executor.layer_major import LayerMajor
from pipeplan.executor.lender import LenderBuild, LenderServer, run_lender
from pipeplan.executor.lending import make_groups
from pipeplan.executor.loan_cut import live_loans
from pipeplan.executor.memory_cap import WeightLedger
from pipeplan.executor.options import RunSetup, StageSetup
from pipeplan.executor.schedule import TimedSchedule, run_batches
from pipeplan.executor.source import Rebuilt, batch_inputs, batch_kwargs, rebuild, source_of_plan
from pipeplan.executor.stage_build import ForwardError, GuardedStage, StageBuild, build_stages
from pipeplan.executor.stash import StashClient, StashStore, borrowers_of
from pipeplan.executor.stash_memory import BatchMeter
from pipeplan.executor.validate import check_plan
from pipeplan.planner.plan import Plan

__all__ = ["ForwardError", "GuardedStage", "Phases", "StageBuild", "build_stages", "describe_failure", "pin",
           "run_stage", "stage_devices"]

class Phases:
    """What a stage process is doing now (for error messages) and how long each step took."""

    def __init__(self) -> None:
        self.current = "starting"
        self.seconds: dict[str, float] = {}
        self._since = time.perf_counter()

    def enter(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[self.current] = round(self.seconds.get(self.current, 0.0) + now - self._since, 4)
        self.current, self._since = phase, now


def pin(stage: StageSetup) -> None:
    """Pin this process (and the threads it will start) to the stage's cores, with a fixed thread count,
    and flush denormal floats to zero, as the profiler does (:func:`pipeplan.costmodel.profile.pinned`): random
    weights can drive a model into denormals that trained weights do not, and a run measures what
    the plan predicted for the trained model. The unsplit model the outputs are checked against runs
    in a stage process too, under the same setting. Freed memory is kept for reuse, as when profiling
    (:func:`pipeplan.costmodel.profile.retain_freed_memory` says why)."""
    if stage.cores:
        os.sched_setaffinity(0, stage.cores)
    torch.set_num_threads(stage.threads)
    torch.set_flush_denormal(True)
    retain_freed_memory()  # microbatches back to back must not page-fault every activation afresh
    with contextlib.suppress(RuntimeError):  # only settable before the first inter-op task
        torch.set_num_interop_threads(1)


def stage_devices(setup: RunSetup, stage: StageSetup) -> tuple[torch.device, torch.device]:
    """(where the stage computes, where its sends and receives live)."""
    if stage.gpu is None:
        return torch.device("cpu"), torch.device("cpu")
    if stage.gpu >= torch.cuda.device_count():
        raise RunError(f"stage {stage.index} on {stage.device} needs GPU {stage.gpu}, but this host has "
                       f"{torch.cuda.device_count()}")
    torch.cuda.set_device(stage.gpu)
    compute = torch.device("cuda", stage.gpu)
    return compute, (torch.device("cpu") if setup.staged else compute)


def _agree(fingerprint: str | None, ctrl: dist.ProcessGroup | None) -> float:
    """Check that every process built the same weights; return the run's clock epoch."""
    world = dist.get_world_size(ctrl)
    here = (socket.gethostname(), fingerprint)
    seen: list[Any] = [None] * world
    dist.all_gather_object(seen, here, group=ctrl)
    prints = {fp for _, fp in seen}
    if len(prints) > 1:
        raise RunError(f"the stage processes built different weights ({sorted(prints)}): the model's source "
                       "must build the same module in every process (seed it)")
    dist.barrier(group=ctrl)
    epoch = [time.perf_counter()]
    if len({host for host, _ in seen}) == 1:  # one host: one monotonic clock, take rank 0's zero
        dist.broadcast_object_list(epoch, src=0, group=ctrl)
    return float(epoch[0])


def _check(built: StageBuild, setup: RunSetup, plan: Plan, device: torch.device,
           outputs: list[Any]) -> dict[str, Any]:
    """Compare the pipeline's outputs with the unsplit module run on the same microbatches, on the
    last stage's device and in its dtype."""
    model = built.model
    if model is None:
        model = build_source(source_of_plan(plan)).model  # built as every process builds it, not exported
    model = model.to(device)
    m, seed = setup.microbatches, setup.options.seed
    dtypes = [b.dtype for b in built.output_meta if b.dtype.is_floating_point] or [torch.float32]
    convolutions = any(isinstance(mod, torch.nn.modules.conv._ConvNd) for mod in model.modules())
    tol, basis = tolerance(max(dtypes, key=lambda d: torch.finfo(d).eps), device.type,
                           convolutions=convolutions)

    def reference(b: int) -> list[torch.Tensor]:
        index = setup.options.warmup + b
        args = batch_inputs(built.args, m, seed, index)
        kwargs = batch_kwargs(built.kwargs, m, seed, index)
        def part(value: Any, i: int) -> Any:
            return value.chunk(m)[i].to(device) if isinstance(value, torch.Tensor) and value.dim() else value

        split = [torch.utils._pytree.tree_map(lambda a, i=i: part(a, i), (args, kwargs)) for i in range(m)]
        with torch.no_grad():
            ref = [tensor_leaves(model(*a, **k)) for a, k in split]
        return [torch.cat([r[i] for r in ref]) for i in range(len(ref[0]))]

    return compare_outputs(outputs, reference, tol=tol, basis=basis).as_dict()


def _batches(built: StageBuild, setup: RunSetup, device: torch.device) -> list[tuple[Any, ...]]:
    """The run's input batches for stage 0, flattened as the exported program takes them."""
    options, m = setup.options, setup.microbatches
    batches = []
    for b in range(options.warmup + options.batches):
        args = batch_inputs(built.args, m, options.seed, b)
        kwargs = batch_kwargs(built.kwargs, m, options.seed, b)
        flat = flat_inputs(args, kwargs, built.kwarg_order)
        batches.append(tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in flat))
    return batches


def run_stage(rank: int, setup: RunSetup, init_method: str, phases: Phases,
              built: StageBuild | LenderBuild | None = None) -> list[dict[str, Any]] | None:
    """Run stage ``rank`` to the end; rank 0 returns every stage's (and lender's) measurements, the others None.

    ``built`` is the stage from :func:`build_stages` (with its loans applied,
    :func:`pipeplan.executor.lending.apply_loans`); without it the process rebuilds the model from
    the plan's source.  A rank past the stages is a lender's (:func:`pipeplan.executor.lender.run_lender`).
    ``phases`` follows what the stage is doing, so that a failure can say so.
    """
    if rank >= len(setup.stages):
        if not isinstance(built, LenderBuild):
            built = _lender_build(rank, setup)
        run_lender(rank, setup, init_method, phases, built)
        return None
    stage = setup.stages[rank]
    options = setup.options
    plan = Plan.from_dict(setup.plan)
    pin(stage)
    compute, wire = stage_devices(setup, stage)
    if built is None:
        phases.enter("rebuilding the model")
        rebuilt = rebuild(plan)
        check_plan(plan, rebuilt.captured.graph)
        built = _rebuilt_stages(plan, rebuilt, setup)[rank]
    assert isinstance(built, StageBuild)
    ledger = stage_ledger(setup, rank, built)

    phases.enter("joining the process group")
    dist.init_process_group(setup.backend, init_method=init_method, rank=rank, world_size=setup.world_size,
                            timeout=timedelta(seconds=options.timeout))
    streamer: Streamer | None = None
    try:
        groups = make_groups(setup)
        ctrl = groups.ctrl
        server = _server(setup, rank, built, groups.fetch, ledger)
        epoch = _agree(built.fingerprint, ctrl)
        sync = (lambda: torch.cuda.synchronize(compute)) if compute.type == "cuda" else None
        n_stages = len(setup.stages)  # the world also holds the lenders that run no stage
        last = rank == n_stages - 1
        guarded = GuardedStage(built.module.to(compute), compute, setup.staged, last)
        if built.fetches and groups.fetch is not None:
            streamer = Streamer(built.fetches, groups.fetch, ledger, compute, options.timeout,
                                buffers=live_loans(built.module))
            attach(guarded, streamer)
        batched = streamer is not None and plan.harvest is not None and plan.harvest.options.batched
        # fetch="batch": each borrowed layer fetched once per batch, every microbatch run through it
        stash = _stash_client(setup, rank, groups.fetch) if batched else None
        meter = BatchMeter(ledger, setup.microbatches, stash) if batched else None
        module = LayerMajor(guarded, setup.microbatches, built.output_meta, stash, meter) if batched else guarded
        # Static shapes from the capture: PipelineStage then never runs a stage to infer them.
        pipe_stage = PipelineStage(module, rank, n_stages, wire,
                                   input_args=tuple(b.empty() for b in built.input_meta),
                                   output_args=tuple(b.empty() for b in built.output_meta), group=groups.pipe)
        schedule = TimedSchedule(pipe_stage, setup.microbatches, schedule=options.schedule,
                                 in_flight=options.in_flight, clock=lambda: time.perf_counter() - epoch,
                                 sync=sync, hold_sends=batched)
        total = options.warmup + options.batches
        batches = _batches(built, setup, compute) if rank == 0 else [()] * total
        keep = options.check_batches if last else 0
        load = (CoRunners(Contention.parse(stage.load), cores=stage.cores, gpu=stage.gpu)
                if stage.load else contextlib.nullcontext())
        if stage.load:
            phases.enter(f"starting co-runners ({stage.load})")
        try:
            with load:
                corunners = len(load.pids) if isinstance(load, CoRunners) else 0
                phases.enter("running the warm-up batches")
                run_batches(schedule, batches[: options.warmup])
                schedule.timings.clear()
                schedule.batch = 0
                if streamer is not None:
                    streamer.reset()
                if stash is not None:
                    stash.reset()
                dist.barrier(group=ctrl)
                phases.enter("running the measured batches")
                start, cpu = schedule.clock(), time.process_time()
                outputs = run_batches(schedule, batches[options.warmup:], keep)
                end, cpu = schedule.clock(), time.process_time() - cpu
                if streamer is not None:  # the lenders learn this stage is done before it waits for anyone
                    streamer.stop()
                if stash is not None:
                    stash.stop()
                dist.barrier(group=ctrl)  # co-runners stay on until every stage has finished measuring
        except Exception:
            action, batch, mb = schedule.doing
            if action:
                kind = "warm-up batch" if "warm-up" in phases.current else "batch"
                phases.current = f"{action} microbatch {mb} of {kind} {batch}"
            raise
        phases.enter("checking the outputs against the unsplit model")
        check = _check(built, setup, plan, compute, outputs) if keep else None
        result = {"stage": rank, "device": stage.device, "host": socket.gethostname(), "pid": os.getpid(),
                  "cores": list(stage.cores or []), "threads": torch.get_num_threads(), "corunners": corunners,
                  "start": start, "end": end, "cpu": cpu, "timings": [t.as_row() for t in schedule.timings],
                  "check": check, "phases": phases.seconds}
        if setup.loans is not None:
            phases.enter("waiting for the borrowers of its lent weights")
            harvest = _harvest_result(built, ledger, streamer, server, options.timeout)
            if meter is not None:
                harvest["memory"]["batch"] = meter.as_dict()
            if stash is not None:
                harvest["stash"] = dict(stash.stats)
            result["harvest"] = harvest
        phases.enter("gathering the measurements")
        gathered: list[Any] | None = [None] * n_stages if rank == 0 else None
        dist.gather_object(result, gathered, dst=0, group=ctrl)
        if groups.fetch is not None and setup.world_size > n_stages:  # the lenders' own reports
            everyone: list[Any] | None = [None] * setup.world_size if rank == 0 else None
            dist.gather_object(None, everyone, dst=0, group=groups.fetch)
            if gathered is not None and everyone is not None:
                gathered += [r for r in everyone if r is not None]
        return gathered
    finally:
        dist.destroy_process_group()


def _rebuilt_stages(plan: Plan, rebuilt: Rebuilt, setup: RunSetup) -> list[StageBuild | LenderBuild]:
    """Every rank's build, as the launcher makes them: the stages with their loans applied, then the
    lenders of their own (under ``torchrun`` every process makes all of them, the same way)."""
    from pipeplan.executor.lending import apply_loans

    builds = build_stages(plan, rebuilt, setup.options.check_batches > 0, fingerprint=True)
    return [*builds, *apply_loans(builds, setup)]


def _lender_build(rank: int, setup: RunSetup) -> LenderBuild:
    plan = Plan.from_dict(setup.plan)
    rebuilt = rebuild(plan)
    check_plan(plan, rebuilt.captured.graph)
    built = _rebuilt_stages(plan, rebuilt, setup)[rank]
    assert isinstance(built, LenderBuild)
    return built


def stage_ledger(setup: RunSetup, rank: int, built: StageBuild) -> WeightLedger:
    """Stage ``rank``'s weights (its own and those it lends) against its device's cap (a run's stage
    and a deployment's)."""
    device = setup.stages[rank].device
    return WeightLedger(device, setup.loans.caps.get(device) if setup.loans else None,
                        [*built.module.buffers(), *(item.flat for item in built.lent)],
                        what="its stage's and lent to others" if built.lent else "its stage's")


def _server(setup: RunSetup, rank: int, built: StageBuild, group: dist.ProcessGroup | None,
            ledger: WeightLedger) -> LenderServer | None:
    """The lender thread of a stage that lends weights or holds other stages' stashes (None: neither)."""
    stash_from = borrowers_of(setup.loans.stashes.items(), rank) if setup.loans is not None else []
    if group is None or not (built.lent or stash_from):
        return None
    store = StashStore(setup.stages[rank].device, ledger.cap, ledger.home) if stash_from else None
    return LenderServer(group, built.lent, stash_from, store)


def _stash_client(setup: RunSetup, rank: int, group: dist.ProcessGroup | None) -> StashClient | None:
    """The stash of a stage whose plan keeps its activations with a lender (None: it keeps them)."""
    lender = setup.loans.stashes.get(rank) if setup.loans is not None else None
    if lender is None or group is None:
        return None
    return StashClient(lender[0], lender[1], group, setup.options.timeout)


def _harvest_result(built: StageBuild, ledger: WeightLedger, streamer: Streamer | None, server: LenderServer | None,
                    timeout: float) -> dict[str, Any]:
    """What this stage fetched and lent, and the weight bytes it held (measured from the tensors)."""
    borrowed = sum(spec.nbytes for spec in built.fetches)
    return {"memory": {**ledger.as_dict(), "borrowed": borrowed, "without_loans": ledger.home + borrowed,
                       "rss_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024},
            "fetched": streamer.stats() if streamer is not None else None,
            "layers": [spec.layer for spec in built.fetches],
            "served": server.join(timeout) if server is not None else None}


def describe_failure(exc: BaseException, where: str) -> dict[str, Any]:
    """What the launcher needs to know about a failed stage: the message, its origin, the traceback."""
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in chain:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    forward = next((e for e in chain if isinstance(e, ForwardError)), None)
    if forward is not None:
        message = f"{forward} (while {where})"
    else:
        message = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''} " \
                  f"(while {where})"
    return {"message": message, "origin": "forward" if forward is not None else "other",
            "details": "".join(traceback.format_exception(exc))}
