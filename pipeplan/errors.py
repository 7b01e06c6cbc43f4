"""The one base class of errors that are the caller's fault, and the command line's boundary around it.

A :class:`UserError` says "what you asked for is wrong, and this message says what to change": a
graph with a cycle, a cluster spec naming an unknown device, options that conflict, a model that
cannot fit.  Whatever runs pipeplan on someone's behalf decides by this class alone whether the
caller or pipeplan is at fault: the service answers a UserError with a 4xx carrying its message and
anything else with a 500 that logs the traceback; the command line prints a UserError as one line
(exit status 2, :func:`user_fault`) and lets anything else show its traceback (exit status 1).

It lives at the top of the namespace and imports nothing of pipeplan, so every package — ``costmodel``
at the bottom included — can subclass it without an import cycle or a dependency on a layer above.

Each package's errors subclass it next to the built-in class callers already catch, usually
``ValueError`` (``class GraphError(UserError, ValueError)``), so ``except ValueError`` still works.
A bare ``ValueError`` is *not* a UserError: numpy's, or an internal invariant's, is pipeplan's fault.

>>> class ShapeError(UserError, ValueError):
...     pass
>>> isinstance(ShapeError("bad shape"), UserError), isinstance(ValueError("bad shape"), UserError)
(True, False)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["UsageError", "UserError", "user_fault", "user_input"]


class UserError(Exception):
    """An error in what the caller asked for; its message names the part at fault and the fix."""


class UsageError(UserError, ValueError):
    """A command's arguments or options that cannot be used as given (they conflict, or one cannot be read)."""


@contextmanager
def user_input(what: str) -> Iterator[None]:
    """Treat a plain ``ValueError`` raised inside as a mistake in ``what`` (an option and its value, a
    file the caller named): a :class:`UsageError` naming it (``what`` empty: the message names it).
    For the boundary around a call that only reads that input (a library parser that raises
    ``ValueError``), never around work that may fail for pipeplan's own reasons, whose ``ValueError``
    must keep its traceback.

    >>> try:
    ...     with user_input("--load gpu1=lots"):
    ...         int("lots")
    ... except UsageError as exc:
    ...     print(exc)
    --load gpu1=lots: invalid literal for int() with base 10: 'lots'
    """
    try:
        yield
    except UserError:
        raise
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}" if what else str(exc)) from exc


def user_fault(exc: BaseException, also: tuple[type[BaseException], ...] = ()) -> str | None:
    """The one line a command prints for ``exc`` when the caller is at fault, else None (a traceback is due).

    The caller's fault: a :class:`UserError` (or one of ``also``, a command's own expected failures), and
    an ``OSError`` about a file it named (``exc.filename`` set: a missing file, a folder, no permission).

    >>> user_fault(FileNotFoundError(2, "No such file or directory", "plan.json"))
    'No such file or directory: plan.json'
    >>> user_fault(ValueError("operands could not be broadcast")) is None
    True
    """
    if isinstance(exc, (UserError, *also)):
        return str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename is not None:
        target = f"{exc.filename} -> {exc.filename2}" if exc.filename2 is not None else str(exc.filename)
        return f"{exc.strerror or type(exc).__name__}: {target}"
    return None
