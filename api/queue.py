"""The durable job queue (``PIPEPLAN_JOB_QUEUE=postgresql``): jobs in PostgreSQL, claimed by
``pipeplan worker`` processes on any machine, through `procrastinate`_.

Why procrastinate (and not a Redis queue) is in docs/api.md ("Several replicas").  How the parts fit:

- **Enqueue.** A server writes the job's row (``jobs``, with its :class:`pipeplan.api.jobspec.JobSpec`) and
  the queue's job (``procrastinate_jobs``, holding only the job's id) in *one* transaction, on the
  same connection: a server that dies at any moment leaves either both or neither, never a job
  that nobody will run.  The unique index on active jobs' keys still merges identical requests.
- **Claim.** A worker takes a queue job (``SELECT … FOR UPDATE SKIP LOCKED`` inside procrastinate),
  then claims the row: ``running``, ``worker`` = its ``host:pid``, ``attempts`` + 1.  It records the
  outcome only while the row is still ``running`` under that attempt (:class:`pipeplan.api.jobspec.Fence`).
- **Lease.** Each worker process writes a heartbeat every ``PIPEPLAN_QUEUE_HEARTBEAT`` seconds
  (``procrastinate_workers``).  :func:`sweep` gives back the jobs of workers silent for longer than
  ``PIPEPLAN_QUEUE_LEASE``: their rows go back to ``queued`` under a new queue entry, for any worker
  to claim.  Nothing else is ever recovered: a server's start-up touches no queue job.
- **Cancel.** From any server: the job's row ends ``cancelled`` at once, and its queue entry is
  cancelled in the same transaction (queued) or marked for abortion (running), which reaches its
  worker at once (LISTEN/NOTIFY): the worker kills the solve; its outcome no longer counts.
- **Drain.** A worker told to stop (SIGTERM, SIGINT) takes no more jobs, lets running ones finish for
  ``PIPEPLAN_DRAIN_TIMEOUT`` seconds, then kills them and hands them back (``queued`` again).

.. _procrastinate: https://procrastinate.readthedocs.io/
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from pipeplan.api.database import Database
from pipeplan.api.store import finish_job
from pipeplan.api.tables import ACTIVE, JobRow

__all__ = ["QUEUE", "TASK", "JobQueue", "QueueStats", "conninfo", "ensure_schema", "sweep"]

log = logging.getLogger(__name__)

QUEUE = "pipeplan"  # the procrastinate queue of solves
TASK = "pipeplan.solve"  # its task: run the job whose id it is given
SCHEMA_LOCK = 0x70697065706C0002  # advisory lock: one process at a time creates procrastinate's tables
SWEEP_LOCK = 0x70697065706C0003  # advisory lock: one sweeper at a time


def conninfo(database_url: str) -> str:
    """The libpq address of a SQLAlchemy PostgreSQL URL (``postgresql+psycopg://…`` → ``postgresql://…``),
    its query (``options=-csearch_path=…``) kept."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def ensure_schema(db: Database) -> None:
    """Create procrastinate's tables, functions and triggers when the database has none yet.

    They live beside the service's tables (the connection's ``search_path``).  A later procrastinate
    release that changes them ships SQL migrations, to apply once as its documentation says."""
    from procrastinate.schema import SchemaManager

    with db.engine.begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
        if conn.execute(text("SELECT to_regclass('procrastinate_jobs')")).scalar() is None:
            # The driver's connection: the schema is many statements, sent as they are.
            conn.connection.driver_connection.execute(SchemaManager.get_schema())  # type: ignore[union-attr]
            log.info("created the job queue's tables (procrastinate)")


@dataclass(frozen=True)
class QueueStats:
    workers: int  # queue worker processes with a heartbeat within the lease
    queued: int
    running: int
    capacity: int


class JobQueue:
    """What a server does with the queue: enqueue, cancel, count.  It never opens a connection pool
    of its own: every call runs on the caller's transaction."""

    def __init__(self, db: Database, queue_size: int, lease: float) -> None:
        import procrastinate

        self.db, self.queue_size, self.lease = db, queue_size, lease
        # A connector that is never opened: each defer and cancel goes through a given connection.
        self.app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector())

    @staticmethod
    def _driver(session: Session) -> Any:
        return session.connection().connection.driver_connection

    def has_room(self, session: Session) -> bool:
        queued = session.execute(select(func.count()).select_from(JobRow).where(JobRow.status == "queued")).scalar()
        return int(queued or 0) < self.queue_size

    def enqueue(self, session: Session, job_id: str) -> int:
        """Put job ``job_id`` (its row already in ``session``) in the queue, in the same transaction."""
        deferrer = self.app.configure_task(TASK, queue=QUEUE, connection=self._driver(session))
        queue_id = deferrer.defer(job_id=job_id)
        session.execute(update(JobRow).where(JobRow.id == job_id).values(queue_id=queue_id))
        return queue_id

    def cancel(self, job_id: str, why: str) -> bool:
        """Cancel job ``job_id`` now; its worker, if one runs it, is told to stop the solve (and its outcome
        is refused: the row is no longer running).  False when it is not an active job of the queue."""
        with self.db.write() as session:
            row = session.get(JobRow, job_id, with_for_update=True)
            if row is None or row.status not in ACTIVE or row.queue_id is None:
                return False
            self.app.job_manager.cancel_job_by_id(row.queue_id, abort=True, connection=self._driver(session))
            finish_job(session, job_id, error=why, error_type="Cancelled")
            return True

    def stats(self) -> QueueStats:
        with self.db.read() as session:
            counts = dict(session.execute(select(JobRow.status, func.count()).where(JobRow.status.in_(ACTIVE))
                                          .group_by(JobRow.status)).all())
            # procrastinate's own table of live workers (it has no call that lists them).
            workers = session.execute(text("SELECT count(*) FROM procrastinate_workers WHERE last_heartbeat > "
                                           "now() - make_interval(secs => :lease)"), {"lease": self.lease}).scalar()
        return QueueStats(int(workers or 0), int(counts.get("queued", 0)), int(counts.get("running", 0)),
                          self.queue_size)


