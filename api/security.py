"""Where the bearer token is checked: before the body is read, and in the OpenAPI schema only where
the service asks for it.

The routes say which token they need through their dependencies (:data:`pipeplan.api.deps.Writer` for writes,
:data:`pipeplan.api.deps.Reader` for reads).  :class:`AuthMiddleware` finds the route a request is for and
checks the token *before* the body is received: a request with a wrong token is a 401 whether its
body is malformed, huge or still arriving, and nothing is parsed for it.  :func:`install_openapi`
drops the security requirement (and its 401) from reads while ``PIPEPLAN_READ_AUTH=open``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.security.utils import get_authorization_scheme_param
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from pipeplan.api.deps import Services, TokenAuth, check_token
from pipeplan.api.errors import ApiError, error_body

__all__ = ["AuthMiddleware", "Need", "api_routes", "install_openapi", "route_auth", "route_need"]

Need = Literal["write", "read"] | None


def api_routes(app: FastAPI) -> list[APIRoute]:
    """Every operation of ``app``, through included routers (whose routes carry their prefix)."""
    return [c.original_route for c in iter_route_contexts(app.router.routes) if isinstance(c.original_route, APIRoute)]


def route_auth(route: BaseRoute) -> TokenAuth | None:
    """The token check a route asks for through its dependencies, if any."""
    if not isinstance(route, APIRoute):
        return None
    for dependency in route.dependant.dependencies:
        if isinstance(dependency.call, TokenAuth):
            return dependency.call
    return None


def route_need(route: BaseRoute) -> Need:
    """The token a route asks for: 'write' (always checked), 'read' (checked when reads are closed) or None."""
    auth = route_auth(route)
    if auth is None:
        return None
    return "write" if auth.always else "read"


class AuthMiddleware:
    """Checks the bearer token of requests for token routes before their body is read."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._needs: list[tuple[BaseRoute, TokenAuth | None]] | None = None

    def _need(self, scope: Scope) -> TokenAuth | None:
        if self._needs is None:  # routes are final once the app serves
            self._needs = [(route, route_auth(route)) for route in api_routes(scope["app"])]
        for route, need in self._needs:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return need
        return None  # no route, or a method it does not take: the router answers that

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        need = self._need(scope)
        services: Services | None = getattr(scope["app"].state, "services", None)
        if need is None or services is None or (not need.always and services.settings.read_auth == "open"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        scheme, token = get_authorization_scheme_param(headers.get(b"authorization", b"").decode("latin-1"))
        try:
            principal = await check_token(services, token if scheme.lower() == "bearer" and token else None,
                                          need.what, need.scope)
        except ApiError as exc:
            await _reply(send, exc, has_body=b"content-length" in headers or b"transfer-encoding" in headers)
            return
        scope.setdefault("state", {})["principal"] = principal  # request.state.principal, for the routes
        await self.app(scope, receive, send)


async def _reply(send: Send, exc: ApiError, has_body: bool) -> None:
    body = json.dumps(error_body(exc.detail, exc.loc, exc.kind)).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    head += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (exc.headers or {}).items()]
    if has_body:  # the unread body is not drained: the connection cannot carry another request
        head.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": exc.status_code, "headers": head})
    await send({"type": "http.response.body", "body": body})


def install_openapi(app: FastAPI, read_auth: str) -> None:
    """Make ``app``'s OpenAPI schema declare bearer security (and 401) only where it is checked."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        if read_auth == "open":
            for route in api_routes(app):
                if route_need(route) != "read":
                    continue
                for method in route.methods or ():
                    operation = schema["paths"][route.path_format][method.lower()]
                    operation.pop("security", None)
                    operation["responses"].pop("401", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
