"""One stage process of a deployment: serve microbatches until told to stop.

The process is set up as a run's (:mod:`pipeplan.executor.worker`: pinned, the same ``PipelineStage`` with
static shapes, the same :class:`~pipeplan.executor.schedule.TimedSchedule`), but loops on one microbatch per
step instead of running a fixed batch count.  What comes next travels as a header down a gloo
group of its own, ahead of the activations (apart from them, so a header never matches an
activation's receive):

- stage 0 reads ``(step, inputs)`` or a stop from the deployment's pipe and sends the header on;
  every stage forwards it before computing, so the next stage posts its receive early;
- with nothing to do, stage 0 sends an idle header every quarter of ``timeout``, so that a stage
  waiting for work never hits the process group's timeout, which still catches a real stall;
- a stop header ends every stage after the steps before it: the pipeline drains in order.

Every stage reports each step's timings on its own pipe to the deployment (the last stage with the
outputs), so measurements are live; one row per step, as :class:`MicrobatchTiming.as_row` with the
step as the batch and ``recv_start`` moved back to when the stage began waiting for the header:
waiting for work is idle time, which the deployment's statistics tell apart from transfers.
"""

from __future__ import annotations

import enum
import time
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage

from pipeplan.executor.options import RunSetup
from pipeplan.executor.schedule import TimedSchedule
from pipeplan.executor.worker import Phases, StageBuild, _agree, _devices, _Guarded, pin

__all__ = ["Command", "serve_stage"]


class Command(enum.IntEnum):
    """First element of a header; the second is the step."""

    RUN = 0
    IDLE = 1
    STOP = 2


def _next_from_deployment(inbox: Connection, patience: float) -> tuple[Command, int, tuple[Any, ...]]:
    """Stage 0's next order: ``(RUN, step, inputs)``, ``(STOP, -1, ())``, or IDLE after ``patience`` s."""
    if not inbox.poll(patience):
        return Command.IDLE, -1, ()
    try:
        message = inbox.recv()
    except EOFError:  # the deployment is gone: stop rather than serve nobody
        return Command.STOP, -1, ()
    if message is None:
        return Command.STOP, -1, ()
    step, inputs = message
    return Command.RUN, int(step), tuple(inputs)


def serve_stage(rank: int, setup: RunSetup, init_method: str, phases: Phases, built: StageBuild,
                inbox: Connection | None, outbox: Connection) -> list[dict[str, Any]] | None:
    """Serve stage ``rank`` until a stop header; rank 0 returns every stage's totals, the others None.

    The body :func:`pipeplan.executor.launch.spawn` runs in each process of a deployment.  ``inbox`` (stage 0
    only) brings ``(step, flat inputs)`` and None to stop; ``outbox`` takes ``("ready", rank)`` once,
    then ``("step", rank, row, arrived, outputs)`` per step: ``arrived`` (stage 0 only) is when the
    step's inputs came, ``outputs`` (last stage only) the step's outputs as CPU tensors.
    """
    stage = setup.stages[rank]
    options = setup.options
    world = setup.world_size
    last = rank == world - 1
    pin(stage)
    compute, wire = _devices(setup, stage)
    phases.enter("joining the process group")
    dist.init_process_group(setup.backend, init_method=init_method, rank=rank, world_size=world,
                            timeout=timedelta(seconds=options.timeout))
    try:
        headers = dist.new_group(backend="gloo")
        epoch = _agree(built.fingerprint, headers)
        sync = (lambda: torch.cuda.synchronize(compute)) if compute.type == "cuda" else None
        module = _Guarded(built.module.to(compute), compute, setup.staged, last)
        pipe_stage = PipelineStage(module, rank, world, wire,
                                   input_args=tuple(b.empty() for b in built.input_meta),
                                   output_args=tuple(b.empty() for b in built.output_meta))

        def clock() -> float:
            return time.perf_counter() - epoch

        # One microbatch per step: the pipeline stays full across steps, as requests keep coming.
        schedule = TimedSchedule(pipe_stage, 1, schedule=options.schedule, in_flight=options.in_flight,
                                 clock=clock, sync=sync)
        outbox.send(("ready", rank))
        header = torch.zeros(2, dtype=torch.int64)
        steps, started = 0, clock()
        phases.enter("waiting for requests")
        with torch.no_grad():
            waiting_since = clock()
            while True:
                inputs: tuple[Any, ...] = ()
                if rank == 0:
                    assert inbox is not None
                    command, step, inputs = _next_from_deployment(inbox, options.timeout / 4)
                    header[0], header[1] = int(command), step
                else:
                    dist.recv(header, group=headers, group_src=rank - 1)
                    command, step = Command(int(header[0])), int(header[1])
                arrived = clock()
                if not last:
                    dist.send(header, group=headers, group_dst=rank + 1)
                if command is Command.STOP:
                    break
                if command is Command.IDLE:
                    continue
                phases.current = f"running step {step}"
                inputs = tuple(a.to(compute) if isinstance(a, torch.Tensor) else a for a in inputs)
                out = schedule.step(*inputs)
                timing = schedule.timings.pop()
                timing.recv_start = waiting_since
                outputs = None
                if last:
                    leaves = torch.utils._pytree.tree_leaves(out)
                    outputs = [t.detach().cpu() for t in leaves if isinstance(t, torch.Tensor)]
                outbox.send(("step", rank, timing.as_row(), arrived if rank == 0 else None, outputs))
                steps += 1
                phases.current = "waiting for requests"
                waiting_since = clock()
        phases.enter("gathering the totals")
        total = {"stage": rank, "device": stage.device, "steps": steps, "seconds": clock() - started,
                 "phases": phases.seconds}
        gathered: list[Any] | None = [None] * world if rank == 0 else None
        dist.gather_object(total, gathered, dst=0, group=headers)
        return gathered
    finally:
        dist.destroy_process_group()
