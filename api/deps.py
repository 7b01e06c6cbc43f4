"""What routes depend on: the app's services, the bearer-token checks for writes and reads, and who
a token acts for (its owner may change what it made)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pipeplan.api.auth import Principal, Scope, TokenChecker
from pipeplan.api.costmodels import CostModels
from pipeplan.api.database import Database
from pipeplan.api.errors import ApiError
from pipeplan.api.metrics import Metrics
from pipeplan.api.planning import Planning
from pipeplan.api.pool import WorkerPool
from pipeplan.api.queue import JobQueue
from pipeplan.api.registry import Registry
from pipeplan.api.schemas.common import ErrorResponse
from pipeplan.api.settings import Settings
from pipeplan.api.zoo import ZooCatalog

if TYPE_CHECKING:
    from pipeplan.api.placement.service import Placement

__all__ = ["ERRORS", "Predictor", "PrincipalDep", "Reader", "Services", "ServicesDep", "TokenAuth", "Writer",
           "check_token", "errors", "owner_check"]


@dataclass
class Services:
    settings: Settings
    db: Database
    pool: WorkerPool | None  # the server's own solvers; None when jobs go through the durable queue
    registry: Registry
    costmodels: CostModels
    zoo: ZooCatalog
    planning: Planning
    tokens: TokenChecker
    metrics: Metrics
    predictors: WorkerPool  # cost predictions, apart from the solvers
    queue: JobQueue | None = None  # the durable queue (PIPEPLAN_JOB_QUEUE=postgresql)
    placement: Placement | None = None  # deployments' placement decisions (pipeplan.api.placement)


# Dependencies are coroutines: FastAPI runs a plain function dependency in the threadpool, and a
# thread hop per dependency is most of the cost of a cached read.
async def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(_services)]


async def check_token(services: Services, credentials: HTTPAuthorizationCredentials | str | None,
                      what: str, scope: Scope) -> Principal:
    """Who ``credentials`` (a bearer token or its parsed header) act for: a 401 unless it is a valid
    token, a 403 unless it has ``scope``."""
    if credentials is None:
        raise ApiError(401, f"{what} need a bearer token (Authorization: Bearer …; see `pipeplan token create`)",
                       ["header", "Authorization"], "unauthorized", headers={"WWW-Authenticate": "Bearer"})
    token = credentials if isinstance(credentials, str) else credentials.credentials
    principal = services.tokens.cached(token) if services.tokens.plausible(token) else None
    if principal is None and services.tokens.plausible(token):
        principal = await services.db.quick(lambda: services.tokens.check(token))
    if principal is None:
        raise ApiError(401, "the bearer token is not valid (unknown or revoked)", ["header", "Authorization"],
                       "unauthorized", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    if not principal.allows(scope):
        raise ApiError(403, f"{what} need a token with the {scope!r} scope; this one has "
                       f"{' '.join(sorted(principal.scopes))} (`pipeplan token create --scopes …`)",
                       ["header", "Authorization"], "forbidden",
                       headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scope}"'})
    return principal


class TokenAuth(HTTPBearer):
    """The bearer check as one dependency (it is also what puts the scheme in the OpenAPI schema);
    reads pass untouched while the service's reads are open.  :class:`pipeplan.api.security.AuthMiddleware`
    runs the same check before the body is read and leaves the principal on the request."""

    def __init__(self, what: str, always: bool, scope: Scope) -> None:
        super().__init__(auto_error=False, scheme_name="HTTPBearer",
                         description="a token made with `pipeplan token create`")
        self.what, self.always, self.scope = what, always, scope

    async def __call__(self, request: Request) -> HTTPAuthorizationCredentials | None:  # type: ignore[override]
        services: Services = request.app.state.services
        if not self.always and services.settings.read_auth == "open":
            return None
        credentials = await super().__call__(request)
        if getattr(request.state, "principal", None) is None:  # the middleware did not check it
            request.state.principal = await check_token(services, credentials, self.what, self.scope)
        return credentials


async def _principal(request: Request) -> Principal | None:
    principal: Principal | None = getattr(request.state, "principal", None)
    return principal


Writer = Depends(TokenAuth("writes", always=True, scope="plan"))
Reader = Depends(TokenAuth("reads", always=False, scope="read"))
Predictor = Depends(TokenAuth("predictions", always=True, scope="read"))  # a read that takes a worker's time
# Who the request's token acts for (None on an open read); declared after Writer or Reader.
PrincipalDep = Annotated[Principal | None, Depends(_principal)]


def owner_check(principal: Principal | None, owner: str | None, what: str, loc: list[str | int]) -> None:
    """A 403 unless ``principal`` may change ``what``, made by ``owner``."""
    if principal is not None and principal.may_change(owner):
        return
    whose = f"belongs to {owner!r}" if owner is not None else "was made before tokens had owners"
    raise ApiError(403, f"{what} {whose}; only its owner or an admin token may change it", loc, "forbidden")


ERRORS: dict[int, str] = {
    401: "missing, wrong or revoked bearer token; nothing was written",
    403: "the token lacks the scope, or the resource belongs to another owner (an admin token may change it)",
    404: "no such resource",
    409: "the change conflicts with reservations, or an Idempotency-Key was used with another body",
    413: "the request or its graph is over the service's size limits",
    422: "a field is wrong; `loc` names it",
    503: "the solver queue is full (see Retry-After), or a worker died",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error answers a route gives."""
    return {code: {"model": ErrorResponse, "description": ERRORS[code]} for code in codes}
