"""Rate limits per token: a token bucket per bearer token (per client address without one).

Off unless ``PIPEPLAN_RATE_LIMIT`` is set (requests per second); ``PIPEPLAN_RATE_BURST`` requests
may come at once.  A request over the limit is a 429 with ``Retry-After`` (whole seconds until the
bucket holds a request again), before its token is checked or its body read.  Health, readiness
and metrics are never limited: an orchestrator must always reach them.  Buckets live in this
process: with several replicas each allows the rate.

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

from starlette.types import ASGIApp, Receive, Scope, Send

from pipeplan.api.errors import error_body

__all__ = ["Buckets", "RateLimitMiddleware"]

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


class RateLimitMiddleware:
    def __init__(self, app: ASGIApp, rate: float, burst: int) -> None:
        self.app = app
        self.buckets = Buckets(rate, burst)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in _OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        wait = self.buckets.take(_key(scope))
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
