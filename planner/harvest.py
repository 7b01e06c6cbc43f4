"""Harvesting spare memory: options, and the plan's record of who lends what to whom.

A stage may keep some of its layers' weights (``Layer.param_bytes``, whole layers) in the spare
memory of another device of the cluster (a *lender*: in the pipeline or not) or of its own host
(a slower tier, over the host link), and fetch them over that link each microbatch, as the layer
runs, or once per batch (``fetch="batch"``: the borrowing stage runs its batch layer by layer, all
microbatches through a layer before the next).  With ``fetch="batch"`` and ``stash=True`` such a
stage may also keep the activations of the microbatches it is not computing, between its layers,
with a lender (:class:`Stash`, :mod:`pipeplan.planner.harvest_stash`).  :class:`HarvestOptions` says
who may lend, what the host tier offers and how often weights are fetched; the solve is
:func:`pipeplan.planner.harvest_solve.solve_harvest`, the scoring :mod:`pipeplan.planner.harvest_score`, the CP-SAT
terms :mod:`pipeplan.planner.harvest_model`; ``docs/planner.md`` ("Harvesting spare memory") has the rules.

A lender is named by its device id, or ``host:NAME`` for the memory of host NAME.

>>> HarvestOptions.of(host_memory="64GiB", reserved=["gpu3=10GiB"]).reserved
(('gpu3', 10737418240),)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pipeplan.costmodel.units import UnitError, parse_bytes, parse_rate, parse_seconds
from pipeplan.planner.problem import PlanError

__all__ = ["DEFAULT_HOST_BANDWIDTH", "DEFAULT_HOST_LATENCY", "FETCH_MODES", "HOST_PREFIX", "STAGING_BUFFERS",
           "STASH_BUFFERS", "Channel", "FetchMode", "Harvest", "HarvestOptions", "Loan", "MemoryRow", "StageFetch",
           "Stash", "fetch_mode", "host_lender"]

# Host memory over PCIe: what a x16 Gen3 link sustains for large copies (the reload default of
# pipeplan.planner.migration too); the cluster spec has no host-link field, so it is an option here.
DEFAULT_HOST_BANDWIDTH = 12e9
DEFAULT_HOST_LATENCY = 10e-6
HOST_PREFIX = "host:"
# A borrowed layer's weights are staged on the borrower while it runs, and the next borrowed
# layer's arrive beside them (prefetch), so a borrower keeps two buffers of its largest loan.
STAGING_BUFFERS = 2
# A stashing stage (stash=True) holds one microbatch's working set, the next microbatch's stashed
# activations arriving (prefetched) and the previous one's leaving: two buffers of its largest stash.
STASH_BUFFERS = 2

# How often a borrower fetches a borrowed layer: as each microbatch runs it (the stage runs its
# microbatches one after the other), or once per batch (the stage runs the batch layer-major: every
# microbatch through a borrowed layer before the next layer, so one fetch serves them all, and the
# live activations of all of them are held at once).  docs/planner.md weighs the two.
FetchMode = Literal["microbatch", "batch"]
FETCH_MODES: tuple[FetchMode, ...] = ("microbatch", "batch")


def fetch_mode(value: object) -> FetchMode:
    """``value`` as a :data:`FetchMode` (case-insensitive); a :class:`PlanError` lists the valid ones."""
    name = value.strip().lower() if isinstance(value, str) else value
    for mode in FETCH_MODES:
        if name == mode:
            return mode
    raise PlanError(f"harvest fetch must be one of {', '.join(FETCH_MODES)}, got {value!r}")


def host_lender(host: str) -> str:
    """The lender name of a host's memory: ``host:NAME``."""
    return f"{HOST_PREFIX}{host}"


