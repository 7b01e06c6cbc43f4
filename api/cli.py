"""Subcommands of ``pipeplan`` that belong to this package (registered by :mod:`pipeplan.cli`).

``pipeplan serve`` runs the planning service; ``pipeplan token create`` makes a bearer token for
its writes.  Heavy imports happen inside the command functions so that ``pipeplan --help`` answers
at once.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["USER_ERRORS", "ServiceError", "register"]


class ServiceError(Exception):
    """The service cannot start or reach its database: printed as one line, exit status 2."""


# Exceptions that mean "the user asked for something wrong": printed as one line, exit status 2.
USER_ERRORS: tuple[type[Exception], ...] = (ServiceError,)

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _settings(**overrides: Any) -> Any:
    from pydantic import ValidationError

    from api.settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(f"PIPEPLAN_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        raise ServiceError(f"bad setting: {problems}") from None
    return settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})


def cmd_serve(args: argparse.Namespace) -> None:
    import logging

    import uvicorn

    from api.main import create_app

    if args.workers is not None and args.workers < 1:
        raise ServiceError(f"--workers must be at least 1, got {args.workers}")
    settings = _settings(workers=args.workers)
    if args.host not in _LOOPBACK and settings.read_auth == "open":
        logging.getLogger("api").warning(
            "serving on %s with open reads: anyone who reaches it can read plans and clusters "
            "(set PIPEPLAN_READ_AUTH=token to require a token)", args.host)
    _check_database(settings.database_url)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level,
                access_log=args.access_log, timeout_graceful_shutdown=10)


def _check_database(url: str) -> None:
    from sqlalchemy.exc import SQLAlchemyError

    from api.database import Database

    db = Database(url)
    try:
        db.migrate()
    except SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc
        raise ServiceError(f"cannot use the database {db.engine.url.render_as_string(hide_password=True)}: "
                           f"{str(cause).strip()}") from None
    finally:
        db.dispose()


def cmd_token_create(args: argparse.Namespace) -> None:
    from api.auth import create_token
    from api.database import Database

    settings = _settings()
    _check_database(settings.database_url)
    db = Database(settings.database_url)
    try:
        token = create_token(db, args.name)
    finally:
        db.dispose()
    print(f"token {args.name!r} created; it is shown only this once:", file=sys.stderr)
    print(token)


def register(sub: Any) -> None:
    """Add this package's subcommands to the ``pipeplan`` subparsers ``sub``."""
    p = sub.add_parser("serve", help="run the planning service over HTTP (FastAPI, uvicorn)",
                       description="Serve the planning API (/v1, OpenAPI at /docs). Settings come from "
                       "PIPEPLAN_* variables: PIPEPLAN_DATABASE_URL (default: an SQLite file in the user "
                       "data directory), PIPEPLAN_READ_AUTH=open|token, PIPEPLAN_QUEUE_SIZE, …")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (8000)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="solver worker processes (default PIPEPLAN_WORKERS, else up to 4 by CPU count)")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.add_argument("--no-access-log", dest="access_log", action="store_false", help="do not log each request")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("token", help="bearer tokens for the service's writes")
    tokens = p.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    c = tokens.add_parser("create", help="make a token and print it (stored hashed; shown once)")
    c.add_argument("--name", default="default", help="a label to tell tokens apart (default)")
    c.set_defaults(func=cmd_token_create)
