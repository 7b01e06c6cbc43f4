"""``pipeplan worker``: a solver worker of the durable queue, on this machine or any other.

One process: a procrastinate worker (claims queue jobs, sends heartbeats, hears cancels) in front
of this machine's :class:`pipeplan.api.pool.WorkerPool` (the solver processes, with their memory and time
limits and their recycling).  It takes as many jobs at once as it has solver processes.  See
:mod:`pipeplan.api.queue` for the life of a job, and docs/api.md ("Several replicas").

A solver process that dies or overruns fails its job (``WorkerDied``, ``Timeout``), as in a
server's own pool: the same job would do it again.  This process dying is different: its jobs
wait out the lease and another worker claims them (at most ``PIPEPLAN_QUEUE_MAX_ATTEMPTS`` times).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import socket
import time
from typing import Any

from pipeplan.api.database import Database
from pipeplan.api.jobspec import Fence, JobSpec, record_outcome
from pipeplan.api.logs import request_id
from pipeplan.api.pool import Limits, Outcome, Task, WorkerPool
from pipeplan.api.queue import QUEUE, TASK, JobQueue, conninfo, ensure_schema, sweep
from pipeplan.api.registry import Registry
from pipeplan.api.settings import Settings
from pipeplan.api.store import finish_job
from pipeplan.api.tables import ACTIVE, JobRow, utcnow

__all__ = ["QueueWorker"]

log = logging.getLogger(__name__)

TEARDOWN_WARNING = 20.0  # seconds after its last job before a stopping worker dumps its stacks


class HandBack(Exception):
    """A stopping worker gives a job back: the queue's retry puts it in the queue again."""


