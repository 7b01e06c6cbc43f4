"""The FastAPI app: settings, database, worker pool and routers, wired at start-up.

>>> app = create_app(Settings(database_url="sqlite://", workers=1))
>>> sorted(p for p in app.openapi()["paths"] if p.startswith("/v1/plans"))
['/v1/plans', '/v1/plans/compare', '/v1/plans/{plan_id}', '/v1/plans/{plan_id}/release']
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from pipeplan.api.auth import TokenChecker
from pipeplan.api.costmodels import CostModels
from pipeplan.api.database import Database
from pipeplan.api.deps import Services
from pipeplan.api.errors import DatabaseLossMiddleware, install_handlers
from pipeplan.api.limits import BodyLimitMiddleware
from pipeplan.api.logs import HEADER as REQUEST_ID
from pipeplan.api.logs import RequestIdMiddleware
from pipeplan.api.metrics import Metrics, MetricsMiddleware
from pipeplan.api.placement.service import Placement, recover_decisions
from pipeplan.api.planning import Planning
from pipeplan.api.pool import Limits, WorkerPool
from pipeplan.api.queue import JobQueue, ensure_schema
from pipeplan.api.ratelimit import RateLimitMiddleware
from pipeplan.api.registry import Registry
from pipeplan.api.resolve import Resolver
from pipeplan.api.routes import clusters, costmodel, deployments, health, jobs, models, plans
from pipeplan.api.security import AuthMiddleware, install_openapi
from pipeplan.api.settings import Settings, get_settings
from pipeplan.api.store import recover_jobs
from pipeplan.api.zoo import ZooCatalog

__all__ = ["create_app"]

log = logging.getLogger(__name__)

VERSION = "1.0.0"

_DESCRIPTION = """\
Plans how to split a DNN model into pipeline stages across busy, heterogeneous GPUs (pipeplan).

Writes need a bearer token (`pipeplan token create`); reads may too, by the service's settings.
Errors name the field at fault in `detail[].loc`.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service; nothing starts (database, workers) until the app's lifespan begins."""
    settings = settings or get_settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = Database(settings.database_url)
        db.migrate()
        limits = Limits(settings.job_memory, settings.worker_max_jobs, settings.worker_max_rss)
        pool: WorkerPool | None = None
        queue: JobQueue | None = None
        if settings.job_queue == "postgresql":
            # Solves go through the durable queue to `pipeplan worker` processes; other replicas' jobs
            # are theirs to finish, and a job whose worker died comes back when its lease expires.
            ensure_schema(db)
            queue = JobQueue(db, settings.queue_size, settings.queue_lease)
        else:
            with db.write() as session:
                stale = recover_jobs(session)
                undecided = recover_decisions(session)
            if stale:
                log.warning("%d jobs were unfinished when the service last stopped; marked failed", stale)
            if undecided:
                log.warning("%d placement decisions were unfinished when the service last stopped; marked failed",
                            undecided)
            pool = WorkerPool(settings.workers, settings.queue_size, limits, log_format=settings.log_format)
            pool.start()
            metrics.watch_pool(pool.stats)
        predictors = WorkerPool(settings.predict_workers, settings.queue_size, limits, name="predict",
                                log_format=settings.log_format)
        predictors.start()
        registry = Registry(settings.max_devices)
        costmodels = CostModels(settings.costmodel_dir)
        zoo = ZooCatalog()
        resolver = Resolver(db, settings, registry, costmodels, zoo)
        planning = Planning(db, pool, registry, resolver, metrics, settings.sync_wait, settings.retry_after,
                            settings.idempotency_ttl, queue)
        # Placement decisions run in the solver pool; with the durable queue the server has none, and
        # they run in its predict pool (a decision is bounded by its deployments' solver limits).
        placement = Placement(db, registry, costmodels, pool or predictors, settings.job_grace,
                              settings.capture_timeout)
        app.state.services = Services(settings, db, pool, registry, costmodels, zoo, planning,
                                      TokenChecker(db, settings.token_cache_ttl),
                                      metrics, predictors, queue, placement)
        if queue is not None:
            log.info("pipeplan service: %s database, jobs in its durable queue, reads %s", db.backend,
                     settings.read_auth)
        else:
            log.info("pipeplan service: %s database, %d workers, reads %s", db.backend, settings.workers,
                     settings.read_auth)
        try:
            yield
        finally:
            placement.close()
            if pool is not None:
                pool.close()
            predictors.close()
            db.dispose()

    app = FastAPI(title="pipeplan", version=VERSION, description=_DESCRIPTION, lifespan=lifespan,
                  openapi_tags=[{"name": "plans", "description": "make, read and compare plans"},
                                {"name": "jobs", "description": "solves running in the worker pool"},
                                {"name": "clusters", "description": "the cluster registry and device loads"},
                                {"name": "deployments", "description": "jobs placed on a registered cluster, "
                                                                       "re-planned as loads change"},
                                {"name": "models", "description": "the model zoo"},
                                {"name": "costmodel", "description": "per-layer time predictions"},
                                {"name": "service", "description": "health and metrics"}])
    install_handlers(app)
    for module in (plans, jobs, clusters, deployments, models, costmodel, health):
        app.include_router(module.router)
    app.include_router(deployments.clusters)
    # The last added runs first: request ID, tracing, CORS, metrics, lost database connections, rate limit,
    # token, body size, the routes.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, body_timeout=settings.body_timeout)
    app.add_middleware(AuthMiddleware)  # outside the body limit: a bad token is a 401 before any byte is read
    if settings.rate_limit > 0:
        app.add_middleware(RateLimitMiddleware, rate=settings.rate_limit, burst=settings.rate_burst)
    app.add_middleware(DatabaseLossMiddleware)  # around everything that reads the database
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    if settings.cors_origins:  # off unless configured: a browser on another origin gets no answer it may read
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_credentials=False,
                           allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "If-None-Match",
                                          REQUEST_ID],
                           expose_headers=["ETag", "Location", "Retry-After", REQUEST_ID], max_age=600)
    if settings.tracing != "off":  # inside the request ID, so each span carries it
        from pipeplan.api.tracing import instrument

        instrument(app, settings.tracing)
    app.add_middleware(RequestIdMiddleware)
    install_openapi(app, settings.read_auth)
    return app
