"""``ETag`` and ``If-None-Match`` for plans and clusters: a client that has the current version gets
a 304 with no body.

The tag is the SHA-256 of the answer's bytes (strong: the same bytes, the same tag), so anything
that changes the answer (a reservation, a release, a new load, a replaced spec) changes the tag.

>>> tag = etag_of(b'{"a":1}')
>>> matches(tag, tag), matches(f'W/{tag}, "other"', tag), matches("*", tag), matches('"x"', tag)
(True, True, True, False)
"""

from __future__ import annotations

import hashlib

from fastapi import Request
from fastapi.responses import Response

__all__ = ["etag_of", "matches", "tagged"]


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def matches(header: str, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (weak comparison, as RFC 9110 asks for GET)."""
    if header.strip() == "*":
        return True
    return any(part.strip().removeprefix("W/") == etag for part in header.split(","))


def tagged(request: Request, body: bytes, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer with its ``ETag``, or 304 when the request's ``If-None-Match`` already has it."""
    etag = etag_of(body)
    out = {**(headers or {}), "ETag": etag}
    wanted = request.headers.get("if-none-match")
    if wanted is not None and matches(wanted, etag):
        return Response(status_code=304, headers=out)
    return Response(body, media_type="application/json", headers=out)
