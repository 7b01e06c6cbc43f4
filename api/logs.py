"""Request IDs and structured logs: every answer carries ``X-Request-ID``, every log line the ID of
the request it was written for.

A client's ``X-Request-ID`` (1 to 128 characters from ``[A-Za-z0-9._:-]``) is kept, so that a
trace crosses a proxy; anything else is replaced by a fresh one (never echoed: a header is no place
for a client's arbitrary bytes).  With ``PIPEPLAN_LOG_FORMAT=json`` each log line is one JSON object:
``time``, ``level``, ``logger``, ``message``, ``request_id`` and, for the access log (``api.access``),
``method``, ``path``, ``status`` and ``duration_ms``.

>>> record = logging.LogRecord("api", logging.INFO, __file__, 1, "hello %s", ("there",), None)
>>> json.loads(JsonFormatter().format(record))["message"]
'hello there'
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HEADER", "JsonFormatter", "RequestIdMiddleware", "logging_config", "request_id"]

HEADER = "X-Request-ID"
_VALID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")

# The ID of the request being answered; log records read it (the event loop and its threadpool
# threads see the value of the request that started them: contextvars travel with both).
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("pipeplan_request_id", default=None)

access_log = logging.getLogger("api.access")

# LogRecord attributes that are not a caller's ``extra``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class RequestIdFilter(logging.Filter):
    """Puts the current request's ID on every record (None outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record; ``extra`` fields are kept as they are (made text if not JSON)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or request_id.get(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)  # ASCII: a lone surrogate in a path must not break the log


def logging_config(level: str, fmt: str, access: bool) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for the server and uvicorn: ``fmt`` 'json' or 'text'; the
    access log (``api.access``, one line per request) on or off.  Uvicorn's own access log is off:
    ours carries the request ID."""
    formatter: dict[str, Any] = ({"()": JsonFormatter} if fmt == "json" else
                                 {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"})
    handler = {"class": "logging.StreamHandler", "formatter": "main", "filters": ["request_id"],
               "stream": "ext://sys.stderr"}
    return {
        "version": 1, "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"main": formatter},
        "handlers": {"main": handler},
        "root": {"handlers": ["main"], "level": level.upper()},
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True, "level": level.upper()},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": False, "level": "CRITICAL"},
            "api.access": {"level": "INFO" if access else "CRITICAL"},
        },
    }


class RequestIdMiddleware:
    """Gives each request an ID (the client's, if well formed), answers with it and logs the request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = dict(scope.get("headers") or ()).get(b"x-request-id", b"").decode("latin-1")
        rid = sent if _VALID.match(sent) else uuid.uuid4().hex
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if access_log.isEnabledFor(logging.INFO):
                access_log.info("%s %s %d", scope.get("method"), scope.get("path"), status,
                                extra={"method": scope.get("method"), "path": scope.get("path"), "status": status,
                                       "duration_ms": round((time.perf_counter() - started) * 1000, 2)})
            request_id.reset(token)
