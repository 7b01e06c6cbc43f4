"""Subcommands of ``pipeplan`` that belong to this package (registered by :mod:`pipeplan.cli`).

``pipeplan serve`` runs the planning service; ``pipeplan worker`` solves its queued jobs (with
``PIPEPLAN_JOB_QUEUE=postgresql``); ``pipeplan token create|list|revoke`` manage its bearer tokens
(a revocation takes effect at the server's next request: it asks the database).
Heavy imports happen inside the command functions so that ``pipeplan --help`` answers at once.
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

    from pipeplan.api.settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(f"PIPEPLAN_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        raise ServiceError(f"bad setting: {problems}") from None
    return settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})


def cmd_serve(args: argparse.Namespace) -> None:
    import logging

    import uvicorn

    from pipeplan.api.logs import logging_config
    from pipeplan.api.main import create_app

    if args.workers is not None and args.workers < 1:
        raise ServiceError(f"--workers must be at least 1, got {args.workers}")
    settings = _settings(workers=args.workers)
    if args.host not in _LOOPBACK and settings.read_auth == "open":
        logging.getLogger("api").warning(
            "serving on %s with open reads: anyone who reaches it can read plans and clusters "
            "(set PIPEPLAN_READ_AUTH=token to require a token)", args.host)
    _check_database(settings.database_url)
    from pipeplan.api.planning import stopping

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            stopping.set()  # requests waiting for a job answer 202 now, instead of being cut at the end
            super().handle_exit(sig, frame)

    # Our access log (api.access) carries the request ID; uvicorn's own is off.
    config = uvicorn.Config(create_app(settings), host=args.host, port=args.port, log_level=args.log_level,
                            access_log=False, timeout_graceful_shutdown=10,
                            log_config=logging_config(args.log_level, settings.log_format, args.access_log))
    server = Server(config)
    server.run()
    if not server.started:
        raise ServiceError(f"the service could not start on {args.host}:{args.port} (see the log above)")


def cmd_worker(args: argparse.Namespace) -> None:
    import logging.config

    from pipeplan.api.logs import logging_config
    from pipeplan.api.queue_worker import QueueWorker

    if args.workers is not None and args.workers < 1:
        raise ServiceError(f"--workers must be at least 1, got {args.workers}")
    settings = _settings(workers=args.workers)
    if settings.job_queue != "postgresql":
        raise ServiceError("pipeplan worker takes jobs from the durable queue: set PIPEPLAN_JOB_QUEUE=postgresql "
                           "and a PostgreSQL PIPEPLAN_DATABASE_URL (the servers need the same)")
    _check_database(settings.database_url)
    logging.config.dictConfig(logging_config(args.log_level, settings.log_format, access=False))
    QueueWorker(settings, settings.workers).run()


def _check_database(url: str) -> None:
    from sqlalchemy.exc import SQLAlchemyError

    from pipeplan.api.database import Database

    db = Database(url)
    try:
        db.migrate()
    except SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc
        raise ServiceError(f"cannot use the database {db.engine.url.render_as_string(hide_password=True)}: "
                           f"{str(cause).strip()}") from None
    finally:
        db.dispose()


def _database() -> Any:
    from pipeplan.api.database import Database

    settings = _settings()
    _check_database(settings.database_url)
    return Database(settings.database_url)


def cmd_token_create(args: argparse.Namespace) -> None:
    from pipeplan.api.auth import create_token

    db = _database()
    try:
        token = create_token(db, args.name, args.owner, args.scopes)
    finally:
        db.dispose()
    print(f"token {args.name!r} created for owner {args.owner or args.name!r} with scopes {args.scopes!r}; "
          "it is shown only this once:", file=sys.stderr)
    print(token)


def cmd_token_list(args: argparse.Namespace) -> None:
    from pipeplan.api.auth import list_tokens

    db = _database()
    try:
        tokens = list_tokens(db)
    finally:
        db.dispose()
    if args.json:
        import json

        print(json.dumps([{"id": t.id, "name": t.name, "owner": t.owner, "scopes": t.scopes.split(),
                           "created_at": t.created_at.isoformat(),
                           "revoked_at": t.revoked_at.isoformat() if t.revoked_at else None} for t in tokens]))
        return
    print(f"{'id':>4}  {'name':<20} {'owner':<20} {'scopes':<16} {'created':<20} revoked")
    for t in tokens:
        revoked = t.revoked_at.strftime("%Y-%m-%d %H:%M:%S") if t.revoked_at else "-"
        print(f"{t.id:>4}  {t.name:<20} {t.owner:<20} {t.scopes:<16} {t.created_at:%Y-%m-%d %H:%M:%S}  {revoked}")


def cmd_token_revoke(args: argparse.Namespace) -> None:
    from pipeplan.api.auth import revoke_token

    db = _database()
    try:
        revoked = revoke_token(db, args.token)
    finally:
        db.dispose()
    for t in revoked:
        print(f"revoked token {t.id} ({t.name!r}, owner {t.owner!r})")


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

    p = sub.add_parser("worker", help="solve the service's queued jobs (PIPEPLAN_JOB_QUEUE=postgresql)",
                       description="Take jobs from the service's durable queue (PIPEPLAN_JOB_QUEUE=postgresql, on "
                       "the PostgreSQL database of PIPEPLAN_DATABASE_URL) and solve them in N processes, on this "
                       "machine, beside any number of servers and other workers. SIGTERM or Ctrl-C drains: no new "
                       "jobs; running ones may finish for PIPEPLAN_DRAIN_TIMEOUT seconds, the rest are handed back.")
    p.add_argument("--workers", type=int, metavar="N",
                   help="solver processes, and so jobs at once (default PIPEPLAN_WORKERS, else up to 4 by CPU count)")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("token", help="bearer tokens for the service's writes")
    tokens = p.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    c = tokens.add_parser("create", help="make a token and print it (stored hashed; shown once)")
    c.add_argument("--name", default="default", help="a label to tell tokens apart (default)")
    c.add_argument("--owner", help="who the token acts for: what it makes, only this owner (or an admin) may "
                   "change (default: the name)")
    c.add_argument("--scopes", default="read,plan",
                   help="read (reads, predictions), plan (also plans, clusters, cancelling its own jobs), admin "
                   "(also changing anyone's); comma-separated (read,plan)")
    c.set_defaults(func=cmd_token_create)
    c = tokens.add_parser("list", help="every token: id, name, owner, scopes, created, revoked")
    c.add_argument("--json", action="store_true", help="as a JSON list")
    c.set_defaults(func=cmd_token_list)
    c = tokens.add_parser("revoke", help="refuse a token from the server's next request on")
    c.add_argument("token", metavar="ID|NAME", help="the token's id, or its name (every token of that name)")
    c.set_defaults(func=cmd_token_revoke)