async def sweep(app: Any, queue: JobQueue, lease: float) -> list[str]:
    """Give back the jobs of queue workers silent for more than ``lease`` seconds; their ids.

    A job given back gets a *new* queue entry, in the same transaction that puts its row back to
    ``queued``; the silent worker's entry is retired.  Should that worker wake up, it can only finish
    its own, retired entry, and its outcome is refused (the row is no longer running under its
    attempt): it cannot remove the new entry, nor record anything.  One sweeper at a time (an
    advisory lock), so that a job is given back once."""
    from procrastinate.jobs import Status

    lock = await asyncio.to_thread(_try_lock, queue.db)
    if lock is None:
        return []
    returned: list[str] = []
    try:
        stalled = await app.job_manager.get_stalled_jobs(queue=QUEUE, task_name=TASK, seconds_since_heartbeat=lease)
        for job in stalled:
            job_id = str(job.task_kwargs.get("job_id"))
            if await asyncio.to_thread(_give_back, queue, job_id, job.id):
                returned.append(job_id)
                log.warning("job %s given back to the queue: its worker sent no heartbeat for %g s", job_id, lease,
                            extra={"job_id": job_id})
            try:
                await app.job_manager.finish_job_by_id_async(job.id, status=Status.FAILED, delete_job=True)
            except Exception as exc:  # it ended meanwhile
                log.info("queue entry %s of job %s was not retired: %s", job.id, job_id, exc)
        await app.job_manager.prune_stalled_workers(lease)
    finally:
        await asyncio.to_thread(_unlock, lock)
    return returned


def _try_lock(db: Database) -> Any:
    conn = db.engine.connect()
    conn.begin()
    if conn.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": SWEEP_LOCK}).scalar():
        return conn
    conn.rollback()
    conn.close()
    return None


def _unlock(conn: Any) -> None:
    conn.rollback()  # ends the transaction, and the lock with it
    conn.close()


def _give_back(queue: JobQueue, job_id: str, entry: int) -> bool:
    """Put job ``job_id`` back in the queue under a new entry, if queue entry ``entry`` still holds it."""
    with queue.db.write() as session:
        row = session.get(JobRow, job_id, with_for_update=True)
        if row is None or row.status not in ACTIVE or row.queue_id != entry:
            return False
        row.status, row.worker, row.worker_pid = "queued", None, None
        session.flush()
        queue.enqueue(session, job_id)
        return True
