"""Worker processes that run solves, behind a bounded queue, watched by one supervisor thread.

Solving (CP-SAT) and capturing zoo models (torch) never run in the server's event loop or its
threads: each task goes to an idle worker process over a pipe.  The supervisor

- hands queued tasks to workers that have said they are ready (their imports done);
- notices a worker that dies (its process sentinel fires) or overruns its task's time, fails that
  task with the reason (the signal, the exit code, the time limit), and starts a fresh worker;
- replaces a worker between tasks once it has run ``max_jobs`` of them or holds more than
  ``max_rss`` bytes (Python rarely gives freed memory back: a worker that once built a big model
  keeps its high-water mark), or after a task ran out of memory;
- cancels a queued task (dropped) or a running one (its worker is killed and replaced);
- runs the tasks' ``on_start``/``on_done`` callbacks on one separate thread, in order, so that
  slow bookkeeping (database writes) never delays supervision.

A full queue raises :class:`QueueFull` at once, which the service answers with 503.  Workers are
started with ``spawn``: the server has threads by the time a worker is replaced, and forking a
threaded process is unsafe.  Each worker limits its own memory (``Limits.memory``, see
:func:`pipeplan.api.worker.serve`); the time limit is the supervisor's, so it covers everything a task does.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from pipeplan.api.tasks import Limits, Outcome, PoolStats, QueueFull, Reply, Task, resident_bytes

__all__ = ["Limits", "Outcome", "PoolStats", "QueueFull", "Task", "WorkerPool", "resident_bytes"]

log = logging.getLogger(__name__)


@dataclass
class _Worker:
    process: Any  # multiprocessing.context.SpawnProcess
    conn: Connection
    ready: bool = False
    task: Task | None = None
    started: float = 0.0
    stop_reason: str | None = None  # set when the supervisor kills it
    stop_kind: str = "Timeout"  # the error type its task fails with: Timeout or Cancelled
    tasks_done: int = field(default=0)


class WorkerPool:
    """``size`` worker processes running ``pipeplan.api.worker.serve``; at most ``queue_size`` tasks wait."""

    def __init__(self, size: int, queue_size: int, limits: Limits | None = None, name: str = "solver",
                 log_format: str | None = None) -> None:
        if size < 1 or queue_size < 1:
            raise ValueError(f"a pool needs at least one worker and one queue slot, got {size} and {queue_size}")
        self.size = size
        self.queue_size = queue_size
        self.limits = limits or Limits()
        self.name = name
        self.log_format = log_format  # the workers' log lines: json or text (None: Python's defaults)
        self._retiring: list[_Worker] = []  # told to stop after their last task; joined as they exit
        self._recycled = 0
        self._owed = 0  # successors of recycled workers still to start
        self._started = False
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._queue: deque[Task] = deque()
        self._workers: list[_Worker] = []
        self._restarts = 0
        self._stillborn = 0  # workers in a row that died before they were ready
        self._next_spawn = 0.0  # monotonic time before which no worker is started (back-off)
        self._closing = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._callbacks = ThreadPoolExecutor(1, thread_name_prefix="pipeplan-jobs")
        self._thread = threading.Thread(target=self._supervise, name=f"pipeplan-{name}-pool", daemon=True)

    # -- public ---------------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            self._workers = [self._spawn() for _ in range(self.size)]
        self._thread.start()

    def submit(self, task: Task) -> None:
        """Queue ``task``; raise :class:`QueueFull` when the queue is at its bound."""
        with self._lock:
            if self._closing:
                raise QueueFull("the worker pool is shutting down")
            if len(self._queue) >= self.queue_size:
                raise QueueFull(f"all {self.size} workers are busy and {len(self._queue)} jobs are waiting")
            self._queue.append(task)
        self._wake()

    def has_room(self) -> bool:
        with self._lock:
            return len(self._queue) < self.queue_size and not self._closing

    def stats(self) -> PoolStats:
        with self._lock:
            alive = [w for w in self._workers if w.process.is_alive()]
            return PoolStats(self.size, len(alive), sum(w.task is not None for w in self._workers), len(self._queue),
                             self.queue_size, self._restarts, sum(w.ready for w in alive), self._recycled,
                             self._started)

    def cancel(self, task_id: str, why: str = "cancelled") -> bool:
        """Fail task ``task_id`` with ``Cancelled``: dropped from the queue, or its worker killed (and
        replaced).  False when this pool does not hold it (unknown, or finished already)."""
        with self._lock:
            for task in self._queue:
                if task.id == task_id:
                    self._queue.remove(task)
                    self._finish(task, Outcome(False, error=why, error_type="Cancelled"))
                    return True
            for w in self._workers:
                if w.task is not None and w.task.id == task_id and w.stop_reason is None:
                    w.stop_reason, w.stop_kind = why, "Cancelled"
                    w.process.kill()
                    return True
        self._wake()
        return False

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in self._workers]

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers (queued tasks are dropped: the service marks their jobs at restart)."""
        with self._lock:
            self._closing = True
            self._queue.clear()
            workers = list(self._workers) + self._retiring
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout)
        for w in workers:
            if w.task is not None:  # its job is lost either way (marked failed at the next start)
                w.process.kill()
                continue
            with contextlib.suppress(OSError, ValueError):
                w.conn.send(None)
        deadline = time.monotonic() + timeout
        for w in workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join(1.0)
            w.conn.close()
        self._callbacks.shutdown(wait=True)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- supervision ----------------------------------------------------------------------------

    def _spawn(self) -> _Worker:
        from pipeplan.api.worker import serve

        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=serve, args=(child, self.limits.memory, self.log_format),
                                    name=f"pipeplan-{self.name}", daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _supervise(self) -> None:
        while not self._closing:
            try:
                self._step()
            except Exception:  # the pool must outlive any one mishap, or every later job would hang
                log.exception("worker pool supervision failed; going on")
                time.sleep(0.5)

    def _step(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._replenish()
            self._dispatch()
            workers = list(self._workers)
            retiring = list(self._retiring)
            timeout = self._next_deadline()
            if len(self._workers) < self.size:
                timeout = min(timeout, 1.0)  # try again soon to start the missing workers
        waitables: list[Any] = [self._wake_r]
        for w in workers:
            waitables += [w.conn, w.process.sentinel]
        waitables += [w.process.sentinel for w in retiring]
        ready = wait(waitables, timeout)
        if self._wake_r in ready:
            with contextlib.suppress(BlockingIOError, OSError):
                while os.read(self._wake_r, 4096):
                    pass
        with self._lock:
            for w in workers:
                if w.conn in ready:
                    self._receive(w)
                if w.process.sentinel in ready or not w.process.is_alive():
                    self._bury(w)
            for w in retiring:
                if w.process.sentinel in ready:
                    self._retired(w)
            self._enforce_deadlines()

    def _replenish(self) -> None:
        """Start workers up to the pool's size (after deaths); a failure to start is retried, later
        and later while workers keep dying before they are ready (a broken installation)."""
        if time.monotonic() < self._next_spawn:
            return
        while len(self._workers) < self.size and not self._closing:
            try:
                self._workers.append(self._spawn())
            except OSError as exc:
                log.error("cannot start a worker process (%s); retrying", exc)
                return
            if self._owed:  # the successor of a recycled worker: not a restart after a death
                self._owed -= 1
            else:
                self._restarts += 1

    def _dispatch(self) -> None:
        for w in self._workers:
            if not self._queue:
                return
            if w.ready and w.task is None and w.process.is_alive():
                task = self._queue.popleft()
                try:
                    w.conn.send((task.id, task.kind, task.payload, task.request_id))
                except (OSError, ValueError):  # the worker died a moment ago: the task waits for another
                    self._queue.appendleft(task)
                    continue
                w.task, w.started = task, time.monotonic()
                if task.on_start is not None:
                    self._callbacks.submit(_guarded, task.on_start, task, w.process.pid)

    def _next_deadline(self) -> float:
        now = time.monotonic()
        left = [w.started + w.task.timeout - now for w in self._workers if w.task is not None]
        return max(0.0, min(left, default=5.0))

    def _receive(self, w: _Worker) -> None:
        try:
            message = w.conn.recv()
        except (EOFError, OSError):
            return  # the process is gone; its sentinel reports it
        if message[0] == "ready":
            w.ready, self._stillborn, self._started = True, 0, True
            return
        reply: Reply = message
        task = w.task
        if task is None or task.id != reply.task_id:
            log.warning("worker %s answered for task %s it was not given", w.process.pid, reply.task_id)
            return
        w.task, w.tasks_done = None, w.tasks_done + 1
        self._finish(task, reply.outcome)
        why = self._worn_out(w, reply.outcome.error_type)
        if why is not None:
            self._retire(w, why)

    def _worn_out(self, w: _Worker, error_type: str | None) -> str | None:
        """Why worker ``w`` should be replaced now, between tasks; None: it may go on."""
        if error_type == "MemoryLimit":
            return "its task ran out of memory"
        if self.limits.max_jobs and w.tasks_done >= self.limits.max_jobs:
            return f"it has run {w.tasks_done} tasks"
        if self.limits.max_rss:
            rss = resident_bytes(w.process.pid)
            if rss is not None and rss > self.limits.max_rss:
                return f"it holds {rss} resident bytes, over {self.limits.max_rss}"
        return None

    def _retire(self, w: _Worker, why: str) -> None:
        """Ask idle worker ``w`` to exit and start its successor at once (the next ``_replenish``)."""
        log.info("replacing %s worker %s: %s", self.name, w.process.pid, why)
        with contextlib.suppress(OSError, ValueError):
            w.conn.send(None)
        self._workers.remove(w)
        self._retiring.append(w)
        self._recycled += 1
        self._owed += 1

    def _retired(self, w: _Worker) -> None:
        w.process.join(0.1)
        if w.process.is_alive():
            return
        with contextlib.suppress(OSError):
            w.conn.close()
        self._retiring.remove(w)

    def _bury(self, w: _Worker) -> None:
        """A worker has exited: fail its task with the reason and put a fresh worker in its place."""
        w.process.join(0.1)
        if w.process.is_alive():
            return
        if w not in self._workers:
            return
        code = w.process.exitcode
        if w.stop_reason:
            why, kind = w.stop_reason, w.stop_kind
        elif code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            why, kind = f"was killed by signal {name} (out of memory, or stopped from outside)", "WorkerDied"
            if self.limits.memory and name in ("SIGABRT", "SIGSEGV", "SIGBUS"):
                # Native code (CP-SAT, torch) aborts where Python would raise MemoryError.
                why += f"; its memory limit is {self.limits.memory} bytes (PIPEPLAN_JOB_MEMORY)"
        else:
            why, kind = f"exited with status {code}", "WorkerDied"
        if w.task is not None:
            if kind == "Cancelled":
                log.info("worker %s stopped: %s %s was cancelled", w.process.pid, w.task.kind, w.task.id)
                error = why
            else:
                log.error("worker %s died while running %s %s: %s", w.process.pid, w.task.kind, w.task.id, why)
                error = f"the worker process (pid {w.process.pid}) {why} while running this {w.task.kind} job"
            self._finish(w.task, Outcome(False, error=error, error_type=kind))
            w.task = None
        else:
            log.warning("idle worker %s %s; starting another", w.process.pid, why)
        if not w.ready:
            self._stillborn += 1
            self._next_spawn = time.monotonic() + min(30.0, 0.5 * 2 ** self._stillborn)
        with contextlib.suppress(OSError):
            w.conn.close()
        self._workers.remove(w)  # _replenish starts its successor

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for w in self._workers:
            if w.task is not None and w.stop_reason is None and now - w.started > w.task.timeout:
                note = f" ({w.task.timeout_note})" if w.task.timeout_note else ""
                w.stop_reason = f"ran past its time limit of {w.task.timeout:g} s{note} and was stopped"
                w.stop_kind = "Timeout"
                w.process.kill()

    def _finish(self, task: Task, outcome: Outcome) -> None:
        if task.on_done is not None:
            self._callbacks.submit(_guarded, task.on_done, task, outcome)


def _guarded(fn: Callable[..., None], *args: Any) -> None:
    # A failing callback must not stop the callbacks thread: later jobs still need theirs.
    try:
        fn(*args)
    except Exception:
        log.exception("job callback %s failed", getattr(fn, "__name__", fn))
