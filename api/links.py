"""Links the service hands out (the next page of a list), built from ``PIPEPLAN_PUBLIC_URL``.

Never from the request's ``Host`` header: a client (or anything between it and the service) could
make the service hand out links to a host of its choosing.  Without a public URL, links are paths.

>>> page_link(None, "/v1/plans", {"model": "a b", "limit": 2, "cluster": None})
'/v1/plans?model=a+b&limit=2'
>>> page_link("https://plans.example.com", "/v1/jobs", {"offset": 50})
'https://plans.example.com/v1/jobs?offset=50'
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from fastapi.responses import JSONResponse

from pipeplan.api.errors import ApiError

__all__ = ["check_time_zones", "page_link", "page_response"]


def check_time_zones(**times: datetime | None) -> None:
    """A list's time filters must say their zone: a naive time compares against UTC rows ambiguously."""
    for name, value in times.items():
        if value is not None and value.tzinfo is None:
            raise ApiError(422, "give a time zone, e.g. 2026-11-22T10:00:00Z", ["query", name])


def page_response(base: str | None, path: str, items: Sequence[Any], total: int, limit: int, offset: int,
                  filters: dict[str, Any]) -> JSONResponse:
    """One page of a list, with the link to the next page (same ``filters``) while there is one."""
    following = None
    if offset + len(items) < total:
        following = page_link(base, path, {**filters, "limit": limit, "offset": offset + len(items)})
    return JSONResponse({"items": list(items), "total": total, "limit": limit, "offset": offset, "next": following})


def page_link(base: str | None, path: str, params: dict[str, Any]) -> str:
    """``path`` with the query ``params`` (None values left out), under ``base`` when it is set."""
    query = urlencode({k: v.isoformat() if isinstance(v, datetime) else _text(v)
                       for k, v in params.items() if v is not None})
    return f"{base or ''}{path}" + (f"?{query}" if query else "")


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
