"""Plan and compare requests: check them, find a stored answer, or solve them in the pool.

The path of ``POST /v1/plans``:

1. check the request and resolve its parts (:mod:`pipeplan.api.resolve`): the graph's digest, the cluster's
   state, the cost model; a problem is a 4xx naming the field;
2. an identical earlier request (same key) has a stored plan: answer it (200), solving nothing;
3. an identical request is being solved right now: wait for that job instead of starting another
   (the job's row claims the key: a unique index on active jobs' keys, so this holds across processes);
4. otherwise write a queued job and hand it to the pool (full: 503 with Retry-After), wait up to
   ``wait`` seconds: answer 201 with the plan, 422 with the planner's reason, or 202 with the job.

Bookkeeping when a job ends (store the graph, the plan, its reservations; finish the job:
:func:`pipeplan.api.jobspec.record_outcome`) runs on the pool's callback thread, so it happens even when no
request waits any more.  With the durable queue (:mod:`pipeplan.api.queue`) step 4 writes the job and its
queue entry in one transaction instead, a ``pipeplan worker`` runs and records it, and the request
follows the job's row.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from pipeplan.api.database import Database
from pipeplan.api.errors import ApiError, job_failure
from pipeplan.api.idempotency import Claim, claim, fingerprint, record, scope_key
from pipeplan.api.jobspec import JobSpec, record_outcome, reserve_plan
from pipeplan.api.keys import canonical
from pipeplan.api.logs import request_id
from pipeplan.api.metrics import Metrics
from pipeplan.api.pool import Outcome, QueueFull, Task, WorkerPool
from pipeplan.api.queue import JobQueue
from pipeplan.api.registry import Registry
from pipeplan.api.resolve import Prepared, Resolver
from pipeplan.api.schemas.common import ZooModelRef
from pipeplan.api.schemas.plans import CompareCreate, PlanCreate
from pipeplan.api.store import job_view, new_id, plan_json, start_job
from pipeplan.api.tables import ACTIVE, JobRow, PlanRow

__all__ = ["Answer", "Planning", "stopping"]

log = logging.getLogger(__name__)

_PLANS = PlanRow.__table__

# Set when this server is told to stop (SIGTERM, SIGINT): requests still waiting for a job answer 202
# with the job at once, instead of being cut when the server's grace period ends.  The job goes on:
# in the durable queue, or in this server's pool until the pool closes.
stopping = threading.Event()


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any] | bytes  # bytes: JSON text already
    headers: dict[str, str] | None = None
    plan_id: str | None = None  # the plan answered, if any
    job_id: str | None = None  # the job that made the answer, if any


@dataclass(frozen=True)
class _Finished:
    outcome: Outcome
    plan_id: str | None = None
    elsewhere: str | None = None  # the request was merged into this job of another process


class _AlreadyDone(Exception):
    """Rolls back a job claim whose request has a stored answer after all."""


def _finished_of(row: JobRow) -> _Finished:
    """A finished job as read from the database (a job another process ran)."""
    if row.status == "done":
        value = {"comparison": json.loads(row.result)} if row.result else {}
        return _Finished(Outcome(True, value=value), row.plan_id)
    return _Finished(Outcome(False, error=row.error, error_type=row.error_type, user_error=row.user_error))


class Planning:
    def __init__(self, db: Database, pool: WorkerPool | None, registry: Registry, resolver: Resolver,
                 metrics: Metrics, sync_wait: float, retry_after: int, idempotency_ttl: float = 86_400.0,
                 queue: JobQueue | None = None) -> None:
        """Jobs run in ``pool``, this server's own worker processes, or through ``queue`` (then ``pool``
        is None): the durable queue that ``pipeplan worker`` processes take them from."""
        self.db, self.pool, self.registry, self.resolver, self.queue = db, pool, registry, resolver, queue
        self.metrics = metrics
        self.sync_wait = sync_wait
        self.retry_after = retry_after
        self.idempotency_ttl = idempotency_ttl
        self._lock = threading.Lock()
        self._inflight: dict[str, tuple[str, Future[_Finished]]] = {}  # request key -> job

    async def create(self, body: PlanCreate | CompareCreate, kind: str,
                     idempotency: tuple[str, str] | None = None, owner: str | None = None) -> Answer:
        """Answer a plan or compare request; ``idempotency`` is (token, Idempotency-Key) when sent;
        ``owner`` owns the job and the plan it makes (a stored plan keeps its first owner)."""
        wait = self.sync_wait if body.wait is None else body.wait
        if idempotency is None:
            return await self._create(body, kind, wait, owner)
        token, header = idempotency
        key, print_ = scope_key(token, kind, header), fingerprint(body.model_dump(mode="json"))
        held = await run_in_threadpool(claim, self.db, key, print_, self.idempotency_ttl)
        if held.fingerprint != print_:
            raise ApiError(409, f"Idempotency-Key {header!r} was sent before with a different {kind} request body; "
                           "send a new key for a new request", ["header", "Idempotency-Key"], "idempotency_conflict")
        if not held.first:
            replay = await self._replay(held, kind, wait)
            if replay is not None:
                return replay
        answer = await self._create(body, kind, wait, owner)
        await run_in_threadpool(record, self.db, key, answer.job_id, answer.plan_id)
        return answer

    async def _create(self, body: PlanCreate | CompareCreate, kind: str, wait: float, owner: str | None) -> Answer:
        zoo_name = None
        if isinstance(body.model, ZooModelRef):  # checked here: the zoo's list may still be loading
            m = body.model
            zoo_name = await self.resolver.zoo.canonical_name(m.name, m.batch, m.seq_len, m.image_size,
                                                              self.resolver.settings.max_capture_bytes)
        prep, cached = await run_in_threadpool(self._prepare, body, kind, zoo_name)
        self.metrics.cache.labels(kind=kind, result="hit" if cached else "miss").inc()
        if cached is not None:
            return cached
        submitted = await run_in_threadpool(self._submit, replace(prep, owner=owner))
        if isinstance(submitted, Answer):
            return submitted
        job_id, future, attached = submitted
        return await self._answer(kind, job_id, future, wait, attached)

    async def _replay(self, held: Claim, kind: str, wait: float) -> Answer | None:
        """What an Idempotency-Key's first request made; None when it made nothing that is still there."""
        if held.plan_id is not None:
            with self.db.read() as session:
                row = session.get(PlanRow, held.plan_id)
                if row is not None:
                    return Answer(200, plan_json(row, cached=True), {"Location": f"/v1/plans/{row.id}"},
                                  plan_id=row.id, job_id=held.job_id)
        if held.job_id is not None:
            with self._lock:
                future = next((f for j, f in self._inflight.values() if j == held.job_id), None)
            return await self._answer(kind, held.job_id, future, wait, attached=True)
        return None

    def _prepare(self, body: PlanCreate | CompareCreate, kind: str,
                 zoo_name: str | None) -> tuple[Prepared, Answer | None]:
        """The checked request and its stored answer, if any (one thread hop for both)."""
        with self.db.read() as session:
            prep = self.resolver.prepare(session, body, kind, zoo_name)
            return prep, self._cached(session, prep)

    # -- stored answers ---------------------------------------------------------------------------

    def _cached(self, session: Session, prep: Prepared) -> Answer | None:
        if not prep.final:
            return None
        if prep.kind == "compare":
            job = session.execute(select(JobRow).where(JobRow.key == prep.key, JobRow.kind == "compare",
                                                       JobRow.status == "done")
                                  .order_by(JobRow.finished_at.desc()).limit(1)).scalar_one_or_none()
            if job is None or job.result is None:
                return None
            return Answer(200, {"job_id": job.id, "cached": True, "comparison": json.loads(job.result)},
                          job_id=job.id)
        # A Core row, not an ORM object: this is the hot path of identical requests.
        found = session.execute(select(_PLANS).where(_PLANS.c.key == prep.key)).first()
        if found is None:
            return None
        if prep.reserve and not found.reserved:
            with self.db.write() as writer:
                row = writer.get(PlanRow, found.id, with_for_update=True)
                if row is None:  # deleted a moment ago
                    return None
                self._reserve(writer, row)
                return Answer(200, plan_json(row, cached=True), {"Location": f"/v1/plans/{row.id}"}, plan_id=row.id)
        return Answer(200, plan_json(found, cached=True), {"Location": f"/v1/plans/{found.id}"}, plan_id=found.id)

    def _answered(self, session: Session, prep: Prepared) -> bool:
        """Whether ``prep`` has a stored answer (read only: called inside a write transaction)."""
        if not prep.final:
            return False
        if prep.kind == "compare":
            query = select(JobRow.id).where(JobRow.key == prep.key, JobRow.kind == "compare", JobRow.status == "done",
                                            JobRow.result.is_not(None))
        else:
            query = select(_PLANS.c.id).where(_PLANS.c.key == prep.key)
        return session.execute(query.limit(1)).first() is not None

    def _reserve(self, session: Any, row: PlanRow) -> None:
        reserve_plan(session, self.registry, row)

    # -- solving ----------------------------------------------------------------------------------

    def _submit(self, prep: Prepared) -> tuple[str, Future[_Finished] | None, bool] | Answer:
        """The job solving ``prep``: a new one, or the active one with the same key, claimed atomically
        by the database's unique index (a job of another process has no future here: None); or the
        stored answer of an identical job that finished a moment ago."""
        if self.queue is not None:
            return self._enqueue(prep, self.queue)
        assert self.pool is not None
        with self._lock:
            running = self._inflight.get(prep.key)
            if running is not None:
                return running[0], running[1], True
            if not self.pool.has_room():
                raise self._busy()
            job_id, future = new_id(), Future[_Finished]()
            self._inflight[prep.key] = (job_id, future)
        for _ in range(3):
            try:
                with self.db.write() as session:
                    session.add(JobRow(id=job_id, kind=prep.kind, status="queued", key=prep.key, owner=prep.owner,
                                       request=canonical(prep.request)))
                    session.flush()
                    # The key was free: an identical job may have finished since this request looked
                    # for a stored answer (its plan is stored in the transaction that frees the key).
                    if self._answered(session, prep):
                        raise _AlreadyDone
                break
            except _AlreadyDone:
                with self.db.read() as session:
                    cached = self._cached(session, prep)
                if cached is not None:  # else deleted a moment ago: claim the key again
                    comparison = cached.body.get("comparison") if isinstance(cached.body, dict) else None
                    value = {"comparison": comparison} if comparison is not None else {}
                    self._forget(prep.key, job_id, future, _Finished(Outcome(True, value=value), cached.plan_id))
                    return cached
            except IntegrityError:  # another process holds the key: follow its job
                with self.db.read() as session:
                    other = session.execute(select(JobRow.id).where(JobRow.key == prep.key,
                                                                    JobRow.status.in_(ACTIVE))).scalar()
                if other is not None:
                    self._forget(prep.key, job_id, future, _Finished(Outcome(False), elsewhere=other))
                    return other, None, True
        else:
            self._forget(prep.key, job_id, future, _Finished(Outcome(False, error="busy", error_type="QueueFull")))
            raise ApiError(503, "could not claim the request's job; retry", [], "busy",
                           headers={"Retry-After": str(self.retry_after)})
        spec = JobSpec.of(prep, self.resolver.payload(prep), request_id.get())
        task = Task(job_id, prep.kind, spec.payload, prep.timeout, prep.timeout_note,
                    on_start=self._started,
                    on_done=lambda task, outcome: self._done(spec, prep.key, task, outcome, future),
                    request_id=spec.request_id)
        try:
            self.pool.submit(task)
        except QueueFull:
            with self.db.write() as session:
                job = session.get(JobRow, job_id)
                if job is not None:
                    session.delete(job)
            self._forget(prep.key, job_id, future, _Finished(Outcome(False, error="the queue is full",
                                                                     error_type="QueueFull")))
            raise self._busy() from None
        self.metrics.jobs.labels(kind=prep.kind, event="queued").inc()
        return job_id, future, False

    def _enqueue(self, prep: Prepared, queue: JobQueue) -> tuple[str, Future[_Finished] | None, bool] | Answer:
        """:meth:`_submit` through the durable queue: the job's row and its queue entry in one
        transaction; the key claimed by the same unique index; the queue's bound counted in the database."""
        spec = JobSpec.of(prep, self.resolver.payload(prep), request_id.get()).to_json()
        for _ in range(3):
            job_id = new_id()
            try:
                with self.db.write() as session:
                    if not queue.has_room(session):
                        raise QueueFull
                    session.add(JobRow(id=job_id, kind=prep.kind, status="queued", key=prep.key, owner=prep.owner,
                                       request=canonical(prep.request), spec=spec))
                    session.flush()
                    if self._answered(session, prep):
                        raise _AlreadyDone
                    queue.enqueue(session, job_id)
                self.metrics.jobs.labels(kind=prep.kind, event="queued").inc()
                return job_id, None, False
            except QueueFull:
                raise self._busy() from None
            except _AlreadyDone:
                with self.db.read() as session:
                    cached = self._cached(session, prep)
                if cached is not None:
                    return cached
            except IntegrityError:  # an identical job is active: follow it
                with self.db.read() as session:
                    other = session.execute(select(JobRow.id).where(JobRow.key == prep.key,
                                                                    JobRow.status.in_(ACTIVE))).scalar()
                if other is not None:
                    return other, None, True
        raise ApiError(503, "could not claim the request's job; retry", [], "busy",
                       headers={"Retry-After": str(self.retry_after)})

    def cancel(self, job_id: str, why: str) -> bool:
        """Cancel job ``job_id`` if this server can reach it: in its own pool (the pool's callback records
        the end), or through the queue, from any server (recorded at once; its worker stops the solve).
        False when it is not reachable from here."""
        if self.queue is not None:
            return self.queue.cancel(job_id, why)
        assert self.pool is not None
        return self.pool.cancel(job_id, why)

    def _forget(self, key: str, job_id: str, future: Future[_Finished], finished: _Finished) -> None:
        """Drop a job that will not run; requests that attached to it meanwhile get ``finished``."""
        with self._lock:
            if self._inflight.get(key, ("",))[0] == job_id:
                del self._inflight[key]
        future.set_result(finished)

    def _busy(self) -> ApiError:
        if self.queue is not None:
            return ApiError(503, f"{self.queue.queue_size} jobs are waiting for a solver worker "
                            "(PIPEPLAN_QUEUE_SIZE): the queue is full; retry later", [], "busy",
                            headers={"Retry-After": str(self.retry_after)})
        assert self.pool is not None
        stats = self.pool.stats()
        return ApiError(503, f"all {stats.size} solver workers are busy and the queue is full "
                        f"({stats.queued} jobs waiting); retry later", [], "busy",
                        headers={"Retry-After": str(self.retry_after)})

    async def _answer(self, kind: str, job_id: str, future: Future[_Finished] | None, wait: float,
                      attached: bool) -> Answer:
        started = time.monotonic()
        finished: _Finished | None = None
        if future is not None and wait > 0:
            waiting = asyncio.wrap_future(future)
            while not stopping.is_set() and (left := wait - (time.monotonic() - started)) > 0:
                with contextlib.suppress(TimeoutError):  # still solving: answered with the job below
                    finished = await asyncio.wait_for(asyncio.shield(waiting), min(left, 0.25))
                    break
        if future is None or (finished is not None and finished.elsewhere is not None):
            job_id = finished.elsewhere if finished is not None and finished.elsewhere else job_id
            finished = await self._poll(job_id, wait - (time.monotonic() - started))
        if finished is None:
            with self.db.read() as session:
                job = session.get(JobRow, job_id)
                view = job_view(job) if job is not None else None
            if view is None:
                raise ApiError(503, f"job {job_id} vanished; send the request again", [], "unavailable")
            return Answer(202, view, {"Location": f"/v1/jobs/{job_id}"}, job_id=job_id)
        outcome = finished.outcome
        if not outcome.ok:
            raise job_failure(outcome, f"job {job_id}", extra={"job": f"/v1/jobs/{job_id}"})
        if kind == "compare":
            return Answer(200, {"job_id": job_id, "cached": attached, "comparison": outcome.value["comparison"]},
                          job_id=job_id)
        with self.db.read() as session:
            row = session.get(PlanRow, finished.plan_id)
        if row is None:  # deleted in the meantime
            raise ApiError(404, f"the plan of job {job_id} was deleted", ["path"])
        return Answer(200 if attached else 201, plan_json(row, cached=attached), {"Location": f"/v1/plans/{row.id}"},
                      plan_id=row.id, job_id=job_id)

    async def _poll(self, job_id: str, wait: float) -> _Finished | None:
        """Wait up to ``wait`` seconds for a job this process does not run, reading the database."""
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            with self.db.read() as session:
                row = session.get(JobRow, job_id)
                if row is None or row.status not in ACTIVE:
                    return _finished_of(row) if row is not None else None
            if time.monotonic() >= deadline or stopping.is_set():
                return None
            await asyncio.sleep(0.1)

    def _started(self, task: Task, pid: int) -> None:
        with self.db.write() as session:
            start_job(session, task.id, pid)
        self.metrics.jobs.labels(kind=task.kind, event="started").inc()

    def _done(self, spec: JobSpec, key: str, task: Task, outcome: Outcome, future: Future[_Finished]) -> None:
        plan_id: str | None = None
        try:
            outcome, plan_id, _ = record_outcome(self.db, self.registry, spec, task.id, outcome)
        finally:
            with self._lock:
                if self._inflight.get(key, ("",))[0] == task.id:
                    del self._inflight[key]
            self.metrics.jobs.labels(kind=task.kind, event="done" if outcome.ok else "failed").inc()
            future.set_result(_Finished(outcome, plan_id))
