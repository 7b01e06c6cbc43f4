"""Human-written quantities, device loads and device specs: exact values and refusals that name the text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from pipeplan.costmodel.hardware import Contention, Device
from pipeplan.costmodel.units import (
    UnitError,
    format_bytes,
    format_flops,
    format_seconds,
    parse_bytes,
    parse_flops,
    parse_rate,
    parse_seconds,
)

# -- parsing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("80GiB", 85899345920),
    ("16GiB", 16 * 2**30),
    ("1KiB", 1024),
    ("3MiB", 3 * 2**20),
    ("2TiB", 2 * 2**40),
    ("1PiB", 2**50),
    ("512MB", 512_000_000),
    ("5kB", 5000),
    ("5KB", 5000),
    ("1.5GB", 1_500_000_000),
    ("100B", 100),
    (" 4 GiB ", 4 * 2**30),
    ("1e9", 1_000_000_000),
    ("1e3B", 1000),
    ("42", 42),
    (".5KiB", 512),
])
def test_parse_bytes(text: str, expected: int) -> None:
    value = parse_bytes(text)
    assert value == expected and isinstance(value, int)


@pytest.mark.parametrize(("number", "expected"), [(1024, 1024), (0, 0), (2.6, 3), (1e9, 10**9)])
def test_parse_bytes_numbers_pass_through(number: float, expected: int) -> None:
    value = parse_bytes(number)
    assert value == expected and isinstance(value, int)


@pytest.mark.parametrize(("text", "expected"), [
    ("312TFLOPS", 312e12),
    ("19.5TFLOP/s", 19.5e12),
    ("100Tflops", 100e12),
    ("2GFLOP", 2e9),
    ("1PFLOPS", 1e15),
    ("5e12", 5e12),
    ("7", 7.0),
])
def test_parse_flops(text: str, expected: float) -> None:
    assert parse_flops(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("600GB/s", 600e9),
    ("2TB/s", 2e12),
    ("2039GB/s", 2039e9),
    ("25GBps", 25e9),
    ("1GiB/s", 2**30),
    ("100Gbit/s", 12.5e9),
    ("100Gbps", 12.5e9),
    ("8bit/s", 1.0),
    ("400 Mbit/s", 50e6),
    ("1e9", 1e9),
])
def test_parse_rate(text: str, expected: float) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("1.5ms", 0.0015),
    ("5us", 5e-6),
    ("5µs", 5e-6),
    ("20ns", 20e-9),
    ("2s", 2.0),
    ("0.25", 0.25),
    ("3", 3.0),
])
def test_parse_seconds(text: str, expected: float) -> None:
    assert parse_seconds(text) == expected


@pytest.mark.parametrize("parse", [parse_flops, parse_rate, parse_seconds])
@pytest.mark.parametrize("number", [0, 3, 2.5, 1e-6, 312e12])
def test_numbers_pass_through(parse: Any, number: float) -> None:
    value = parse(number)
    assert value == number and isinstance(value, float)


@pytest.mark.parametrize(("parse", "text"), [
    (parse_bytes, "lots"),
    (parse_bytes, ""),
    (parse_bytes, "GiB"),
    (parse_bytes, "-5GB"),
    (parse_bytes, "80 Gi"),
    (parse_bytes, "80XB"),
    (parse_bytes, "8GB/s"),
    (parse_bytes, "1.2.3GB"),
    (parse_flops, "fast"),
    (parse_flops, "312TB/s"),
    (parse_flops, "3QFLOPS"),
    (parse_rate, "600GB"),
    (parse_rate, "10Xbit/s"),
    (parse_rate, "ten Gbit/s"),
    (parse_seconds, "5 minutes"),
    (parse_seconds, "5ks"),
    (parse_seconds, "soon"),
])
def test_bad_text_raises_unit_error_naming_it(parse: Any, text: str) -> None:
    with pytest.raises(UnitError, match=re.escape(repr(text))):
        parse(text)


@pytest.mark.parametrize("parse", [parse_bytes, parse_flops, parse_rate, parse_seconds])
def test_bool_is_refused(parse: Any) -> None:
    with pytest.raises(UnitError, match="True"):
        parse(True)


@pytest.mark.parametrize(("parse", "text", "message"), [
    (parse_bytes, "8GB/s", "cannot read a size in bytes '8GB/s': unit must end in one of B"),
    (parse_bytes, "80XB", "unknown unit prefix 'X' in '80XB' for a size in bytes"),
    (parse_seconds, "5ks", "cannot read duration '5ks': unit must be one of s, ms, us"),
])
def test_unit_error_messages_say_what_is_expected(parse: Any, text: str, message: str) -> None:
    with pytest.raises(UnitError, match=re.escape(message)):
        parse(text)


def test_unit_error_is_a_value_error() -> None:
    assert issubclass(UnitError, ValueError)


def test_overflowing_size_is_refused() -> None:
    with pytest.raises(UnitError, match=re.escape("'1e999GB'")):
        parse_bytes("1e999GB")


# -- formatting -------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"),
    (512, "512 B"),
    (1536, "1.5 KiB"),
    (3 * 2**20, "3 MiB"),
    (85899345920, "80 GiB"),
    (2 * 2**40, "2 TiB"),
    (5000 * 2**40, "5000 TiB"),
])
def test_format_bytes(n: float, text: str) -> None:
    assert format_bytes(n) == text


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 FLOP"),
    (12, "12 FLOP"),
    (2.5e9, "2.5 GFLOP"),
    (1.25e6, "1.25 MFLOP"),
    (312e12, "312 TFLOP"),
    (3e15, "3 PFLOP"),
])
def test_format_flops(n: float, text: str) -> None:
    assert format_flops(n) == text


@pytest.mark.parametrize(("t", "text"), [
    (0, "0 s"),
    (0.0, "0 s"),
    (2, "2 s"),
    (0.0015, "1.5 ms"),
    (5e-6, "5 us"),
    (20e-9, "20 ns"),
    (1e-3, "1 ms"),
])
def test_format_seconds(t: float, text: str) -> None:
    assert format_seconds(t) == text


def test_format_round_trips_through_parse() -> None:
    assert parse_bytes(format_bytes(85899345920).replace(" ", "")) == 85899345920
    assert parse_seconds(format_seconds(0.0015).replace(" ", "")) == 0.0015


# -- contention -------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("idle", Contention()),
    ("IDLE", Contention()),
    ("none", Contention()),
    ("0", Contention()),
    ("2xmemory", Contention(corunners=2, kind="memory")),
    ("2XMemory", Contention(corunners=2, kind="memory")),
    ("2×memory", Contention(corunners=2, kind="memory")),
    ("1xcompute", Contention(corunners=1, kind="compute")),
    ("3xmixed", Contention(corunners=3, kind="mixed")),
    ("1", Contention(corunners=1, kind="compute")),
    ("4", Contention(corunners=4)),
    ("0.3", Contention(utilization=0.3)),
    ("30%", Contention(utilization=0.3)),
    (" 50% ", Contention(utilization=0.5)),
    ("0%", Contention(utilization=0.0)),
])
def test_contention_parse(text: str, expected: Contention) -> None:
    assert Contention.parse(text) == expected


@pytest.mark.parametrize("text", ["busy", "2xgpu", "x", "-1", "65", "1.0", "150%", "abc%", "0.3.1", ""])
def test_contention_parse_refuses_bad_text_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"cannot read load {text!r}")):
        Contention.parse(text)


@pytest.mark.parametrize(("load", "text"), [
    (Contention(), "idle"),
    (Contention(corunners=2, kind="memory"), "2×memory"),
    (Contention(utilization=0.3), "30% used"),
])
def test_contention_describe(load: Contention, text: str) -> None:
    assert load.describe() == text


def test_contention_idle() -> None:
    assert Contention().idle
    assert Contention(utilization=0.0).idle
    assert not Contention(corunners=1).idle
    assert not Contention(utilization=0.1).idle


def test_contention_refuses_corunners_with_utilization() -> None:
    with pytest.raises(ValidationError, match="give either 'corunners' or 'utilization'"):
        Contention(corunners=1, utilization=0.5)


@pytest.mark.parametrize("utilization", [1.0, 1.5, -0.1])
def test_contention_refuses_utilization_out_of_range(utilization: float) -> None:
    with pytest.raises(ValidationError, match="utilization"):
        Contention(utilization=utilization)


@pytest.mark.parametrize("fields", [{"corunners": -1}, {"corunners": 65}, {"kind": "disk"}, {"extra": 1}])
def test_contention_refuses_bad_fields(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Contention(**fields)


@pytest.mark.parametrize(("load", "shares"), [
    (Contention(), (0.0, 0.0)),
    (Contention(corunners=1, kind="compute"), (0.5, 0.1 / 1.1)),
    (Contention(corunners=1, kind="memory"), (0.1 / 1.1, 0.5)),
    (Contention(corunners=3, kind="memory"), (0.3 / 1.3, 0.75)),
    (Contention(corunners=3, kind="compute"), (0.75, 0.3 / 1.3)),
    (Contention(corunners=2, kind="mixed"), (0.5, 0.5)),
    (Contention(corunners=1, kind="mixed"), (1 / 3, 1 / 3)),
    (Contention(utilization=0.25), (0.25, 0.25)),
    (Contention(utilization=0.0), (0.0, 0.0)),
])
def test_contention_shares(load: Contention, shares: tuple[float, float]) -> None:
    assert load.shares() == pytest.approx(shares, rel=1e-12, abs=0.0)


def test_compute_shares_are_exact() -> None:
    assert Contention(corunners=1, kind="compute").shares()[0] == 0.5
    assert Contention(corunners=3, kind="memory").shares()[1] == 0.75


@pytest.mark.parametrize("n", [1, 2, 8, 64])
@pytest.mark.parametrize("kind", ["compute", "memory", "mixed"])
def test_contention_shares_stay_below_one(n: int, kind: str) -> None:
    compute, memory = Contention(corunners=n, kind=kind).shares()
    assert 0.0 < compute < 1.0 and 0.0 < memory < 1.0


# -- devices ----------------------------------------------------------------------------------


def device(**fields: Any) -> Device:
    spec: dict[str, Any] = {"id": "gpu0", "memory": "80GiB", "peak_flops": "312TFLOPS",
                            "mem_bandwidth": "2039GB/s"}
    spec.update(fields)
    return Device(**spec)


def test_device_reads_units() -> None:
    d = device()
    assert (d.memory, d.peak_flops, d.mem_bandwidth) == (85899345920, 312e12, 2039e9)
    assert d.load == Contention() and d.cores is None


def test_device_with_load_copies() -> None:
    d = device()
    busy = d.with_load(Contention.parse("2xmemory"))
    assert busy.load == Contention(corunners=2, kind="memory")
    assert d.load == Contention()
    assert busy.peak_flops == d.peak_flops


@pytest.mark.parametrize("field", ["memory", "peak_flops", "mem_bandwidth"])
@pytest.mark.parametrize("value", [0, -1, -2.5, "0"])
def test_device_refuses_non_positive(field: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=re.escape(f"device 'gpu0': {field} must be positive")):
        device(**{field: value})


def test_device_refuses_nan_peak() -> None:
    with pytest.raises(ValidationError, match=r"(?s)peak_flops.*finite number"):
        device(peak_flops=float("nan"))


def test_device_refuses_bad_unit_naming_the_text() -> None:
    with pytest.raises(ValidationError, match=re.escape("'80 furlongs'")):
        device(memory="80 furlongs")


@pytest.mark.parametrize("fields", [{"id": ""}, {"id": "gpu 0"}, {"colour": "red"}])
def test_device_refuses_bad_fields(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        device(**fields)
