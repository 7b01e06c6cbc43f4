"""Text a client sends: refused (422 naming the field) unless every database stores it and every
answer can echo it.

JSON may carry a lone UTF-16 surrogate (``"\\ud800"``); Python's ``json`` decodes it into a ``str``
that no UTF-8 encoder accepts, so it would fail later, in the database driver or in the answer's
encoder, long after the request was accepted.  NUL is refused too: PostgreSQL's text cannot hold it.

>>> find_bad_text({"a": ["ok", "bad\\ud800"]})
(['a', 1], 'a lone UTF-16 surrogate (U+D800)')
>>> find_bad_text({"a": "ok"}) is None
True
>>> safe_text("x\\ud800")
'x\\\\ud800'
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_text", "find_bad_text", "safe_text"]

Path = list[str | int]


def _problem(text: str) -> str | None:
    if text.isascii():  # the common case, checked in C
        return "a NUL character (U+0000)" if "\x00" in text else None
    if "\x00" in text:
        return "a NUL character (U+0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone UTF-16 surrogate (U+{ord(text[exc.start]):04X})"
    return None


def find_bad_text(value: Any, path: Path | None = None) -> tuple[Path, str] | None:
    """The path to the first string (or mapping key) of a JSON value that cannot be stored, and why."""
    path = [] if path is None else path
    stack: list[tuple[Any, Path]] = [(value, path)]
    while stack:  # iterative: a deeply nested body must not exhaust the recursion limit
        item, at = stack.pop()
        if isinstance(item, str):
            why = _problem(item)
            if why is not None:
                return at, why
        elif isinstance(item, dict):
            for key, sub in reversed(list(item.items())):
                if isinstance(key, str) and (why := _problem(key)) is not None:
                    return [*at, safe_text(key)], f"{why} in a key"
                stack.append((sub, [*at, key]))
        elif isinstance(item, list | tuple):
            stack.extend((sub, [*at, i]) for i, sub in reversed(list(enumerate(item))))
    return None


def check_text(value: Any, loc: Path) -> None:
    """Raise a 422 :class:`pipeplan.api.errors.ApiError` at the first string of ``value`` that cannot be stored."""
    found = find_bad_text(value)
    if found is not None:
        from pipeplan.api.errors import ApiError

        at, why = found
        raise ApiError(422, f"text must be valid Unicode without NUL; this string has {why}", [*loc, *at],
                       "string_unicode")


def safe_text(text: str) -> str:
    """``text`` with anything UTF-8 cannot encode escaped: always safe to echo in an answer."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
