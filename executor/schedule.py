"""Forward-only pipeline schedules on ``torch.distributed.pipelining`` that time every step.

Both schedules drive a :class:`~torch.distributed.pipelining.PipelineStage` through the same
actions as ``ScheduleGPipe``'s forward half — receive microbatch i, run it, post its sends — and
record, for every microbatch, when the stage started and finished waiting for its input, running
it, and posting its output, on one clock shared by the stage processes:

``gpipe``
    fill-drain per batch, ``ScheduleGPipe``'s forward order: the sends of the batch are waited for at
    its end.  Unlike ``ScheduleGPipe``, which posts the receive of microbatch i when the stage is
    ready for it, the receive of i + 1 is posted before i runs, as ``1f1b`` does: a send posted
    before its receive leaves the sender's core only when the sender's communication thread gets
    that core, and the sender is by then computing its next microbatch — on CPU cores gpipe's
    stages of 0.5–2 ms spent as long in their transfers as in compute, and reference pipelines ran
    3–53% faster with the receive posted early in 14 of 15 cases (``benchmarks/README.md``, issue 16);
``1f1b``
    the forward-only steady state of 1F1B (PipeDream-Flush, Narayanan et al., 2021): with no
    backward pass the order of work is GPipe's, and what 1F1B changes is how much a stage holds.
    A stage keeps at most ``in_flight`` microbatches' outputs unsent (default: the stages after it,
    1F1B's warm-up depth) and frees each one as soon as it is delivered, so activation memory is
    bounded by the pipeline's depth instead of the number of microbatches.  It helps when M is
    large or memory is tight.

Both are :class:`TimedSchedule`, a ``PipelineScheduleSingle`` that implements
``_step_microbatches``, the extension point that class documents.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import PipelineScheduleSingle

__all__ = ["SCHEDULES", "MicrobatchTiming", "ScheduleName", "TimedSchedule", "run_batches"]

ScheduleName = Literal["gpipe", "1f1b"]
SCHEDULES: tuple[ScheduleName, ...] = ("gpipe", "1f1b")


@dataclass
class MicrobatchTiming:
    """When one stage did what for one microbatch, in seconds on the run's shared clock.

    ``recv_start`` is when the stage began *waiting* for the microbatch's input (its receive was
    posted before the previous microbatch ran, or for a batch's first when the batch began);
    ``send_end`` is when its sends were posted, plus any wait for earlier sends that the stage had
    to do before going on (``send_wait``).
    """

    batch: int
    microbatch: int
    recv_start: float
    recv_end: float
    compute_start: float
    compute_end: float
    send_end: float
    send_wait: float = 0.0

    def as_row(self) -> list[float]:
        return [self.batch, self.microbatch, self.recv_start, self.recv_end, self.compute_start,
                self.compute_end, self.send_end, self.send_wait]


def _post(ops: list[dist.P2POp]) -> list[dist.Work]:
    """Post each operation on its own, in order: one peer per direction, so order is the match."""
    works: list[dist.Work] = []
    for op in ops:
        if op.op is dist.isend:
            work = dist.isend(op.tensor, group=op.group, tag=op.tag, group_dst=op.group_peer)
        else:
            work = dist.irecv(op.tensor, group=op.group, tag=op.tag, group_src=op.group_peer)
        if work is not None:  # None only for a rank outside the group, which a stage never is
            works.append(work)
    return works


def _wait(works: list[dist.Work]) -> None:
    for work in works:
        work.wait()


class TimedSchedule(PipelineScheduleSingle):
    """A forward-only schedule for one stage that records a :class:`MicrobatchTiming` per microbatch.

    ``clock`` returns seconds on the clock shared by all stages; ``sync`` (CUDA) makes the device's
    queued work finish so that the clock sees it.  ``timings`` grows by one entry per microbatch;
    ``batch`` counts the calls of ``step``.  ``hold_sends``: post a batch's sends only once its last
    microbatch has run, for a stage whose outputs are all computed then
    (:class:`pipeplan.executor.layer_major.LayerMajor`).
    """

    def __init__(self, stage: PipelineStage, n_microbatches: int, *, schedule: ScheduleName = "gpipe",
                 in_flight: int | None = None, clock: Callable[[], float] = time.perf_counter,
                 sync: Callable[[], None] | None = None, hold_sends: bool = False) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {schedule!r}: choose one of {', '.join(SCHEDULES)}")
        super().__init__(stage, n_microbatches)
        self.schedule = schedule
        depth = stage.num_stages - stage.stage_index - 1
        self.in_flight = in_flight if in_flight is not None else max(1, depth)
        self.clock = clock
        self.sync = sync or (lambda: None)
        self.hold_sends = hold_sends
        self.timings: list[MicrobatchTiming] = []
        self.batch = 0
        self.doing: tuple[str, int, int] = ("", 0, 0)  # what the stage is doing to which microbatch, for errors

    def _step_microbatches(self, arg_mbs: list[Any] | None = None, kwarg_mbs: list[Any] | None = None,
                           target_mbs: list[Any] | None = None, losses: list[Any] | None = None,
                           return_outputs: bool = True, loss_kwargs: dict[str, Any] | None = None) -> None:
        if target_mbs is not None or losses is not None:
            raise RuntimeError("a forward-only schedule computes no loss")
        arg_mbs, kwarg_mbs = self._check_inputs(arg_mbs, kwarg_mbs, target_mbs, losses)
        self.doing = ("inferring shapes from", self.batch, 0)  # the first step runs microbatch 0 once more
        self._initialize_stage(arg_mbs[0], kwarg_mbs[0])
        stage, clock, m = self._stage, self.clock, self._n_microbatches
        bounded = self.schedule == "1f1b"  # at most in_flight sends untaken; gpipe waits at the batch's end
        pending: deque[tuple[int, list[dist.Work]]] = deque()
        posted = _post(stage.get_fwd_recv_ops(0))
        for i in range(m):
            recv_start = clock()
            self.doing = ("receiving", self.batch, i)
            _wait(posted)
            self.sync()
            recv_end = clock()
            if i + 1 < m:  # posted before microbatch i runs, so that the transfer overlaps its compute
                posted = _post(stage.get_fwd_recv_ops(i + 1))
            compute_start = clock()
            self.doing = ("running", self.batch, i)
            stage.forward_one_chunk(i, arg_mbs[i], kwarg_mbs[i], save_forward_output=return_outputs)
            self.sync()
            compute_end = clock()
            self.doing = ("sending", self.batch, i)
            # held: the batch's outputs are all written when its last microbatch has run (LayerMajor)
            ready = (range(m) if i == m - 1 else range(0)) if self.hold_sends else range(i, i + 1)
            for j in ready:
                pending.append((j, _post(stage.get_fwd_send_ops(j))))
            posted_at = clock()
            while bounded and len(pending) > self.in_flight:
                done, works = pending.popleft()
                _wait(works)
                stage.fwd_cache.pop(done, None)  # delivered: the output need not be kept
            if i == m - 1:  # GPipe waits for the batch's sends at its end; so does 1F1B's flush
                while pending:
                    _wait(pending.popleft()[1])
                self.sync()
            send_end = clock()
            self.timings.append(MicrobatchTiming(self.batch, i, recv_start, recv_end, compute_start, compute_end,
                                                 send_end, send_end - posted_at))
        self.batch += 1
        self.doing = ("", 0, 0)


def run_batches(schedule: TimedSchedule, batches: list[tuple[Any, ...]], keep: int = 0) -> list[Any]:
    """Run each batch through ``schedule`` in inference mode; on the last stage, return the outputs
    of the first ``keep`` batches (the others are not even merged).

    Inference mode, not just ``no_grad``: it also skips the version counters and view tracking that
    autograd would need, which cost transformers' many small operators 5–8% of a stage's compute (Qwen3-Next
    15%; 2026-11-29, the model-207 Xeon), and it is how ``pipeplan profile`` times the layers a plan is priced
    with."""
    outputs: list[Any] = []
    with torch.inference_mode():
        for b, args in enumerate(batches):
            out = schedule.step(*args, return_outputs=b < keep)
            if b < keep and out is not None:
                outputs.append(out)
    return outputs
