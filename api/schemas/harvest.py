"""Harvesting spare memory in a plan request, and the plan's ``harvest`` section in its answer.

A request's ``harvest`` (:class:`HarvestIn`) is :class:`pipeplan.planner.harvest.HarvestOptions`, with
the same names as the command line's ``--lender``, ``--host-memory``, ``--host-bandwidth``,
``--reserve``, ``--fetch`` and ``--stash``; its presence turns harvesting on, as ``--harvest`` does.
Sizes, rates and durations
are numbers (bytes, bytes/s, seconds) or text with a unit (``"64GiB"``, ``"12GB/s"``, ``"10us"``); each
is read here, so a bad one is a 422 naming its field.  Which devices exist is checked against the
cluster by :mod:`pipeplan.api.resolve`.

The answer's plan document then carries ``harvest`` (:class:`HarvestDoc`): the memory map per
device and lending host, the loans (who lends which layer's weights to whom), the stashes (whose
activations a lender holds, with ``stash``) and the links that carry the fetches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, ValidationInfo, WithJsonSchema, field_validator

from pipeplan.api.schemas.common import Strict
from pipeplan.costmodel.units import UnitError, parse_bytes, parse_rate, parse_seconds
from pipeplan.planner.harvest import DEFAULT_HOST_BANDWIDTH, DEFAULT_HOST_LATENCY

__all__ = ["ChannelDoc", "HarvestDoc", "HarvestIn", "LoanDoc", "MemoryRowDoc", "StageFetchDoc", "StashDoc"]

# The planner's memory terms are int64 in CP-SAT: sizes stay far below 2**63 (as a graph's do).
MAX_BYTES = 2**48
# Rates and latencies a link can have, with a wide margin; beyond them fetch times are nonsense.
MIN_RATE, MAX_RATE = 1e3, 1e15
MAX_LATENCY = 10.0


def _reader(parse: Callable[[Any], float], low: float, high: float, unit: str, example: str) -> BeforeValidator:
    """A validator reading a number or text with a unit, within [low, high]; else a ValueError."""

    def read(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"give a number of {unit} or text with a unit such as {example!r}, got {value!r}")
        try:
            number = parse(value)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
        if not low <= number <= high:
            raise ValueError(f"must be between {low:.15g} and {high:.15g} {unit}, got {value!r}")
        return number

    return BeforeValidator(read)


def _schema(low: float, high: float, unit: str, example: str) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [{"type": "number", "minimum": low, "maximum": high},
                                     {"type": "string", "maxLength": 64, "examples": [example]}],
                           "description": f"{unit}, or text with a unit such as {example!r}"})


Size = Annotated[int, _reader(parse_bytes, 0, MAX_BYTES, "bytes", "64GiB"), _schema(0, MAX_BYTES, "bytes", "64GiB")]
Rate = Annotated[float, _reader(parse_rate, MIN_RATE, MAX_RATE, "bytes/s", "12GB/s"),
                 _schema(MIN_RATE, MAX_RATE, "bytes/s", "12GB/s")]
Seconds = Annotated[float, _reader(parse_seconds, 0.0, MAX_LATENCY, "seconds", "10us"),
                    _schema(0.0, MAX_LATENCY, "seconds", "10us")]
DeviceId = Annotated[str, Field(min_length=1, max_length=128, description="a device id of the cluster")]


class HarvestIn(Strict):
    """Let stages keep weights in other devices' (or their host's) spare memory, fetched each
    microbatch or once per batch (pipeplan.planner.harvest.HarvestOptions; docs/planner.md, "Harvesting
    spare memory")."""

    lenders: list[DeviceId] | None = Field(
        None, max_length=4096, description="devices that may lend (--lender); null: every device of the cluster")
    host_memory: Size = Field(0, description="bytes each host lends its own devices (--host-memory); 0: no host tier")
    host_bandwidth: Rate = Field(DEFAULT_HOST_BANDWIDTH, description="the host link its devices share "
                                                                     "(--host-bandwidth); default PCIe, 12 GB/s")
    host_latency: Seconds = Field(DEFAULT_HOST_LATENCY, description="each fetch over the host link; default 10 us")
    reserved: dict[DeviceId, Size] = Field(
        default_factory=dict, max_length=4096,
        description="device → bytes other work holds there (--reserve DEV=SIZE): kept out of its stage and "
                    "of what it lends")
    fetch: Literal["microbatch", "batch"] = Field(
        "microbatch", description="how often a borrower fetches a borrowed layer (--fetch): each microbatch, or once "
                                  "per batch (its stage runs the batch layer by layer and holds all its microbatches' "
                                  "activations)")
    stash: bool = Field(
        False, description="with fetch 'batch' (--stash): a borrowing stage may keep the activations of the "
                           "microbatches it is not computing with a lender between its layers, instead of holding "
                           "all of them")

    @field_validator("stash")
    @classmethod
    def _stash_needs_batch(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("fetch") != "batch":
            raise ValueError("stash needs fetch 'batch': only a stage that runs its batch layer by layer holds other "
                             "microbatches' activations between its layers")
        return value


class LoanDoc(BaseModel):
    layer: str
    borrower: str = Field(..., description="the device whose stage runs the layer")
    lender: str = Field(..., description="the device holding its weights, or host:NAME")
    bytes: int
    seconds: float | None = Field(..., description="bytes / the link's bandwidth: its share of each fetch")


class ChannelDoc(BaseModel):
    source: str = Field(..., description="the lender")
    target: str = Field(..., description="the borrowing device, or '*' for a host link its devices share")
    bytes: int = Field(..., description="fetched per round: each microbatch, or each batch with fetch 'batch'")
    seconds: float | None = Field(..., description="latency + bytes / bandwidth, per round")
    bandwidth: float | None = Field(..., description="bytes/s of the link")
    stash: int = Field(0, description="of bytes, stashed activations sent out and fetched back per round")


class StashDoc(BaseModel):
    borrower: str = Field(..., description="the stage's device whose activations the lender holds between layers")
    lender: str = Field(..., description="the device holding them, or host:NAME")
    bytes: int = Field(..., description="held by the lender at most: (microbatches - 1) x per_microbatch")
    per_microbatch: int = Field(..., description="the most one microbatch holds between two of the stage's layers")
    traffic: int = Field(..., description="bytes sent out and fetched back per batch")
    seconds: float | None = Field(..., description="traffic / the link's bandwidth, per batch")


class StageFetchDoc(BaseModel):
    device: str
    fetch: float | None = Field(..., description="seconds of fetches per microbatch")
    borrowed: int = Field(..., description="bytes of its weights held elsewhere")
    staging: int = Field(..., description="bytes of staging buffers on the device")
    stashed: int = Field(0, description="bytes of its activations a lender holds (stash)")
    stash_staging: int = Field(0, description="bytes of stash buffers on the device")


class MemoryRowDoc(BaseModel):
    """One device's (or lending host's) memory under the plan: ``own + lent + reserved + free = capacity``;
    ``borrowed`` is held by lenders and counts in their ``lent``."""

    device: str = Field(..., description="a device id, or host:NAME")
    capacity: int = Field(..., description="bytes after the memory margin")
    own: int = Field(..., description="its stage's bytes there (weights kept, activations, staging buffers)")
    lent: int = Field(..., description="bytes of other stages' weights (and stashed activations) it holds")
    borrowed: int = Field(..., description="bytes of its stage's weights (and stashed activations) held by lenders")
    reserved: int = Field(..., description="bytes other work holds (the request's harvest.reserved)")
    free: int
    lent_stash: int = Field(0, description="of lent, other stages' stashed activations")
    borrowed_stash: int = Field(0, description="of borrowed, its stage's activations stashed with a lender")


class HarvestDoc(BaseModel):
    """The plan's ``harvest`` section (pipeplan.planner.harvest.Harvest.to_dict)."""

    options: dict[str, Any] = Field(..., description="the harvesting options used, sizes in bytes")
    loans: list[LoanDoc] = Field(..., description="who lends which layer's weights to whom")
    channels: list[ChannelDoc]
    stages: list[StageFetchDoc]
    memory: list[MemoryRowDoc] = Field(..., description="the memory map: per device, then per lending host")
    without: float | None = Field(..., description="the best bottleneck (or latency) without borrowing; "
                                                   "null when nothing fits without it")
    stashes: list[StashDoc] = Field(default_factory=list, description="whose activations a lender holds (stash)")