def _reserved_of(value: object) -> tuple[tuple[str, int], ...]:
    """``{"gpu3": "10GiB"}``, ``["gpu3=10GiB"]`` or pairs, as sorted (device, bytes) pairs."""
    if isinstance(value, Mapping):
        items: list[object] = list(value.items())
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise PlanError(f"reserved must map device ids to sizes (or list 'DEV=SIZE'), got {value!r}")
    out: dict[str, int] = {}
    for item in items:
        if isinstance(item, str):
            left, sep, right = item.partition("=")
            if not sep or not left.strip():
                raise PlanError(f"reserved {item!r}: write DEVICE=SIZE, e.g. gpu3=10GiB")
            pair: tuple[object, object] = (left.strip(), right)
        elif isinstance(item, list | tuple) and len(item) == 2:
            pair = (item[0], item[1])
        else:
            raise PlanError(f"reserved holds {item!r}: give DEVICE=SIZE or (device, bytes)")
        name, size = pair
        if not isinstance(name, str) or name in out:
            raise PlanError(f"reserved names {name!r} {'twice' if name in out else 'as a device'}: "
                            "give each device id once")
        if not isinstance(size, int | float | str):
            raise PlanError(f"reserved {name}: give a size such as 10GiB, got {size!r}")
        try:
            nbytes = parse_bytes(size)
        except UnitError as exc:
            raise PlanError(f"reserved {name}: {exc}") from None
        if nbytes < 0:
            raise PlanError(f"reserved {name}: a size cannot be negative, got {size!r}")
        out[name] = nbytes
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class HarvestOptions:
    """Who may lend memory to the pipeline's stages, and at what price.

    ``lenders``: device ids that may hold other stages' weights (None: every device of the
    cluster, whether it holds a stage or not).  ``host_memory``: bytes each host lends to its own
    devices over one host link it shares among them (0: no host tier); ``host_bandwidth`` and
    ``host_latency`` price that link.  ``reserved``: bytes other work holds on a device (a
    neighbour's small job), kept out of both its stage and what it lends.  ``fetch``: how often a
    borrower fetches each borrowed layer, ``"microbatch"`` (default) or ``"batch"`` (see
    :data:`FetchMode`).  ``stash`` (needs ``fetch="batch"``): a borrowing stage may keep the
    between-layer activations of the microbatches it is not computing with a lender, instead of
    holding all M.  Sizes, rates and durations take units: ``"64GiB"``, ``"12GB/s"``, ``"10us"``.
    """

    lenders: tuple[str, ...] | None = None
    host_memory: int = 0
    host_bandwidth: float = DEFAULT_HOST_BANDWIDTH
    host_latency: float = DEFAULT_HOST_LATENCY
    reserved: tuple[tuple[str, int], ...] = ()
    fetch: FetchMode = "microbatch"
    stash: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "fetch", fetch_mode(self.fetch))
        if not isinstance(self.stash, bool):
            raise PlanError(f"harvest stash must be true or false, got {self.stash!r}")
        if self.stash and self.fetch != "batch":
            raise PlanError("harvest stash needs fetch='batch': only a stage that runs its batch layer-major holds "
                            "other microbatches' activations between its layers")
        try:
            object.__setattr__(self, "host_memory", parse_bytes(self.host_memory))
            object.__setattr__(self, "host_bandwidth", parse_rate(self.host_bandwidth))
            object.__setattr__(self, "host_latency", parse_seconds(self.host_latency))
        except UnitError as exc:
            raise PlanError(f"harvest: {exc}") from None
        if self.lenders is not None:
            if isinstance(self.lenders, str) or not isinstance(self.lenders, list | tuple):
                raise PlanError(f"harvest lenders must be a list of device ids, got {self.lenders!r}")
            if not all(isinstance(d, str) and d for d in self.lenders):
                raise PlanError(f"harvest lenders must be device ids, got {self.lenders!r}")
            object.__setattr__(self, "lenders", tuple(self.lenders))
        if self.host_memory < 0:
            raise PlanError(f"harvest host_memory cannot be negative, got {self.host_memory}")
        if not self.host_bandwidth > 0:
            raise PlanError(f"harvest host_bandwidth must be positive, got {self.host_bandwidth:g} B/s")
        if not self.host_latency >= 0:
            raise PlanError(f"harvest host_latency cannot be negative, got {self.host_latency:g} s")
        object.__setattr__(self, "reserved", _reserved_of(self.reserved))

    @classmethod
    def of(cls, *, lenders: Sequence[str] | None = None, host_memory: int | str = 0,
           host_bandwidth: float | str = DEFAULT_HOST_BANDWIDTH, host_latency: float | str = DEFAULT_HOST_LATENCY,
           reserved: Mapping[str, int | str] | Sequence[str] = (), fetch: str = "microbatch",
           stash: bool = False) -> HarvestOptions:
        """Options from text as a person writes it: ``of(host_memory="64GiB", reserved={"gpu3": "10GiB"})``
        (the constructor reads the same forms; this one is typed for them)."""
        return cls(lenders, host_memory, host_bandwidth, host_latency, reserved, fetch, stash)  # type: ignore[arg-type]

    @property
    def batched(self) -> bool:
        """Whether a borrower fetches once per batch (runs its batch layer-major)."""
        return self.fetch == "batch"

    def rounds(self, microbatches: int) -> int:
        """Microbatches one round of fetches serves: the batch's ``microbatches`` with
        ``fetch="batch"``, else one."""
        return microbatches if self.batched else 1

    def to_dict(self) -> dict[str, Any]:
        return {"lenders": list(self.lenders) if self.lenders is not None else None,
                "host_memory": self.host_memory, "host_bandwidth": self.host_bandwidth,
                "host_latency": self.host_latency, "reserved": [list(pair) for pair in self.reserved],
                "fetch": self.fetch, "stash": self.stash}


