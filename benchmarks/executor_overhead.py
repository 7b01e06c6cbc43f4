"""Executor overhead: ``pipeplan run`` against hand-written torch.distributed.pipelining of the same split.

For each model, one 2-stage split at a module boundary (so that torch's own tracer can make it
too) is run three ways, with the same processes-per-stage, core pinning, thread count, inputs,
microbatches and GPipe schedule:

- ``executor``: :func:`pipeplan.executor.run_plan` (its instrumented forward-only schedule);
- ``torch pipeline()``: hand-written ``pipeline(model, split_spec={...: SplitPoint.BEGINNING})``,
  ``pipe.build_stage`` and ``ScheduleGPipe.step``, timed around the batches and nothing else;
- ``torch + our stages``: hand-written ``PipelineStage`` around the executor's own stage modules,
  driven by ``ScheduleGPipe.step`` (so the split and the schedule can be told apart);
- ``paired``: in one pair of processes, the executor's timed schedule and ``ScheduleGPipe`` take
  turns (ABBA) on the same ``PipelineStage``, one fill-drain batch at a time from a barrier: the
  machine's other work hits both alike, so this isolates the executor's per-batch cost best.

Since 2026-11-24 the executor's gpipe posts the receive of microbatch i + 1 before running i, where
``ScheduleGPipe`` posts it when the stage is ready for it (``pipeplan.executor.schedule``): the
figures of later runs hold that difference of schedule as well as the executor's own cost, and
short stages can come out faster than torch's.

Each run measures the wall time of the same measured batches (after warm-up), from a barrier to
the last stage's end, on the clock the stages share, and the CPU time the stage processes used in
that window (all their threads: compute, gloo, and the executor's own bookkeeping), which other
work on a shared machine disturbs far less than the wall time.  Runs alternate (the order rotates),
and the table gives medians of the repeats; overhead is ``executor / hand-written − 1``.

Run from the repository root: ``.venv/bin/python benchmarks/executor_overhead.py [--markdown]``.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe, SplitPoint, pipeline

from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.cluster_detect import write_core_cluster
from pipeplan.costmodel.zoo import build_model, capture_model
from pipeplan.executor import RunOptions, run_plan
from pipeplan.executor.launch import free_port
from pipeplan.executor.schedule import TimedSchedule
from pipeplan.executor.source import batch_inputs, rebuild
from pipeplan.executor.stages import split_program
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.simulate import make_plan

# model -> (build options, first layer of stage 1: a module boundary torch's tracer can split at)
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "mlp": ({"batch_size": 32}, "net.4", "net.4"),
    "rescnn": ({"batch_size": 8}, "blocks.2.conv1", "blocks.2"),
    "tinygpt": ({"batch_size": 4, "seq_len": 64}, "blocks.2.ln1", "blocks.2"),
}


def _cluster_file(folder: Path) -> tuple[str, str]:
    """``local-cpu`` when its cores are ours to use, else the same spec on the cores we may use."""
    usable = sorted(os.sched_getaffinity(0))
    if {0, 1} <= set(usable):
        return "local-cpu", "local-cpu (cores 0, 1)"
    path = write_core_cluster(folder / "cpu.yaml", 2, name="local-cpu", cores=usable)
    return str(path), f"cores {[usable[k % len(usable)] for k in range(2)]} (cores 0, 1 not all usable here)"


def _plan(model: str, cluster: str, first: str, microbatches: int) -> Plan:
    opts, _, _ = CASES[model]
    graph = capture_model(model, **opts)
    names = [layer.name for layer in graph.layers]
    cut = names.index(first)
    problem = Problem(graph, load_cluster(cluster), options=PlanOptions(microbatches=microbatches))
    assignment = {name: "cpu0" if i < cut else "cpu1" for i, name in enumerate(names)}
    return make_plan(problem, assignment, Certificate("module-boundary", "HEURISTIC", 0.0), order=["cpu0", "cpu1"])


def _inputs(rank: int, example: tuple[Any, ...], microbatches: int, count: int) -> list[Any]:
    """The run's batches, made where they are used (the executor's seeds): tensors handed to a
    process are shared through one file descriptor each, and a process start takes at most 252."""
    return [batch_inputs(example, microbatches, 0, b) if rank == 0 else () for b in range(count)]


def _hand_worker(rank: int, port: int, cores: list[int], payload: bytes, example: tuple[Any, ...],
                 batches: int, microbatches: int, warmup: int, queue: Any) -> None:
    """A hand-written stage process: pin, join, build the stage, run GPipe, time the measured batches."""
    inputs = _inputs(rank, example, microbatches, warmup + batches)
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(len(cores))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    kind, data = pickle.loads(payload)
    if kind == "pipe":
        model, example, split = data
        pipe = pipeline(model, mb_args=example, split_spec={split: SplitPoint.BEGINNING})
        stage = pipe.build_stage(rank, torch.device("cpu"))
    else:
        stage = PipelineStage(data[rank], rank, 2, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, microbatches)
    with torch.no_grad():
        for b in range(warmup):
            schedule.step(*inputs[b]) if rank == 0 else schedule.step()
        dist.barrier()
        start, cpu = time.perf_counter(), time.process_time()
        for b in range(warmup, len(inputs)):
            schedule.step(*inputs[b]) if rank == 0 else schedule.step()
        end, cpu = time.perf_counter(), time.process_time() - cpu
    times: list[Any] = [None, None]
    dist.all_gather_object(times, (start, end, cpu))
    if rank == 0:  # the last stage's end, on the shared clock; CPU seconds of both processes
        queue.put((times[1][1] - min(t[0] for t in times), sum(t[2] for t in times)))
    dist.barrier()
    dist.destroy_process_group()


def _paired_worker(rank: int, port: int, cores: list[int], modules: bytes, example: tuple[Any, ...],
                   batches: int, microbatches: int, warmup: int, queue: Any) -> None:
    """The executor's schedule and ``ScheduleGPipe`` on one ``PipelineStage``, batch by batch in turn.

    Each batch starts at a barrier and is timed alone (fill-drain), so both schedules meet the same
    machine at the same moments: what is left of the difference is the executor's own work.
    """
    inputs = _inputs(rank, example, microbatches, batches)
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(len(cores))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    stage = PipelineStage(pickle.loads(modules)[rank], rank, 2, torch.device("cpu"))
    schedules = {"executor": TimedSchedule(stage, microbatches), "torch": ScheduleGPipe(stage, microbatches)}
    order = list(schedules)
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in schedules}
    with torch.no_grad():
        for b in range(len(inputs)):
            name = order[b % 2] if (b // 2) % 2 == 0 else order[1 - b % 2]  # ABBA: neither always goes first
            dist.barrier()
            start, cpu = time.perf_counter(), time.process_time()
            schedules[name].step(*inputs[b]) if rank == 0 else schedules[name].step()
            end, cpu = time.perf_counter(), time.process_time() - cpu
            if b >= 2 * warmup:
                samples[name].append((start, end, cpu))
    gathered: list[Any] = [None, None]
    dist.all_gather_object(gathered, samples)
    if rank == 0:
        result = {}
        for name in schedules:
            pairs = list(zip(gathered[0][name], gathered[1][name], strict=True))
            result[name] = ([last[1] - min(first[0], last[0]) for first, last in pairs],
                            [first[2] + last[2] for first, last in pairs])
        queue.put(result)
    dist.barrier()
    dist.destroy_process_group()


def _paired_run(plan: Plan, cluster: str, stages: list[Any], batches: int, warmup: int) -> dict[str, Any]:
    rebuilt = rebuild(plan)
    m = plan.options.microbatches
    total = 2 * (warmup + batches)
    result: dict[str, Any] = _two_ranks("paired run", cluster, _paired_worker,
                                        (pickle.dumps(stages), rebuilt.args, total, m, warmup))
    return result


def _two_ranks(what: str, cluster: str, target: Any, args: tuple[Any, ...]) -> Any:
    """Run ``target(rank, port, cores, *args, queue)`` in two processes; rank 0's queued result."""
    spec = load_cluster(cluster)
    ctx = mp.get_context("forkserver")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=target, args=(rank, port, spec.device(f"cpu{rank}").cores, *args, queue))
             for rank in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"{what} failed: exit codes {[p.exitcode for p in procs]}")
    result = queue.get()
    queue.close()
    return result


