"""What the worker pool (:mod:`pipeplan.api.pool`) takes and gives: tasks, their outcomes, the limits on a
worker, and the pool's counts."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pipeplan.api.payloads import PlanPayload, PredictPayload
    from pipeplan.api.placement.payload import PlacePayload

__all__ = ["Limits", "Outcome", "PoolStats", "QueueFull", "Reply", "Task", "resident_bytes"]


class QueueFull(RuntimeError):
    """Every worker is busy and the queue holds as many tasks as it may."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    value: Any = None
    error: str | None = None
    error_type: str | None = None  # the exception's class, or MemoryLimit / Timeout / WorkerDied / Cancelled
    user_error: bool = False  # the request was wrong (a pipeplan.errors.UserError): the client's fault, not ours


class Reply(NamedTuple):
    """What a worker process sends back for a task (over its pipe): the task's id and its outcome."""

    task_id: str
    outcome: Outcome


@dataclass
class Task:
    id: str
    kind: str  # what pipeplan.api.worker.run does: plan, compare, predict, place
    payload: PlanPayload | PredictPayload | PlacePayload  # PlanPayload for plan and compare
    timeout: float  # seconds a worker may spend on it before it is killed
    timeout_note: str = ""  # what the time limit is made of, for the Timeout message
    on_start: Callable[[Task, int], None] | None = None  # (task, worker pid)
    on_done: Callable[[Task, Outcome], None] | None = None
    request_id: str | None = None  # the request that made it: the worker's log lines carry it


class Limits(NamedTuple):
    memory: int = 0  # bytes of private memory a worker may hold (RLIMIT_DATA); 0: none
    max_jobs: int = 0  # tasks a worker runs before it is replaced; 0: no limit
    max_rss: int = 0  # resident bytes after which a worker is replaced between tasks; 0: no limit


@dataclass(frozen=True)
class PoolStats:
    size: int
    alive: int
    busy: int
    queued: int
    capacity: int
    restarts: int  # workers started in place of ones that died or were killed
    ready: int = 0  # workers alive with their imports done
    recycled: int = 0  # workers replaced on purpose (max_jobs, max_rss, after running out of memory)
    started: bool = False  # a worker has been ready once: the pool is past its start-up


def resident_bytes(pid: int) -> int | None:
    """The resident set of process ``pid`` in bytes (Linux ``/proc``); None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
