"""What the wake probe measures in real pipelines: two processes on two cores talking over gloo.

:mod:`pipeplan.costmodel.wake_probe` times a reference workload alone on one core; a stage in a
pipeline also waits for messages, hands its outputs over, and runs beside the other stage.  Three
measurements here run the probe's reference workload (:class:`ReferenceBlocks`) the way the
executor runs a plan, and each fits one part of the :class:`~pipeplan.costmodel.wake.WakeModel`:

- :func:`measure_stage_extra`: what a stage's microbatch takes beyond its module's back-to-back
  time on idle cores (``stage_fixed``, ``stage_rate``);
- :func:`measure_recv_delay`: how much later a message reaches a process on a loaded core
  (``recv_delay``);
- :func:`measure_pipeline_credit`: how much of the full-speed credit measured after a sleep a stage
  on a loaded core earns in a pipeline (``pipeline_credit``).  On the project's Zen 4 VM a stage
  beside two compute co-runners that waited for its input earned a fifth to a third of it: the sleep
  loop of the grid wakes a task that has used less than its share of the core, while a stage in a
  pipeline keeps coming back to it, and its gloo threads share the core too (benchmarks/README.md,
  "A loaded stage's credit in a pipeline").
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.profile import pinned
from pipeplan.costmodel.wake import WakeError, WakeModel, least_squares, log_rms

if TYPE_CHECKING:
    from pipeplan.planner.plan import Plan

__all__ = ["CREDIT_PIPELINES", "CreditSample", "ReferenceBlocks", "fit_pipeline_credit", "measure_pipeline_credit",
           "measure_recv_delay", "measure_stage_extra", "replay_loaded_stage"]

# (blocks before the cut, blocks after it, rows, which stage is loaded): short and long stages, small
# and larger messages, the loaded stage sending (first) or receiving (last)
CREDIT_PIPELINES = ((2, 6, 32, 0), (4, 4, 32, 0), (4, 4, 128, 0), (6, 2, 64, 0),
                    (6, 2, 32, 1), (4, 4, 32, 1), (6, 2, 128, 1), (2, 6, 64, 1))
_SHARES = [i / 16 for i in range(17)]  # shares of the credit tried by the fit
_MICROBATCHES = 4


class ReferenceBlocks(nn.Module):
    """The probe's reference workload as a model: ``n`` MLP blocks (256 → 1024 → 256, GELU)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
                                      for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def measure_stage_extra(cores: Sequence[int], blocks: Sequence[int] = (2, 4, 8), batches: int = 16,
                        progress: Callable[[str], None] | None = None, rounds: int = 4) -> tuple[float, float]:
    """What a pipeline stage's microbatch takes beyond its module's back-to-back time, on two idle
    cores, as ``(fixed seconds, rate)``: extra = fixed + rate × back-to-back time.

    The reference workload of each size in ``blocks`` is cut in two and run for real by the executor
    (gloo, one process per core, gpipe, 4 microbatches); each stage's measured compute is set against
    the same stage module timed back to back in this process on the same core, and the two terms are
    fitted to the pairs of ``rounds`` rounds of all sizes (least squares, each ≥ 0: one round's rate
    ranged from 8% to 27% on the project's Zen 4 VM, so a few are pooled).  The fixed part is the
    stage coming back to its module after its schedule's own work (sub-millisecond stages feel it);
    the rate, running beside the other stage, which shares the machine's caches and memory (issue 16)."""
    from pipeplan.costmodel.cluster_detect import write_core_cluster
    from pipeplan.executor import RunOptions, run_plan

    _two_cores(cores)
    alone_times: list[float] = []
    extra: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        spec = write_core_cluster(Path(folder) / "wake.yaml", 2, name="wake-probe", cores=list(cores[:2]))
        for n in [n for _ in range(rounds) for n in blocks]:
            pipe = _ReferencePipeline(n, max(n // 2, 1), 32, str(spec))
            report = run_plan(pipe.plan, pipe.model, (pipe.x,),
                              RunOptions(batches=batches, cluster=str(spec), calibrate=False))
            assert report is not None  # run here, not under torchrun
            inputs: tuple[torch.Tensor, ...] = (pipe.x,)
            for stage, module, core in zip(report.stages, pipe.modules, cores, strict=False):
                alone, inputs = _back_to_back(module, inputs, core)
                alone_times.append(alone)
                extra.append(stage.measured["compute"] - alone)
            if progress:
                shown = ", ".join(f"{e * 1e3:+.3f}" for e in extra[-2:])
                progress(f"pipeline of {n} blocks: {shown} ms per microbatch")
    return least_squares(alone_times, extra)


def _back_to_back(module: nn.Module, inputs: tuple[torch.Tensor, ...], core: int,
                  seconds: float = 0.3) -> tuple[float, tuple[torch.Tensor, ...]]:
    """Mean seconds per call of ``module`` on ``inputs`` back to back on ``core`` (one thread), and its outputs."""
    with pinned([core], 1), torch.inference_mode():
        out = module(*inputs)
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds or calls < 10:
            module(*inputs)
            calls += 1
        took = (time.perf_counter() - start) / calls
    return took, tuple(out) if isinstance(out, (tuple, list)) else (out,)


def measure_recv_delay(levels: Sequence[Contention], cores: Sequence[int], messages: int = 60) -> dict[str, float]:
    """Mean extra seconds a small pipeline message (two tensors, like a stage's input) takes to reach a
    process on a core under each of ``levels`` over an idle one: two real processes talking over gloo,
    the receiver on ``cores[0]`` beside the load's co-runners, the sender on ``cores[1]`` posting one
    message every 10 ms.  A stage on a core it shares with co-runners wakes for its input (gloo's
    thread, then the stage's) only when the scheduler lets it, which its compute figures never show."""
    import multiprocessing

    from pipeplan.executor.launch import free_port

    _two_cores(cores, "receive")
    ctx = multiprocessing.get_context("spawn")
    means: dict[str, float] = {}
    for level in [None, *levels]:
        port = free_port()  # this pair's rendezvous
        queue = ctx.Queue()
        text = level.describe() if level is not None else "idle"
        procs = [ctx.Process(target=_recv_pair, args=(rank, text, list(cores[:2]), port, messages, queue))
                 for rank in range(2)]
        for proc in procs:
            proc.start()
        try:
            means[text] = queue.get(timeout=120)
        finally:
            for proc in procs:
                proc.join(timeout=30)
                if proc.is_alive():
                    proc.kill()
    idle = means.pop("idle")
    return {name: max(mean - idle, 0.0) for name, mean in means.items()}


def _recv_pair(rank: int, level: str, cores: list[int], port: int, messages: int, queue: Any) -> None:
    """One side of :func:`measure_recv_delay` (rank 0 receives beside the load, rank 1 sends)."""
    import torch.distributed as dist

    from pipeplan.costmodel.corunners import CoRunners

    os.sched_setaffinity(0, {cores[rank]})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    load = CoRunners(Contention.parse(level), cores=[cores[0]]).start() if rank == 0 and level != "idle" else None
    try:
        stamp, payload, delays = torch.zeros(1, dtype=torch.float64), torch.zeros(2, 64, 128), []
        dist.barrier()
        for _ in range(messages + 5):
            if rank == 1:
                time.sleep(0.01)
                stamp[0] = time.perf_counter()  # one monotonic clock for both processes on one host
                dist.send(stamp, 0)
                dist.send(payload, 0)
            else:
                dist.recv(stamp, 1)
                dist.recv(payload, 1)
                delays.append(time.perf_counter() - float(stamp[0]))
        if rank == 0:
            queue.put(statistics.fmean(delays[5:]))
        dist.barrier()
    finally:
        if load is not None:
            load.stop()
        dist.destroy_process_group()


class _ReferencePipeline:
    """``blocks`` reference blocks on ``rows`` rows, cut after ``before`` blocks into a two-stage plan
    on the cluster ``spec`` (devices cpu0 then cpu1), with each stage's module."""

    def __init__(self, blocks: int, before: int, rows: int, spec: str) -> None:
        from pipeplan.costmodel.capture import capture_program
        from pipeplan.costmodel.cluster import load_cluster
        from pipeplan.executor.stages import split_program
        from pipeplan.planner.plan import Certificate
        from pipeplan.planner.problem import PlanOptions, Problem
        from pipeplan.planner.simulate import make_plan

        gen = torch.Generator().manual_seed(0)
        torch.manual_seed(0)
        self.model, self.x = ReferenceBlocks(blocks).eval(), torch.randn(rows, 256, generator=gen)
        captured = capture_program(self.model, (self.x,))
        names = [layer.name for layer in captured.graph.layers]
        cut = 3 * before  # a block is three layers: cut between blocks
        assignment = {name: "cpu0" if i < cut else "cpu1" for i, name in enumerate(names)}
        problem = Problem(captured.graph, load_cluster(spec), options=PlanOptions(microbatches=_MICROBATCHES))
        self.plan: Plan = make_plan(problem, assignment, Certificate("wake-probe", "HEURISTIC", 0.0),
                                    order=["cpu0", "cpu1"])
        self.modules = [p.module for p in split_program(captured, [names[:cut], names[cut:]])]


def _two_cores(cores: Sequence[int], part: str = "pipeline") -> None:
    if len(cores) < 2 or cores[0] == cores[1]:
        raise WakeError(f"the {part} part of the wake probe needs two distinct cores, got {list(cores)}")


@dataclass(frozen=True)
class CreditSample:
    """One reference pipeline run with a load on one stage's core: each stage's back-to-back compute
    idle and under the load, its input's transfer, which stage was loaded, and each stage's mean
    compute per microbatch as run (seconds)."""

    level: str
    loaded_stage: int
    idle: tuple[float, float]
    loaded: tuple[float, float]
    recv: tuple[float, float]
    measured: tuple[float, float]
    batches: int


def measure_pipeline_credit(model: WakeModel, levels: Sequence[Contention], cores: Sequence[int],
                            pipelines: Sequence[tuple[int, int, int, int]] = CREDIT_PIPELINES, batches: int = 8,
                            progress: Callable[[str], None] | None = None) -> tuple[dict[str, float],
                                                                                    list[CreditSample]]:
    """Run each reference pipeline in ``pipelines`` under each load in ``levels`` on one of its stages'
    cores, and fit, per load, the share of ``model``'s credit that its replay needs to match the
    loaded stage's compute as run (:func:`fit_pipeline_credit`).  Returns the shares and the samples.

    Each stage's module is timed back to back on its core, idle and (the loaded one) beside the
    load's co-runners, right before the executor runs the pipeline (gloo, gpipe, 4 microbatches)
    with the co-runners on that core."""
    from pipeplan.costmodel.cluster_detect import write_core_cluster
    from pipeplan.costmodel.corunners import CoRunners
    from pipeplan.executor import RunOptions, run_plan

    _two_cores(cores)
    samples: list[CreditSample] = []
    with tempfile.TemporaryDirectory() as folder:
        spec = write_core_cluster(Path(folder) / "wake.yaml", 2, name="wake-probe", cores=list(cores[:2]))
        for level in levels:
            for before, after, rows, loaded_stage in pipelines:
                pipe = _ReferencePipeline(before + after, before, rows, str(spec))
                idle: list[float] = []
                loaded: list[float] = []
                inputs: tuple[torch.Tensor, ...] = (pipe.x,)
                for k, (module, core) in enumerate(zip(pipe.modules, cores, strict=False)):
                    alone, outputs = _back_to_back(module, inputs, core)
                    shared = alone
                    if k == loaded_stage:
                        with CoRunners(level, cores=[core]):
                            time.sleep(0.3)  # let the co-runners reach their steady state
                            shared, _ = _back_to_back(module, inputs, core, seconds=0.6)
                    idle.append(alone)
                    loaded.append(shared)
                    inputs = outputs
                device = f"cpu{loaded_stage}"
                report = run_plan(pipe.plan, pipe.model, (pipe.x,),
                                  RunOptions(batches=batches, cluster=str(spec), calibrate=False,
                                             loads={device: level.describe()}))
                assert report is not None  # run here, not under torchrun
                sample = CreditSample(level.describe(), loaded_stage, (idle[0], idle[1]), (loaded[0], loaded[1]),
                                      (pipe.plan.stages[0].recv, pipe.plan.stages[1].recv),
                                      (report.stages[0].measured["compute"], report.stages[1].measured["compute"]),
                                      batches)
                samples.append(sample)
                if progress:
                    progress(f"{sample.level}, stage {loaded_stage + 1} of {before}+{after} blocks loaded: "
                             f"{sample.measured[loaded_stage] * 1e3:.2f} ms as run, "
                             f"{sample.loaded[loaded_stage] * 1e3:.2f} back to back")
    return fit_pipeline_credit(model, samples), samples


def fit_pipeline_credit(model: WakeModel, samples: Sequence[CreditSample]) -> dict[str, float]:
    """Per load, the share of ``model``'s credit (0 to 1 in sixteenths) whose replay of the samples
    (:func:`pipeplan.executor.as_run.simulate_as_run`) comes closest to the loaded stages' computes as
    run (log RMS); a tie keeps the larger share.  Keyed by the probed load whose credit the replay
    reads (:meth:`WakeModel.level_for`); a load with no credit to take a share of is refused."""
    groups: dict[str, list[CreditSample]] = {}
    for s in samples:
        probed = model.level_for(Contention.parse(s.level))
        if probed is None:
            raise WakeError(f"the wake model has no credit for load {s.level!r} (probed: "
                            f"{', '.join(model.credit) or 'none'}): nothing to take a share of")
        groups.setdefault(probed, []).append(s)
    shares: dict[str, float] = {}
    for probed, mine in sorted(groups.items()):
        best = (float("inf"), 1.0)
        for share in reversed(_SHARES):
            trial = replace(model, pipeline_credit={**model.pipeline_credit, probed: share})
            err = log_rms([(replay_loaded_stage(trial, s), s.measured[s.loaded_stage]) for s in mine])
            if err < best[0] - 1e-9:
                best = (err, share)
        shares[probed] = best[1]
    return shares


def replay_loaded_stage(model: WakeModel, sample: CreditSample) -> float:
    """The loaded stage's compute per microbatch in ``model``'s replay of ``sample``'s run
    (:func:`pipeplan.executor.as_run.simulate_as_run`, as the executor ran it: gpipe, 4 microbatches)."""
    from pipeplan.executor.as_run import StageLoad, simulate_as_run

    load = Contention.parse(sample.level)
    stages = [StageLoad(sample.idle[k], sample.loaded[k], sample.recv[k], load if k == sample.loaded_stage else None)
              for k in range(2)]
    replay = simulate_as_run(model, stages, _MICROBATCHES, "gpipe", batches=sample.batches, warmup=1)
    return replay.computes[sample.loaded_stage]