def _hand_run(plan: Plan, cluster: str, payload: tuple[str, Any], batches: int, warmup: int) -> tuple[float, float]:
    rebuilt = rebuild(plan)
    m = plan.options.microbatches
    wall, cpu = _two_ranks("hand-written run", cluster, _hand_worker,
                           (pickle.dumps(payload), rebuilt.args, batches, m, warmup))
    return float(wall), float(cpu)


def measure(model: str, cluster: str, batches: int, warmup: int, microbatches: int, repeats: int) -> dict[str, Any]:
    opts, first, split = CASES[model]
    plan = _plan(model, cluster, first, microbatches)
    rebuilt = rebuild(plan)
    stages = [s.module for s in split_program(rebuilt.captured, [s.layers for s in plan.stages])]
    built = build_model(model, **opts)
    def executor() -> tuple[float, float]:
        report = run_plan(plan, options=RunOptions(batches=batches, warmup=warmup, check_batches=1, cluster=cluster,
                                                   calibrate=False))
        assert report is not None and report.check is not None and report.check["ok"]
        per_stage = [s.measured["cpu"] * len(s.microbatches) for s in report.stages]
        return report.wall, sum(per_stage)

    runs = {"executor": executor,
            "pipe": lambda: _hand_run(plan, cluster, ("pipe", (built.model, built.args, split)), batches, warmup),
            "stages": lambda: _hand_run(plan, cluster, ("stages", stages), batches, warmup)}
    walls: dict[str, list[float]] = {name: [] for name in runs}
    cpus: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(repeats):  # rotate the order, so that none always runs first after a model switch
        for name in names[r % 3:] + names[: r % 3]:
            wall, cpu = runs[name]()
            walls[name].append(wall)
            cpus[name].append(cpu)
    med = {k: statistics.median(v) for k, v in walls.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpus.items()}
    paired = _paired_run(plan, cluster, stages, batches * repeats, warmup)
    (ours_wall, ours_cpu), (torch_wall, torch_cpu) = paired["executor"], paired["torch"]
    samples = batches * microbatches * plan.batch_size
    return {"model": model, "split": f"{split} (2 stages)", "samples": samples, "walls": walls, "cpus": cpus,
            **med, "vs_pipe": med["executor"] / med["pipe"] - 1, "vs_stages": med["executor"] / med["stages"] - 1,
            "cpu_vs_pipe": cpu_med["executor"] / cpu_med["pipe"] - 1,
            "cpu_vs_stages": cpu_med["executor"] / cpu_med["stages"] - 1,
            "paired_batches": len(ours_wall), "paired_batch_ms": statistics.median(torch_wall) * 1e3,
            "paired_wall": statistics.median(ours_wall) / statistics.median(torch_wall) - 1,
            "paired_cpu": statistics.median(ours_cpu) / statistics.median(torch_cpu) - 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        cluster, where = _cluster_file(Path(folder))
        print(f"2 stages on {where}, 1 thread each, gloo; {args.batches} batches × {args.microbatches} "
              f"microbatches after {args.warmup} warm-up, median of {args.repeats}; torch {torch.__version__}")
        rows = [measure(m, cluster, args.batches, args.warmup, args.microbatches, args.repeats) for m in args.models]
    head = ["model", "split at", "samples", "executor s", "torch pipeline() s", "torch + our stages s",
            "wall vs pipeline()", "wall vs our stages", "CPU vs pipeline()", "CPU vs our stages",
            "paired batches", "batch ms", "paired wall", "paired CPU"]
    lines = [[r["model"], r["split"], str(r["samples"]), f"{r['executor']:.3f}", f"{r['pipe']:.3f}",
              f"{r['stages']:.3f}", *(f"{r[k] * 100:+.1f}%" for k in ("vs_pipe", "vs_stages", "cpu_vs_pipe",
                                                                       "cpu_vs_stages")),
              str(r["paired_batches"]), f"{r['paired_batch_ms']:.1f}",
              *(f"{r[k] * 100:+.1f}%" for k in ("paired_wall", "paired_cpu"))] for r in rows]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|")
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
        for line in lines:
            print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)))
    for r in rows:
        for label, key in (("wall", "walls"), ("CPU", "cpus")):
            print(f"{r['model']}: every run's {label} seconds: " + "; ".join(
                f"{k} {', '.join(f'{w:.3f}' for w in v)}" for k, v in r[key].items()))


if __name__ == "__main__":
    main()
