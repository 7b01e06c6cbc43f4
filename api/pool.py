"""Worker processes that run solves, behind a bounded queue, watched by one supervisor thread.

Solving (CP-SAT) and capturing zoo models (torch) never run in the server's event loop or its
threads: each task goes to an idle worker process over a pipe.  The supervisor

- hands queued tasks to workers that have said they are ready (their imports done);
- notices a worker that dies (its process sentinel fires) or overruns its task's time, fails that
  task with the reason (the signal, the exit code, the time limit), and starts a fresh worker;
- runs the tasks' ``on_start``/``on_done`` callbacks on one separate thread, in order, so that
  slow bookkeeping (database writes) never delays supervision.

A full queue raises :class:`QueueFull` at once, which the service answers with 503.  Workers are
started with ``spawn``: the server has threads by the time a worker is replaced, and forking a
threaded process is unsafe.
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

__all__ = ["Outcome", "PoolStats", "QueueFull", "Task", "WorkerPool"]

log = logging.getLogger(__name__)


class QueueFull(RuntimeError):
    """Every worker is busy and the queue holds as many tasks as it may."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    value: Any = None
    error: str | None = None
    error_type: str | None = None  # the exception's class, or WorkerDied / Timeout
    user_error: bool = False  # the request was wrong (a ValueError): the client's fault, not ours


@dataclass
class Task:
    id: str
    kind: str  # what api.worker.run does: plan, compare, models
    payload: dict[str, Any]
    timeout: float  # seconds a worker may spend on it before it is killed
    on_start: Callable[[Task, int], None] | None = None  # (task, worker pid)
    on_done: Callable[[Task, Outcome], None] | None = None


@dataclass(frozen=True)
class PoolStats:
    size: int
    alive: int
    busy: int
    queued: int
    capacity: int
    restarts: int


@dataclass
class _Worker:
    process: Any  # multiprocessing.context.SpawnProcess
    conn: Connection
    ready: bool = False
    task: Task | None = None
    started: float = 0.0
    stop_reason: str | None = None  # set when the supervisor kills it
    tasks_done: int = field(default=0)


class WorkerPool:
    """``size`` worker processes running ``api.worker.serve``; at most ``queue_size`` tasks wait."""

    def __init__(self, size: int, queue_size: int) -> None:
        if size < 1 or queue_size < 1:
            raise ValueError(f"a pool needs at least one worker and one queue slot, got {size} and {queue_size}")
        self.size = size
        self.queue_size = queue_size
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
        self._thread = threading.Thread(target=self._supervise, name="pipeplan-pool", daemon=True)

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
            return PoolStats(self.size, sum(w.process.is_alive() for w in self._workers),
                             sum(w.task is not None for w in self._workers), len(self._queue),
                             self.queue_size, self._restarts)

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in self._workers]

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers (queued tasks are dropped: the service marks their jobs at restart)."""
        with self._lock:
            self._closing = True
            self._queue.clear()
            workers = list(self._workers)
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
        from api.worker import serve

        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=serve, args=(child,), name="pipeplan-worker", daemon=True)
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
            timeout = self._next_deadline()
            if len(self._workers) < self.size:
                timeout = min(timeout, 1.0)  # try again soon to start the missing workers
        waitables: list[Any] = [self._wake_r]
        for w in workers:
            waitables += [w.conn, w.process.sentinel]
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
            self._restarts += 1

    def _dispatch(self) -> None:
        for w in self._workers:
            if not self._queue:
                return
            if w.ready and w.task is None and w.process.is_alive():
                task = self._queue.popleft()
                try:
                    w.conn.send((task.id, task.kind, task.payload))
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
            w.ready, self._stillborn = True, 0
            return
        task_id, ok, value, error_type, error, user_error = message
        task = w.task
        if task is None or task.id != task_id:
            log.warning("worker %s answered for task %s it was not given", w.process.pid, task_id)
            return
        w.task, w.tasks_done = None, w.tasks_done + 1
        self._finish(task, Outcome(ok, value, error, error_type, user_error))

    def _bury(self, w: _Worker) -> None:
        """A worker has exited: fail its task with the reason and put a fresh worker in its place."""
        w.process.join(0.1)
        if w.process.is_alive():
            return
        if w not in self._workers:
            return
        code = w.process.exitcode
        if w.stop_reason:
            why, kind = w.stop_reason, "Timeout"
        elif code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            why, kind = f"was killed by signal {name} (out of memory, or stopped from outside)", "WorkerDied"
        else:
            why, kind = f"exited with status {code}", "WorkerDied"
        if w.task is not None:
            log.error("worker %s died while running %s %s: %s", w.process.pid, w.task.kind, w.task.id, why)
            self._finish(w.task, Outcome(False, error=f"the worker process (pid {w.process.pid}) {why} "
                                         f"while running this {w.task.kind} job", error_type=kind))
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
                w.stop_reason = f"ran past its time limit of {w.task.timeout:g} s and was stopped"
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
