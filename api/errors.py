"""Error answers: one shape for all of them, never a 500 for a client's mistake, and never a 4xx for ours.

Every error body is FastAPI's validation shape, ``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``,
so a client reads the field at fault (``loc``) the same way for a schema violation, an unknown
cluster or a model that does not fit.

Whose fault an error is follows its type: the service's own checks raise :class:`ApiError` (a 4xx);
a job whose worker raised a :class:`~pipeplan.errors.UserError` (the planner's and cost model's
errors about the request) fails with a 422 carrying its message (:func:`job_failure`); anything else
— a bare ``ValueError`` from numpy, a broken invariant — is a 500 whose traceback goes to the log
and whose answer names only the exception's class.  The worker decides it with ``isinstance`` where
it catches the exception (:func:`pipeplan.api.worker.failure_of`), and the job's row (and a failed
deployment's) records the answer as ``user_error``: a request reading another process's job answers
from that flag, never from the class's name.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeplan.api.keys import finite
from pipeplan.api.tasks import Outcome
from pipeplan.api.text import safe_text

__all__ = ["ApiError", "DatabaseLossMiddleware", "error_body", "install_handlers", "job_failure", "loc_for_error",
           "user_label"]

log = logging.getLogger(__name__)

Loc = Sequence[str | int]

# Where a worker's UserError points in a request: the part of the body the error is about (others: the body).
_ERROR_LOC: dict[str, tuple[str, ...]] = {
    "GraphError": ("body", "model", "graph"),
    "ZooError": ("body", "model"),
    "CaptureError": ("body", "model"),
    "ClusterError": ("body", "cluster"),
    "PlanError": ("body", "options"),
    "UnitError": ("body", "cluster"),
    "CostModelError": ("body", "costmodel"),
    "LayerError": ("body", "layers"),
    "MemoryLimit": ("body",),  # the request needs more memory than a job may hold (PIPEPLAN_JOB_MEMORY)
}

# Failures that are no one's mistake in the request, and may pass: a 503 with Retry-After.
_UNAVAILABLE = frozenset({"WorkerDied", "Timeout", "QueueFull", "Restarted"})


class ApiError(StarletteHTTPException):
    """An HTTP error that names the field at fault."""

    def __init__(self, status: int, msg: str, loc: Loc = (), kind: str = "value_error",
                 headers: dict[str, str] | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(status, msg, headers)
        self.loc = list(loc)
        self.kind = kind
        self.extra = extra or {}


def loc_for_error(error_type: str | None) -> list[str]:
    """The body location a planner error of class ``error_type`` is about."""
    return list(_ERROR_LOC.get(error_type or "", ("body",)))


def job_failure(outcome: Outcome, what: str, extra: dict[str, Any] | None = None,
                retry_after: int | None = None) -> ApiError:
    """The answer to a job (``what``: "job ID", "the prediction") that failed with ``outcome``: a 409 when
    it was cancelled, a 422 naming the field when the request was at fault, a 503 when trying again
    may help (with ``Retry-After: retry_after`` when given), else a 500.

    >>> job_failure(Outcome(False, error="no plan fits", error_type="PlanError", user_error=True), "job j").status_code
    422
    >>> job_failure(Outcome(False, error="internal error (ValueError)", error_type="ValueError"), "job j").status_code
    500
    """
    kind = outcome.error_type
    if kind == "Cancelled":
        return ApiError(409, f"{what} was cancelled: {outcome.error}", [], "cancelled", extra=extra)
    if outcome.user_error:
        return ApiError(422, outcome.error or "the request cannot be planned", loc_for_error(kind),
                        kind or "value_error")
    if kind in _UNAVAILABLE:
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        return ApiError(503, f"{what} failed: {outcome.error}", [], kind, headers=headers, extra=extra)
    return ApiError(500, f"{what} failed: {outcome.error}", [], kind or "internal_error", extra=extra)


def _safe_loc(loc: Loc) -> list[str | int]:
    return [safe_text(part) if isinstance(part, str) else part for part in loc]


def error_body(msg: str, loc: Loc = (), kind: str = "value_error", **extra: Any) -> dict[str, Any]:
    # Messages quote what the client sent: escape what UTF-8 cannot encode, or the answer itself fails.
    return {"detail": [{"loc": _safe_loc(loc), "msg": safe_text(msg), "type": kind}], **extra}


def user_label(value: str, loc: Loc, max_len: int) -> str:
    """A name that is stored and shown (model, cluster): printable, and short enough for its column."""
    if not value or len(value) > max_len or not value.isprintable():
        raise ApiError(422, f"must be 1 to {max_len} printable characters, got {value[:40]!r}"
                       + ("…" if len(value) > 40 else ""), loc)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(422, "must be valid Unicode text (no lone surrogates)", loc) from None
    return value


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc, ApiError):
            body = error_body(exc.detail, exc.loc, exc.kind, **exc.extra)
        elif exc.status_code == 400 and isinstance(exc.__cause__, ValueError):
            # FastAPI's answer to a body it cannot decode (not UTF-8): a malformed body like any other.
            return JSONResponse(error_body(f"the body is not JSON text: {exc.__cause__}", ["body"], "json_invalid"),
                                status_code=422)
        else:
            body = error_body(str(exc.detail), [], "http_error")
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # pydantic's own entries, made JSON-safe: "input" and "ctx" may hold inf, bytes or exceptions.
        items = [{"loc": _safe_loc(e.get("loc", ())), "msg": safe_text(str(e.get("msg", ""))),
                  "type": str(e.get("type", ""))} for e in exc.errors()]
        return JSONResponse(finite({"detail": items}), status_code=422)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(f"internal error ({type(exc).__name__}); the service logged it", [],
                                       "internal_error"), status_code=500)


# psycopg's answer when the pool's pre-ping runs on a connection the server terminated mid-ping:
# the connection is stuck "ACTIVE" and cannot be used; a fresh one a moment later works (seen once
# in a suite run of test_api_db_loss, killing connections every 20 ms).
_STUCK_IN_PING = "can't change 'autocommit' now"


def _connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is the database dropping the connection (not an error in what was asked)."""
    return isinstance(exc, DBAPIError) and (exc.connection_invalidated
                                            or isinstance(exc, OperationalError | InterfaceError)
                                            or _STUCK_IN_PING in str(exc.orig))


class DatabaseLossMiddleware:
    """A 503 with Retry-After, not a 500, when the database drops a connection mid-request (a
    restart, a failover, an operator killing it): the pool replaces it (``pool_pre_ping``), so the
    request a moment later succeeds.  A middleware, not an exception handler, because the token
    check and the rate limit read the database before any route runs, and an exception raised there
    reaches only the server's last-resort handler, which also closes the connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if not _connection_lost(exc) or started:
                raise
            log.warning("database connection lost on %s %s: %s", scope.get("method"), scope.get("path"), exc)
            body = error_body("the database connection was lost while answering; retry the request (a repeated "
                              "plan request finds the stored plan or job)", [], "unavailable")
            await JSONResponse(body, status_code=503, headers={"Retry-After": "1"})(scope, receive, send)
