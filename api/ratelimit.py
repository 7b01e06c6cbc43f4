"""Rate limits per token: a token bucket per bearer token (per client address without one).

Off unless ``PIPEPLAN_RATE_LIMIT`` is set (requests per second); ``PIPEPLAN_RATE_BURST`` requests
may come at once.  A request over the limit is a 429 with ``Retry-After`` (whole seconds until the
bucket holds a request again), before its token is checked or its body read.  Health, readiness
and metrics are never limited: an orchestrator must always reach them.  Buckets live in this
process, or, when replicas share a database through the job queue (``PIPEPLAN_JOB_QUEUE=postgresql``),
in that database (:class:`SharedBuckets`): each token then has one limit across all replicas.

>>> buckets = Buckets(rate=1.0, burst=2)
>>> [buckets.take("a", now=0.0) for _ in range(3)]
[0.0, 0.0, 1.0]
>>> buckets.take("a", now=1.0), buckets.take("b", now=1.0)
(0.0, 0.0)
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import OrderedDict
from typing import Any

from sqlalchemy import text
from starlette.types import ASGIApp, Receive, Scope, Send

from pipeplan.api.errors import error_body

__all__ = ["Buckets", "RateLimitMiddleware", "SharedBuckets"]

_OPEN_PATHS = ("/livez", "/readyz", "/healthz", "/metrics")
_MAX_BUCKETS = 100_000  # the least recently used are dropped: a flood of made-up tokens stays bounded


class Buckets:
    """Token buckets by key: ``rate`` requests per second, ``burst`` at once."""

    def __init__(self, rate: float, burst: int) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs rate > 0 and burst >= 1, got {rate} and {burst}")
        self.rate, self.burst = rate, burst
        self._level: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (requests left, at)
        self._lock = threading.Lock()

    def take(self, key: str, now: float | None = None) -> float:
        """Take one request from ``key``'s bucket: 0.0 if allowed, else seconds until one is."""
        now = time.monotonic() if now is None else now
        with self._lock:
            left, at = self._level.pop(key, (float(self.burst), now))
            left = min(float(self.burst), left + (now - at) * self.rate)
            if left >= 1.0:
                self._level[key] = (left - 1.0, now)
                wait = 0.0
            else:
                self._level[key] = (left, now)
                wait = (1.0 - left) / self.rate
            while len(self._level) > _MAX_BUCKETS:
                self._level.popitem(last=False)
        return wait


# One statement, so that two replicas taking from one bucket at once cannot both spend its last
# request: PostgreSQL serialises the upsert on the row.  The level after the time since the last
# take is LEAST(burst, level + elapsed · rate); a take is granted when at least one request is left.
_TAKE = text("""
INSERT INTO rate_buckets AS b (key, level, at, granted) VALUES (:key, :burst - 1, :now, true)
ON CONFLICT (key) DO UPDATE SET
    level = LEAST(:burst, b.level + GREATEST(0, :now - b.at) * :rate)
            - CASE WHEN LEAST(:burst, b.level + GREATEST(0, :now - b.at) * :rate) >= 1 THEN 1 ELSE 0 END,
    at = GREATEST(b.at, :now),
    granted = LEAST(:burst, b.level + GREATEST(0, :now - b.at) * :rate) >= 1
RETURNING level, granted
""")


class SharedBuckets:
    """Token buckets in the database (PostgreSQL), one per key for every replica of the service."""

    def __init__(self, db: Any, rate: float, burst: int) -> None:
        Buckets(rate, burst)  # the same checks of rate and burst
        self.db, self.rate, self.burst = db, rate, burst

    def take(self, key: str, now: float | None = None) -> float:
        """As :meth:`Buckets.take`; ``now`` in seconds since the epoch (replicas share no clock but that)."""
        now = time.time() if now is None else now
        with self.db.write() as session:
            level, granted = session.execute(_TAKE, {"key": key, "burst": float(self.burst), "now": now,
                                                     "rate": self.rate}).one()
        return 0.0 if granted else (1.0 - float(level)) / self.rate


class RateLimitMiddleware:
    def __init__(self, app: ASGIApp, rate: float, burst: int) -> None:
        self.app = app
        self.buckets = Buckets(rate, burst)
        self._shared: SharedBuckets | None = None  # made at the first request: the database comes with the app

    async def _wait(self, scope: Scope) -> float:
        """Seconds until this request's bucket holds one; shared buckets when the replicas share jobs."""
        services = getattr(scope["app"].state, "services", None)
        if services is not None and services.settings.job_queue == "postgresql":
            if self._shared is None or self._shared.db is not services.db:
                self._shared = SharedBuckets(services.db, self.buckets.rate, self.buckets.burst)
            shared = self._shared
            return float(await services.db.quick(lambda: shared.take(_key(scope))))
        return self.buckets.take(_key(scope))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in _OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        wait = await self._wait(scope)
        if wait <= 0.0:
            await self.app(scope, receive, send)
            return
        retry = max(1, math.ceil(wait))
        body = json.dumps(error_body(f"too many requests: this service allows {self.buckets.rate:g} per second "
                                     f"per token (bursts of {self.buckets.burst}); retry in {retry} s",
                                     [], "rate_limited")).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"retry-after", str(retry).encode())]
        if any(k in (b"content-length", b"transfer-encoding") for k, _ in scope.get("headers") or ()):
            headers.append((b"connection", b"close"))  # the body is left unread
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _key(scope: Scope) -> str:
    """The bucket of a request: its bearer token's digest, or its client address."""
    auth = dict(scope.get("headers") or ()).get(b"authorization", b"")
    scheme, _, token = auth.partition(b" ")
    if scheme.lower() == b"bearer" and token.strip():
        return "t:" + hashlib.sha256(token.strip()).hexdigest()
    client = scope.get("client")
    return f"a:{client[0] if client else '-'}"
