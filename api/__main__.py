"""``python -m pipeplan.api serve|worker|token …``: the service's own commands, as ``pipeplan serve``,
``pipeplan worker`` and ``pipeplan token …`` run them, without loading the rest of the ``pipeplan``
command line."""

from __future__ import annotations

import argparse
import logging
import sys

from pipeplan.api.cli import USER_ERRORS, register
from pipeplan.errors import user_fault


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeplan.api", description="the pipeplan planning service")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        args.func(args)
    except Exception as exc:  # as pipeplan.cli.main: the user's fault is one line, anything else a traceback
        line = user_fault(exc, USER_ERRORS)
        if line is None:
            raise
        print(f"pipeplan {args.command}: error: {line}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
