"""Bearer tokens: made by ``pipeplan token create``, stored as a SHA-256 digest, checked per request.

A token is 32 random bytes, so a plain SHA-256 is enough: a slow password hash protects guessable
secrets, and nobody can guess these.  The token itself is shown once and never stored.

A token acts for an ``owner`` with ``scopes``, each implying the ones before it:

- ``read``: reads (when ``PIPEPLAN_READ_AUTH=token``) and cost predictions;
- ``plan``: also plans, comparisons, registering clusters; changing, releasing, deleting and
  cancelling what its owner made;
- ``admin``: also changing what any owner made.

A revoked token is refused from the next request on: by default (``PIPEPLAN_TOKEN_CACHE_TTL=0``)
every check asks the database, so ``pipeplan token revoke`` in another process takes effect at once.

>>> token = new_token()
>>> token.startswith("pp_") and len(digest(token)) == 64
True
>>> Principal(1, "ana", frozenset({"plan"})).allows("read"), Principal(1, "ana", frozenset({"plan"})).allows("admin")
(True, False)
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import select, update

from pipeplan.api.database import Database
from pipeplan.api.tables import TokenRow, utcnow
from pipeplan.errors import UserError

__all__ = ["SCOPES", "Principal", "Scope", "TokenChecker", "TokenError", "TokenInfo", "create_token", "digest",
           "list_tokens", "new_token", "parse_scopes", "revoke_token"]

_PREFIX = "pp_"

Scope = Literal["read", "plan", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "plan", "admin")  # each implies those before it


class TokenError(UserError, ValueError):
    """A token command given a bad name, owner or scopes, or naming no token it can act on."""


@dataclass(frozen=True)
class Principal:
    """Who a valid token acts for."""

    token_id: int
    owner: str
    scopes: frozenset[str]

    def allows(self, scope: Scope) -> bool:
        return any(SCOPES.index(s) >= SCOPES.index(scope) for s in self.scopes if s in SCOPES)

    @property
    def admin(self) -> bool:
        return "admin" in self.scopes

    def may_change(self, owner: str | None) -> bool:
        """Whether this token may change a thing made by ``owner`` (None: made before owners: admins only)."""
        return self.admin or (owner is not None and owner == self.owner and self.allows("plan"))


@dataclass(frozen=True)
class TokenInfo:
    id: int
    name: str
    owner: str
    scopes: str
    created_at: datetime
    revoked_at: datetime | None


def new_token() -> str:
    return _PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def parse_scopes(text: str) -> frozenset[str]:
    """Scopes from ``"read,plan"`` or ``"read plan"``; a TokenError naming the valid ones otherwise."""
    scopes = frozenset(s for s in text.replace(",", " ").split() if s)
    unknown = sorted(scopes - set(SCOPES))
    if unknown or not scopes:
        raise TokenError(f"scopes must be some of {', '.join(SCOPES)}, got {text!r}")
    return scopes


def _label(value: str, what: str) -> str:
    value = value.strip()
    if not value or len(value) > 128 or not value.isprintable():
        raise TokenError(f"token {what} must be 1 to 128 printable characters, got {value!r}")
    return value


def create_token(db: Database, name: str, owner: str | None = None, scopes: str = "read plan") -> str:
    """Store a new token called ``name``, acting for ``owner`` (default: ``name``) with ``scopes``,
    and return it; only its digest is kept."""
    name = _label(name, "name")
    owner = _label(owner if owner is not None else name, "owner")
    granted = " ".join(s for s in SCOPES if s in parse_scopes(scopes))
    token = new_token()
    with db.write() as session:
        session.add(TokenRow(name=name, digest=digest(token), owner=owner, scopes=granted))
    return token


def list_tokens(db: Database) -> list[TokenInfo]:
    """Every token, revoked ones too, oldest first (never the token itself: it is not stored)."""
    with db.read() as session:
        rows = session.execute(select(TokenRow).order_by(TokenRow.id)).scalars().all()
        return [TokenInfo(r.id, r.name, r.owner, r.scopes, r.created_at, r.revoked_at) for r in rows]


def revoke_token(db: Database, which: str) -> list[TokenInfo]:
    """Revoke the tokens with id ``which``, or else named ``which``; the ones revoked now (a
    TokenError when none matches, or all matching ones are revoked already)."""
    with db.write() as session:
        query = select(TokenRow).where(TokenRow.revoked_at.is_(None))
        query = query.where(TokenRow.id == int(which)) if which.isdigit() else query.where(TokenRow.name == which)
        rows = session.execute(query).scalars().all()
        if not rows:
            raise TokenError(f"no unrevoked token has the id or name {which!r} (see `pipeplan token list`)")
        now = utcnow()
        session.execute(update(TokenRow).where(TokenRow.id.in_([r.id for r in rows])).values(revoked_at=now))
        return [TokenInfo(r.id, r.name, r.owner, r.scopes, r.created_at, now) for r in rows]


class TokenChecker:
    """Says who a presented token acts for, if it is valid.

    With ``ttl`` > 0, valid tokens are remembered that many seconds (a revocation then takes up to
    that long); unknown ones are always looked up (a token created a moment ago must work at once).
    """

    def __init__(self, db: Database, ttl: float = 0.0) -> None:
        self._db = db
        self._ttl = ttl
        self._known: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def plausible(token: str | None) -> bool:
        return bool(token) and token is not None and token.startswith(_PREFIX) and len(token) <= 256

    def cached(self, token: str) -> Principal | None:
        if self._ttl <= 0:
            return None
        with self._lock:
            seen = self._known.get(digest(token))
        return seen[0] if seen is not None and time.monotonic() - seen[1] < self._ttl else None

    def check(self, token: str | None) -> Principal | None:
        """The token's principal, or None when it is not a valid, unrevoked token (a database query
        unless it was checked within ``ttl`` seconds)."""
        if token is None or not self.plausible(token):
            return None
        found = self.cached(token)
        if found is not None:
            return found
        key = digest(token)
        with self._db.read() as session:
            row = session.execute(select(TokenRow.id, TokenRow.owner, TokenRow.scopes)
                                  .where(TokenRow.digest == key, TokenRow.revoked_at.is_(None))).first()
        if row is None:
            return None
        principal = Principal(row.id, row.owner, frozenset(row.scopes.split()))
        if self._ttl > 0:
            with self._lock:
                if len(self._known) > 10_000:  # bounded: a flood of tokens cannot grow it forever
                    self._known.clear()
                self._known[key] = (principal, time.monotonic())
        return principal

    def valid(self, token: str | None) -> bool:
        return self.check(token) is not None
