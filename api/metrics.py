"""Prometheus metrics (``GET /metrics``): requests, latency, jobs, the plan cache, the pool.

Each app has its own registry, so several apps in one process (tests) do not collide.  Requests
are labelled by route template (``/v1/plans/{plan_id}``), never by raw path, which would let
clients create unbounded label sets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeplan.api.pool import PoolStats

__all__ = ["CONTENT_TYPE", "Metrics", "MetricsMiddleware"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class _PoolCollector(Collector):
    def __init__(self, stats: Callable[[], PoolStats | None]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        stats = self._stats()
        if stats is None:
            return
        for name, value, doc in (("workers", stats.size, "solver worker processes configured"),
                                 ("workers_alive", stats.alive, "solver worker processes alive"),
                                 ("workers_ready", stats.ready, "solver worker processes ready for a job"),
                                 ("workers_busy", stats.busy, "workers running a job"),
                                 ("queue_depth", stats.queued, "jobs waiting for a worker"),
                                 ("queue_capacity", stats.capacity, "jobs that may wait before 503")):
            yield GaugeMetricFamily(f"pipeplan_{name}", doc, value=value)
        yield CounterMetricFamily("pipeplan_worker_restarts", "workers replaced after dying", value=stats.restarts)
        yield CounterMetricFamily("pipeplan_worker_recycles", "workers replaced on purpose (jobs run, memory held)",
                                  value=stats.recycled)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("pipeplan_http_requests", "HTTP requests answered",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("pipeplan_http_request_duration_seconds", "time to answer a request",
                                 ["method", "route"], buckets=_BUCKETS, registry=self.registry)
        self.jobs = Counter("pipeplan_jobs", "job events: queued, started, done, failed", ["kind", "event"],
                            registry=self.registry)
        self.cache = Counter("pipeplan_plan_cache", "plan and compare requests answered from the store (hit) "
                             "or solved (miss)", ["kind", "result"], registry=self.registry)

    def watch_pool(self, stats: Callable[[], PoolStats | None]) -> None:
        self.registry.register(_PoolCollector(stats))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts and times every HTTP request (pure ASGI: no per-request task or body buffering)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - started)
