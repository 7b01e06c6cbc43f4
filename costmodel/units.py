"""Parse human-written quantities ("80GiB", "312TFLOPS", "600GB/s", "5us") into SI floats.

Cluster specs are written by people; letting them say ``memory: 80GiB`` instead of
``memory: 85899345920`` removes a whole class of off-by-1000 mistakes.  Plain numbers are
taken as already in base units (bytes, FLOP/s, bytes/s, seconds).

>>> parse_bytes("80GiB")
85899345920
>>> parse_rate("600GB/s")
600000000000.0
>>> parse_seconds("5us")
5e-06
"""

from __future__ import annotations

import math
import re

from pipeplan.errors import UserError

__all__ = [
    "UnitError",
    "format_bytes",
    "format_flops",
    "format_seconds",
    "parse_bytes",
    "parse_flops",
    "parse_rate",
    "parse_seconds",
]


class UnitError(UserError, ValueError):
    """A quantity could not be parsed; the message names the text and what was expected."""


_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
# Divisors rather than multipliers: 5 / 1e6 is exactly 5e-06, 5 * 1e-6 is not.
_TIME = {"s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "ns": 1e9}


def _split(text: str) -> tuple[float, str]:
    m = re.fullmatch(rf"\s*{_NUMBER}\s*([A-Za-zµ/]*)\s*", text)
    if not m:
        raise UnitError(f"cannot read quantity {text!r}: expected a number with an optional unit")
    return float(m.group(1)), m.group(2)


def _scale(prefix: str, text: str, what: str) -> float:
    if prefix in _BINARY:
        return _BINARY[prefix]
    if prefix in _DECIMAL:
        return _DECIMAL[prefix]
    raise UnitError(f"unknown unit prefix {prefix!r} in {text!r} for {what}")


def _finite(result: float, value: object, what: str) -> float:
    if not math.isfinite(result):
        raise UnitError(f"{what} must be a finite number, got {value!r}")
    return result


def _quantity(value: float | int | str, suffixes: tuple[str, ...], what: str) -> float:
    if isinstance(value, bool):
        raise UnitError(f"{what} must be a number or a string with a unit, not {value!r}")
    if isinstance(value, (int, float)):
        return _finite(float(value), value, what)
    if not isinstance(value, str):
        raise UnitError(f"{what} must be a number or a string with a unit, not {value!r}")
    number, unit = _split(value)
    for suffix in suffixes:
        if unit.endswith(suffix):
            return _finite(number * _scale(unit[: len(unit) - len(suffix)], value, what), value, what)
    if unit == "":
        return _finite(number, value, what)
    raise UnitError(f"cannot read {what} {value!r}: unit must end in one of {', '.join(suffixes)}")


def parse_bytes(value: float | int | str) -> int:
    """Bytes from ``"16GiB"``, ``"512MB"``, ``"1e9"`` or a number."""
    return round(_quantity(value, ("B",), "a size in bytes"))


def parse_flops(value: float | int | str) -> float:
    """FLOP/s from ``"312TFLOPS"``, ``"19.5TFLOP/s"`` or a number."""
    return _quantity(value, ("FLOP/s", "FLOPS", "flops", "FLOP"), "a compute rate")


def parse_rate(value: float | int | str) -> float:
    """Bytes per second from ``"2TB/s"``, ``"25GB/s"``, ``"100Gbit/s"`` or a number."""
    if isinstance(value, str) and value.strip().endswith(("bit/s", "bps")):
        number, unit = _split(value)
        suffix = "bit/s" if unit.endswith("bit/s") else "bps"
        return number * _scale(unit[: len(unit) - len(suffix)], value, "a bandwidth") / 8.0
    return _quantity(value, ("B/s", "Bps"), "a bandwidth")


def parse_seconds(value: float | int | str) -> float:
    """Seconds from ``"5us"``, ``"1.5ms"``, ``"2s"`` or a number."""
    if isinstance(value, bool):
        raise UnitError(f"a duration must be a number or a string with a unit, not {value!r}")
    if isinstance(value, (int, float)):
        return _finite(float(value), value, "a duration")
    if not isinstance(value, str):
        raise UnitError(f"a duration must be a number or a string with a unit, not {value!r}")
    number, unit = _split(value)
    if unit == "":
        return _finite(number, value, "a duration")
    if unit not in _TIME:
        raise UnitError(f"cannot read duration {value!r}: unit must be one of {', '.join(_TIME)}")
    return number / _TIME[unit]


def _three_digits(value: float) -> str:
    """Three significant digits without switching to 1e+03 notation."""
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _human(value: float, units: tuple[str, ...], base: float) -> str:
    for unit in units[:-1]:
        if abs(value) < base:
            return f"{_three_digits(value)} {unit}"
        value /= base
    return f"{_three_digits(value)} {units[-1]}"


def format_bytes(n: float) -> str:
    """``format_bytes(1536) == '1.5 KiB'``."""
    return _human(float(n), ("B", "KiB", "MiB", "GiB", "TiB"), 1024.0)


def format_flops(n: float) -> str:
    """``format_flops(2.5e9) == '2.5 GFLOP'``."""
    return _human(float(n), ("FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"), 1000.0)


def format_seconds(t: float) -> str:
    """``format_seconds(0.0015) == '1.5 ms'``."""
    if t == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(t) >= scale:
            return f"{_three_digits(t / scale)} {unit}"
    return f"{_three_digits(t / 1e-9)} ns"
