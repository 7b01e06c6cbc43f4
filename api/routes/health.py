"""``/livez``, ``/readyz``, ``/healthz`` and ``/metrics``: for orchestrators, load balancers and
Prometheus; always open and never rate limited.

- ``/livez``: the process answers (restart it if not); touches nothing else.
- ``/readyz``: send it traffic: the database answers and each worker pool is up: its first workers
  have finished starting (imports done) and a worker process is alive.  503 while starting, when
  every worker is dead, or with the database down.  A worker being recycled does not count as down:
  its successor is alive and jobs queue for it for the second it takes to start.  With the durable
  queue, the solvers are ``pipeplan worker`` processes: ready when one has a live heartbeat.
- ``/healthz``: the details of both, for people.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from pipeplan.api.deps import Services, ServicesDep
from pipeplan.api.metrics import CONTENT_TYPE
from pipeplan.api.queue import QueueStats
from pipeplan.api.schemas.misc import Health, Liveness, Readiness

router = APIRouter(tags=["service"])


async def _database(services: Services) -> str:
    try:
        await run_in_threadpool(services.db.ping)
        return "ok"
    except Exception:
        return "unreachable"


@router.get("/livez", response_model=Liveness)
async def livez() -> dict[str, Any]:
    """200 while the process serves requests."""
    return {"status": "alive"}


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness, "description": "not ready"}})
async def readyz(services: ServicesDep) -> JSONResponse:
    """200 when the database answers and both worker pools (solvers, predictions) have a ready
    worker; 503 with the reasons otherwise."""
    reasons = []
    if await _database(services) != "ok":
        reasons.append("the database does not answer")
    elif services.queue is not None:
        queue = await run_in_threadpool(_queue_stats, services)
        if queue is None or queue.workers == 0:
            reasons.append("no queue worker is alive (start `pipeplan worker`)")
    pools = [("solver", services.pool), ("predict", services.predictors)]
    for name, pool in pools:
        if pool is None:
            continue
        stats = pool.stats()
        if not stats.started:
            reasons.append(f"the {name} workers are starting")
        elif stats.alive == 0:
            reasons.append(f"no {name} worker is alive")
    return JSONResponse({"status": "not ready" if reasons else "ready", "reasons": reasons},
                        status_code=503 if reasons else 200)


@router.get("/healthz", response_model=Health, responses={503: {"model": Health, "description": "degraded"}})
async def healthz(services: ServicesDep) -> JSONResponse:
    """ok when the database answers and every worker is alive; 503 (degraded) otherwise."""
    database = await _database(services)
    predictors = services.predictors.stats()
    ok = database == "ok" and predictors.alive > 0
    body: dict[str, Any] = {"database": database, "backend": services.db.backend, "workers": None,
                            "predict_workers": asdict(predictors), "queue": None}
    if services.pool is not None:
        stats = services.pool.stats()
        ok = ok and stats.alive > 0
        body["workers"] = asdict(stats)
    if services.queue is not None:
        queue = await run_in_threadpool(_queue_stats, services) if database == "ok" else None
        ok = ok and queue is not None and queue.workers > 0
        body["queue"] = {"lease": services.queue.lease, **asdict(queue)} if queue is not None else None
    return JSONResponse({"status": "ok" if ok else "degraded", **body}, status_code=200 if ok else 503)


def _queue_stats(services: Services) -> QueueStats | None:
    assert services.queue is not None
    try:
        return services.queue.stats()
    except Exception:
        return None


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
def metrics(services: ServicesDep) -> Response:
    return Response(services.metrics.render(), media_type=CONTENT_TYPE)