class QueueWorker:
    def __init__(self, settings: Settings, workers: int) -> None:
        import procrastinate

        if settings.job_queue != "postgresql":
            raise ValueError("pipeplan worker needs PIPEPLAN_JOB_QUEUE=postgresql (and a PostgreSQL database)")
        self.settings = settings
        self.size = workers
        self.name = f"{socket.gethostname()}:{os.getpid()}"[:128]
        self.db = Database(settings.database_url)
        self.registry = Registry(settings.max_devices)
        limits = Limits(settings.job_memory, settings.worker_max_jobs, settings.worker_max_rss)
        self.pool = WorkerPool(workers, workers, limits, log_format=settings.log_format)
        connector = procrastinate.PsycopgConnector(conninfo=conninfo(settings.database_url), min_size=1,
                                                   max_size=workers + 4)
        self.app = procrastinate.App(connector=connector)
        retry = procrastinate.RetryStrategy(retry_exceptions=[HandBack])
        self.app.task(name=TASK, queue=QUEUE, pass_context=True, retry=retry)(self._solve)
        self.queue = JobQueue(self.db, settings.queue_size, settings.queue_lease)  # for the sweeps
        self.handed_back = 0
        self._stopping = asyncio.Event()

    def run(self) -> None:
        self.db.migrate()
        ensure_schema(self.db)
        self.pool.start()
        try:
            asyncio.run(self._run())
        finally:
            self.pool.close()
            self.db.dispose()
            faulthandler.cancel_dump_traceback_later()

    async def _run(self) -> None:
        from procrastinate.worker import Worker

        s = self.settings
        async with self.app.open_async():
            # Start-up recovers only what is due: jobs of workers whose lease has expired.
            await sweep(self.app, self.queue, s.queue_lease)
            sweeper = asyncio.create_task(self._sweep_forever(), name="pipeplan-sweeper")
            log.info("queue worker %s: %d solver processes, heartbeat %g s, lease %g s", self.name, self.size,
                     s.queue_heartbeat, s.queue_lease)
            worker = Worker(
                self.app, queues=[QUEUE], name="pipeplan", concurrency=self.size, wait=True,
                update_heartbeat_interval=s.queue_heartbeat, stalled_worker_timeout=s.queue_lease,
                shutdown_graceful_timeout=s.drain_timeout, abort_job_polling_interval=s.queue_heartbeat,
                fetch_job_polling_interval=s.queue_heartbeat, listen_notify=True, delete_jobs="always",
                install_signal_handlers=True)
            # procrastinate stops its heartbeat as soon as it is told to stop, but a draining worker
            # still holds jobs: this one beats until the worker has unregistered, so that no lease
            # expires during the drain.
            beating = asyncio.create_task(self._heartbeat(worker), name="pipeplan-heartbeat")
            try:
                await worker.run()
            finally:
                # Every job has ended or gone back by now: what is left is tidying up.  Should it
                # hang, say where (every thread's stack, on stderr) rather than hang silently.
                faulthandler.dump_traceback_later(TEARDOWN_WARNING)
                self._stopping.set()
                await _stop_tasks([sweeper, beating])
        log.info("queue worker %s stopped (%d jobs handed back)", self.name, self.handed_back)

    async def _heartbeat(self, worker: Any) -> None:
        while not await self._pause(self.settings.queue_heartbeat):
            if worker.worker_id is not None:
                try:
                    await self.app.job_manager.update_heartbeat(worker.worker_id)
                except Exception:  # the database may be away a moment: the next beat tries again
                    log.exception("could not send a heartbeat")

    async def _sweep_forever(self) -> None:
        while not await self._pause(max(0.5, self.settings.queue_lease / 3)):
            try:
                await sweep(self.app, self.queue, self.settings.queue_lease)
            except Exception:  # the database may be away a moment: the next sweep tries again
                log.exception("sweeping the queue failed")

    async def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``; True when the worker is stopping (the side task should end)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return self._stopping.is_set()

    # -- one job ----------------------------------------------------------------------------------

    async def _solve(self, context: Any, job_id: str) -> None:
        claiming = asyncio.ensure_future(asyncio.to_thread(self._claim, job_id, context.job.id))
        try:
            claim = await asyncio.shield(claiming)
        except asyncio.CancelledError:  # a cancel or a stop while claiming: settle the claim first
            claim = await claiming
            if claim is not None:
                await self._interrupted(context, job_id, claim[0], claim[1], None)
            raise
        if claim is None:
            return
        attempt, spec = claim
        token = request_id.set(spec.request_id)
        try:
            await self._run_job(context, job_id, attempt, spec)
        finally:
            request_id.reset(token)

    async def _run_job(self, context: Any, job_id: str, attempt: int, spec: JobSpec) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Outcome] = loop.create_future()

        def settle(outcome: Outcome) -> None:
            if not done.done():
                done.set_result(outcome)

        def on_done(_task: Task, outcome: Outcome) -> None:
            loop.call_soon_threadsafe(settle, outcome)

        task = Task(job_id, spec.kind, spec.payload, spec.timeout, spec.timeout_note,
                    on_start=lambda _task, pid: self._started(job_id, attempt, pid), on_done=on_done,
                    request_id=spec.request_id)
        log.info("job %s (%s) claimed, attempt %d", job_id, spec.kind, attempt, extra={"job_id": job_id})
        started = time.monotonic()
        self.pool.submit(task)  # never full: the queue gives this process at most one job per solver
        try:
            outcome = await asyncio.shield(done)
        except asyncio.CancelledError:
            await self._interrupted(context, job_id, attempt, spec, done)
            raise
        await self._record(spec, job_id, outcome, attempt)
        log.info("job %s %s in %.2f s", job_id, "done" if outcome.ok else f"failed ({outcome.error_type})",
                 time.monotonic() - started, extra={"job_id": job_id})

    async def _interrupted(self, context: Any, job_id: str, attempt: int, spec: JobSpec,
                           done: asyncio.Future[Outcome] | None) -> None:
        """The job's queue task was cancelled: a client's cancel (already recorded), or this worker
        stopping after its drain time (hand the job back; raises :class:`HandBack`)."""
        from procrastinate.job_context import AbortReason

        stopping = context.abort_reason() == AbortReason.SHUTDOWN
        why = (f"handed back: worker {self.name} stopped" if stopping else
               "cancelled by a client (POST /v1/jobs/{id}/cancel)")
        outcome = Outcome(False, error=why, error_type="Cancelled")
        if done is not None:
            self.pool.cancel(job_id, why)
            outcome = await done  # the cancel's outcome, or the job's own if it ended that instant
        if not stopping:  # a client's cancel: the server that took it has recorded it already
            log.info("job %s cancelled by a client; its solve is stopped", job_id, extra={"job_id": job_id})
            return
        if outcome.error_type == "Cancelled":
            await asyncio.to_thread(self._hand_back, job_id, attempt)
            self.handed_back += 1
            log.warning("job %s handed back to the queue: this worker is stopping", job_id)
            raise HandBack(job_id) from None
        await self._record(spec, job_id, outcome, attempt)  # it ended on its own as the stop came

    async def _record(self, spec: JobSpec, job_id: str, outcome: Outcome, attempt: int) -> None:
        try:
            await asyncio.to_thread(record_outcome, self.db, self.registry, spec, job_id, outcome, Fence(attempt))
        except Exception as exc:  # the database is away: the job runs again (its row still says running)
            log.exception("could not record job %s; it goes back to the queue", job_id)
            raise HandBack(job_id) from exc

    # -- the job's row ----------------------------------------------------------------------------

    def _claim(self, job_id: str, entry: int) -> tuple[int, JobSpec] | None:
        """Take job ``job_id`` for its queue entry ``entry``: its attempt and spec; None when there is
        nothing to run (cancelled or ended meanwhile, given a new entry, or claimed too often)."""
        with self.db.write() as session:
            row = session.get(JobRow, job_id, with_for_update=True)
            if row is None or row.status not in ACTIVE or row.spec is None or row.queue_id != entry:
                return None
            if row.attempts >= self.settings.queue_max_attempts:
                finish_job(session, job_id, error_type="WorkerDied",
                           error=f"its workers stopped {row.attempts} times before it ended; not tried again "
                                 "(PIPEPLAN_QUEUE_MAX_ATTEMPTS)")
                log.error("job %s failed: claimed %d times", job_id, row.attempts)
                return None
            row.status, row.attempts, row.worker, row.worker_pid = "running", row.attempts + 1, self.name, None
            row.started_at = utcnow()
            return row.attempts, JobSpec.from_json(row.spec)

    def _started(self, job_id: str, attempt: int, pid: int) -> None:
        from sqlalchemy import update

        with self.db.write() as session:
            session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.attempts == attempt,
                                                 JobRow.status == "running").values(worker_pid=pid))

    def _hand_back(self, job_id: str, attempt: int) -> None:
        from sqlalchemy import update

        with self.db.write() as session:  # a hand-back is no failed attempt: the count goes back too
            session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.attempts == attempt,
                                                 JobRow.status == "running")
                            .values(status="queued", worker=None, worker_pid=None, attempts=attempt - 1))


async def _stop_tasks(tasks: list[asyncio.Task[Any]], patience: float = 10.0) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again those that swallowed it.

    A cancellation can be lost inside a database driver's call (the task then goes on to its next
    sleep; a stopping worker waited for its sweeper forever, one test run in six): each side task
    also ends on the worker's stop event, and this waits at most ``patience`` seconds."""
    deadline = time.monotonic() + patience
    pending = {t for t in tasks if not t.done()}
    while pending and time.monotonic() < deadline:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=min(1.0, max(0.0, deadline - time.monotonic())))
    if pending:
        log.error("tasks did not stop when cancelled: %s; left behind", ", ".join(t.get_name() for t in pending))
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())
