"""``Idempotency-Key``: a retried write gets what the first request made, not a second one.

A key is remembered per token and route for ``PIPEPLAN_IDEMPOTENCY_TTL`` seconds with the SHA-256 of
the request body (``wait`` left out: how long a client waits does not change what it asks).  The
first request claims the key by inserting its row (the primary key makes the claim atomic across
threads and replicas), then records the job and plan it made.  A request with a claimed key and
the same body gets that job or plan; with another body, a 409 naming the conflict.

>>> scope_key("pp_x", "plan", "k1") == scope_key("pp_x", "plan", "k1") != scope_key("pp_y", "plan", "k1")
True
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError

from pipeplan.api.auth import digest
from pipeplan.api.database import Database
from pipeplan.api.keys import digest_of, digest_text
from pipeplan.api.tables import IdempotencyRow, utcnow

__all__ = ["KEY_PATTERN", "Claim", "claim", "fingerprint", "record", "scope_key"]

KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"  # visible ASCII, as in the IETF draft's examples


@dataclass(frozen=True)
class Claim:
    key: str
    fingerprint: str
    job_id: str | None
    plan_id: str | None
    first: bool  # this request made the claim


def scope_key(token: str, route: str, header: str) -> str:
    """The stored key: the token's digest, the route and the client's key, hashed together."""
    return digest_text(f"{digest(token)}\n{route}\n{header}")


def fingerprint(body: dict[str, Any]) -> str:
    return digest_of({k: v for k, v in body.items() if k != "wait"})


def claim(db: Database, key: str, print_: str, ttl: float) -> Claim:
    """Claim ``key`` for a request with body fingerprint ``print_``, or read who claimed it first."""
    for _ in range(3):
        try:
            with db.write() as session:
                row = session.get(IdempotencyRow, key, with_for_update=True)
                if row is not None and utcnow() - row.created_at > timedelta(seconds=ttl):
                    session.delete(row)  # expired: the key is free again
                    session.flush()
                    row = None
                if row is not None:
                    return Claim(key, row.fingerprint, row.job_id, row.plan_id, first=False)
                session.add(IdempotencyRow(key=key, fingerprint=print_, created_at=utcnow()))
            return Claim(key, print_, None, None, first=True)
        except IntegrityError:  # claimed by a concurrent request a moment ago: read its claim
            continue
    raise RuntimeError(f"could not claim idempotency key {key}")


def record(db: Database, key: str, job_id: str | None, plan_id: str | None) -> None:
    """Remember what the request holding ``key`` made (its job, its plan)."""
    values = {name: value for name, value in (("job_id", job_id), ("plan_id", plan_id)) if value is not None}
    if values:
        with db.write() as session:
            session.execute(update(IdempotencyRow).where(IdempotencyRow.key == key).values(**values))
