"""Subcommands of ``pipeplan`` that belong to this package (registered by :mod:`pipeplan.cli`)."""

from __future__ import annotations

from typing import Any

__all__ = ["USER_ERRORS", "register"]

USER_ERRORS: tuple[type[Exception], ...] = ()


def register(sub: Any) -> None:
    """This package has no subcommands yet."""
    del sub
