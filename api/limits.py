"""The request-size and body-time limits: a body over ``max_body_bytes`` is refused with 413 before
it is parsed; a body still arriving ``body_timeout`` seconds after its request began, with 408.

A declared ``Content-Length`` over the limit is refused before a byte is read; a body without one
(chunked) is counted as it arrives and refused once it passes the limit.  The time limit stops a
client that sends its body a few bytes at a time (slowloris) from holding a connection open.
"""

from __future__ import annotations

import asyncio
import json
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeplan.api.errors import ApiError, error_body

__all__ = ["BodyLimitMiddleware"]


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int, body_timeout: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await _reply(send, 400, "Content-Length is not a number", ["header", "content-length"])
                return
            if size > self.max_bytes:
                await _reply(send, 413, self._message(size), ["body"])
                return
        seen = 0
        limit = self.max_bytes
        deadline = time.monotonic() + self.body_timeout
        complete = False  # once the body is in, a receive waits for the client to go, without a limit

        async def counted() -> Message:
            nonlocal seen, complete
            if complete:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise ApiError(408, f"the request body did not arrive within {self.body_timeout:g} s "
                                    "(PIPEPLAN_BODY_TIMEOUT)", ["body"], "timeout") from None
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # An HTTPException: FastAPI's body reader passes it on to the error handlers.
                    raise ApiError(413, self._message(seen, at_least=True), ["body"], "too_large")
            return message

        await self.app(scope, counted, send)

    def _message(self, size: int, at_least: bool = False) -> str:
        return (f"request body of {'more than ' if at_least else ''}{size} bytes is over this service's limit of "
                f"{self.max_bytes} bytes (PIPEPLAN_MAX_BODY_BYTES)")


async def _reply(send: Send, status: int, msg: str, loc: list[str | int]) -> None:
    body = json.dumps(error_body(msg, loc, "too_large" if status == 413 else "value_error")).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