@dataclass
class Loan:
    """One layer's weights held by a lender for the stage that runs it."""

    layer: str
    borrower: str  # the device whose stage runs the layer
    lender: str  # a device id, or host:NAME
    bytes: int
    seconds: float  # bytes / the link's bandwidth: this loan's share of its channel each fetch round


@dataclass
class Channel:
    """A link that carries fetches: lender → borrower, or a host's link shared by its devices."""

    source: str  # the lender (a device id, or host:NAME)
    target: str  # the borrowing device, or "*" for a host link every device of the host shares
    bytes: int  # fetched per round: each microbatch, or each batch with fetch="batch"
    seconds: float  # latency + bytes / bandwidth: what every stage reading it waits for, per round
    bandwidth: float  # bytes/s of the link
    stash: int = 0  # of bytes, stashed activations sent out and fetched back per round (stash=True)


@dataclass
class Stash:
    """A layer-major stage's between-layer activations, held by a lender (``stash=True``): each
    microbatch it is not computing is sent out after a layer and fetched back before the next."""

    borrower: str  # the stashing stage's device
    lender: str  # a device id, or host:NAME
    bytes: int  # held by the lender at most: (M − 1) × per_microbatch
    per_microbatch: int  # the most one microbatch holds between two of the stage's layers
    traffic: int  # bytes sent out and fetched back per batch: 2 (M − 1) × Σ cuts but the last layer's
    seconds: float  # traffic / the link's bandwidth: its share of its channel each round


@dataclass
class StageFetch:
    """A stage's fetches per microbatch: the sum of the channels it reads (÷ microbatches with
    fetch="batch", where one round serves the batch)."""

    device: str
    fetch: float  # seconds per microbatch
    borrowed: int  # bytes of its weights held elsewhere
    staging: int  # bytes of staging buffers on the device (STAGING_BUFFERS × its largest loan)
    stashed: int = 0  # bytes of its activations a lender holds for it (stash=True)
    stash_staging: int = 0  # bytes of stash buffers on the device (STASH_BUFFERS × a microbatch's stash)


@dataclass
class MemoryRow:
    """One lender's or device's memory under the plan, after the margin: ``own + lent + reserved +
    free = capacity``; ``borrowed`` is held elsewhere and counts on the lenders' rows.  ``lent`` and
    ``borrowed`` include stashed activations (``stash=True``), which ``lent_stash`` and
    ``borrowed_stash`` give apart."""

    device: str  # a device id, or host:NAME
    capacity: int
    own: int  # its stage's memory there (weights kept, activations, workspace, staging)
    lent: int  # other stages' weights (and stashed activations) it holds
    borrowed: int
    reserved: int
    free: int
    lent_stash: int = 0  # of lent: other stages' stashed activations
    borrowed_stash: int = 0  # of borrowed: its stage's activations stashed elsewhere


@dataclass
class Harvest:
    """The plan's ``harvest`` section: the options, the loans, the channels, the memory map."""

    options: HarvestOptions
    loans: list[Loan] = field(default_factory=list)
    channels: list[Channel] = field(default_factory=list)
    stages: list[StageFetch] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)
    without: float | None = None  # the best bottleneck (or latency) found without borrowing; None: none fits
    stashes: list[Stash] = field(default_factory=list)

    @property
    def borrowed_bytes(self) -> int:
        return sum(loan.bytes for loan in self.loans)

    def to_dict(self) -> dict[str, Any]:
        return {"options": self.options.to_dict(), "loans": [asdict(x) for x in self.loans],
                "channels": [asdict(x) for x in self.channels], "stages": [asdict(x) for x in self.stages],
                "memory": [asdict(x) for x in self.memory], "without": self.without,
                "stashes": [asdict(x) for x in self.stashes]}

    @classmethod
    def from_dict(cls, doc: Any) -> Harvest:
        if not isinstance(doc, dict):
            raise PlanError(f"malformed plan: 'harvest' must be an object, got {type(doc).__name__}")
        try:
            return cls(HarvestOptions(**doc["options"]), [Loan(**x) for x in doc.get("loans", [])],
                       [Channel(**x) for x in doc.get("channels", [])],
                       [StageFetch(**x) for x in doc.get("stages", [])],
                       [MemoryRow(**x) for x in doc.get("memory", [])], doc.get("without"),
                       [Stash(**x) for x in doc.get("stashes", [])])
        except (KeyError, TypeError) as exc:
            raise PlanError(f"malformed plan: harvest: {exc}") from None
