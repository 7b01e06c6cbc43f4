"""Links the service hands out (the next page of a list), built from ``PIPEPLAN_PUBLIC_URL``.

Never from the request's ``Host`` header: a client (or anything between it and the service) could
make the service hand out links to a host of its choosing.  Without a public URL, links are paths.

>>> page_link(None, "/v1/plans", {"model": "a b", "limit": 2, "cluster": None})
'/v1/plans?model=a+b&limit=2'
>>> page_link("https://plans.example.com", "/v1/jobs", {"offset": 50})
'https://plans.example.com/v1/jobs?offset=50'
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

__all__ = ["page_link"]


def page_link(base: str | None, path: str, params: dict[str, Any]) -> str:
    """``path`` with the query ``params`` (None values left out), under ``base`` when it is set."""
    query = urlencode({k: v.isoformat() if isinstance(v, datetime) else _text(v)
                       for k, v in params.items() if v is not None})
    return f"{base or ''}{path}" + (f"?{query}" if query else "")


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
