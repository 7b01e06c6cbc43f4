"""What routes depend on: the app's services, and the bearer-token checks for writes and reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from api.auth import TokenChecker
from api.costmodels import CostModels
from api.database import Database
from api.errors import ApiError
from api.metrics import Metrics
from api.planning import Planning
from api.pool import WorkerPool
from api.registry import Registry
from api.schemas.common import ErrorResponse
from api.settings import Settings
from api.zoo import ZooCatalog

__all__ = ["ERRORS", "Reader", "Services", "ServicesDep", "TokenAuth", "Writer", "check_token", "errors"]


@dataclass
class Services:
    settings: Settings
    db: Database
    pool: WorkerPool
    registry: Registry
    costmodels: CostModels
    zoo: ZooCatalog
    planning: Planning
    tokens: TokenChecker
    metrics: Metrics


# Dependencies are coroutines: FastAPI runs a plain function dependency in the threadpool, and a
# thread hop per dependency is most of the cost of a cached read.
async def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(_services)]


async def check_token(services: Services, credentials: HTTPAuthorizationCredentials | str | None,
                      what: str) -> None:
    """Raise a 401 unless ``credentials`` (a bearer token or its parsed header) is a stored token."""
    if credentials is None:
        raise ApiError(401, f"{what} need a bearer token (Authorization: Bearer …; see `pipeplan token create`)",
                       ["header", "Authorization"], "unauthorized", headers={"WWW-Authenticate": "Bearer"})
    token = credentials if isinstance(credentials, str) else credentials.credentials
    valid = services.tokens.known(token)
    if valid is None:  # not seen lately: ask the database, off the event loop
        valid = await run_in_threadpool(services.tokens.valid, token)
    if not valid:
        raise ApiError(401, "the bearer token is not valid", ["header", "Authorization"], "unauthorized",
                       headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


class TokenAuth(HTTPBearer):
    """The bearer check as one dependency (it is also what puts the scheme in the OpenAPI schema);
    reads pass untouched while the service's reads are open."""

    def __init__(self, what: str, always: bool) -> None:
        super().__init__(auto_error=False, scheme_name="HTTPBearer",
                         description="a token made with `pipeplan token create`")
        self.what, self.always = what, always

    async def __call__(self, request: Request) -> HTTPAuthorizationCredentials | None:  # type: ignore[override]
        services: Services = request.app.state.services
        if not self.always and services.settings.read_auth == "open":
            return None
        credentials = await super().__call__(request)
        await check_token(services, credentials, self.what)
        return credentials


Writer = Depends(TokenAuth("writes", always=True))
Reader = Depends(TokenAuth("reads", always=False))

ERRORS: dict[int, str] = {
    401: "missing or wrong bearer token; nothing was written",
    404: "no such resource",
    409: "the change conflicts with reservations, or an Idempotency-Key was used with another body",
    413: "the request or its graph is over the service's size limits",
    422: "a field is wrong; `loc` names it",
    503: "the solver queue is full (see Retry-After), or a worker died",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error answers a route gives."""
    return {code: {"model": ErrorResponse, "description": ERRORS[code]} for code in codes}
