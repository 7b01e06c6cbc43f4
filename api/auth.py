"""Bearer tokens: made by ``pipeplan token create``, stored as a SHA-256 digest, checked per request.

A token is 32 random bytes, so a plain SHA-256 is enough: a slow password hash protects guessable
secrets, and nobody can guess these.  The token itself is shown once and never stored.

>>> token = new_token()
>>> token.startswith("pp_") and len(digest(token)) == 64
True
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time

from sqlalchemy import select

from api.database import Database
from api.models import TokenRow

__all__ = ["TokenChecker", "create_token", "digest", "new_token"]

_PREFIX = "pp_"


def new_token() -> str:
    return _PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def create_token(db: Database, name: str) -> str:
    """Store a new token called ``name`` and return it; only its digest is kept."""
    name = name.strip()
    if not name or len(name) > 128:
        raise ValueError(f"token name must be 1 to 128 characters, got {name!r}")
    token = new_token()
    with db.write() as session:
        session.add(TokenRow(name=name, digest=digest(token)))
    return token


class TokenChecker:
    """Says whether a presented token is one of the stored ones.

    Known digests are remembered for ``ttl`` seconds so that a busy read path does not query the
    token table on every request; unknown ones are always looked up (a token created a moment ago
    must work at once).
    """

    def __init__(self, db: Database, ttl: float = 30.0) -> None:
        self._db = db
        self._ttl = ttl
        self._known: dict[str, float] = {}
        self._lock = threading.Lock()

    def known(self, token: str | None) -> bool | None:
        """True for a token checked lately, False for one that cannot be valid, None: ask :meth:`valid`."""
        if not token or not token.startswith(_PREFIX) or len(token) > 256:
            return False
        with self._lock:
            seen = self._known.get(digest(token))
        return True if seen is not None and time.monotonic() - seen < self._ttl else None

    def valid(self, token: str | None) -> bool:
        """Whether ``token`` is stored (a database query unless it was checked lately)."""
        quick = self.known(token)
        if quick is not None:
            return quick
        assert token is not None
        key = digest(token)
        now = time.monotonic()
        with self._db.read() as session:
            found = session.execute(select(TokenRow.id).where(TokenRow.digest == key)).first() is not None
        if found:
            with self._lock:
                if len(self._known) > 10_000:  # bounded: a flood of tokens cannot grow it forever
                    self._known.clear()
                self._known[key] = now
        return found
