"""``/healthz`` and ``/metrics``: for load balancers and Prometheus; always open."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from api.deps import ServicesDep
from api.metrics import CONTENT_TYPE
from api.schemas.misc import Health

router = APIRouter(tags=["service"])


@router.get("/healthz", response_model=Health, responses={503: {"model": Health, "description": "degraded"}})
async def healthz(services: ServicesDep) -> JSONResponse:
    """ok when the database answers and every worker is alive; 503 (degraded) otherwise."""
    try:
        await run_in_threadpool(services.db.ping)
        database = "ok"
    except Exception:
        database = "unreachable"
    stats = services.pool.stats()
    ok = database == "ok" and stats.alive > 0
    body = {"status": "ok" if ok else "degraded", "database": database, "backend": services.db.backend,
            "workers": asdict(stats)}
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
def metrics(services: ServicesDep) -> Response:
    return Response(services.metrics.render(), media_type=CONTENT_TYPE)
