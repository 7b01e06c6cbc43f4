"""The one base class of errors that are the caller's fault.

A :class:`UserError` says "what you asked for is wrong, and this message says what to change": a
graph with a cycle, a cluster spec naming an unknown device, options that conflict, a model that
cannot fit.  Whatever runs pipeplan on someone's behalf decides by this class alone whether the
caller or pipeplan is at fault: the service answers a UserError with a 4xx carrying its message and
anything else with a 500 that logs the traceback; the command line prints a UserError as one line.

It lives at the top of the namespace and imports nothing, so every package — ``costmodel`` at the
bottom included — can subclass it without an import cycle or a dependency on a layer above.

Each package's errors subclass it next to the built-in class callers already catch, usually
``ValueError`` (``class GraphError(UserError, ValueError)``), so ``except ValueError`` still works.
A bare ``ValueError`` is *not* a UserError: numpy's, or an internal invariant's, is pipeplan's fault.

>>> class ShapeError(UserError, ValueError):
...     pass
>>> isinstance(ShapeError("bad shape"), UserError), isinstance(ValueError("bad shape"), UserError)
(True, False)
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """An error in what the caller asked for; its message names the part at fault and the fix."""
