"""A plan: ordered pipeline stages, each on one device, with predicted times and a certificate.

Plans are versioned JSON (``format: pipeplan.plan``, ``version: 3``) so the executor, the service
and people can read them.  Version 2 added ``costmodel_digest``: ``costmodel`` is the spec the plan
was made with (``analytic``, ``learned``, a shipped ``learned-NAME`` or a model file's path) and the
digest is the SHA-256 of that model file, so that ``pipeplan run`` re-predicts with the very same
model or says why it cannot.  Version 3 moved how the ILP ran out of the certificate's free-form
``details`` into a typed ``certificate.solver`` (:class:`SolverDetails`, documented in
``docs/planner.md``).  Version 1 and 2 plans still load (no digest; the ILP's keys are read back
from ``details``).  A re-planned plan (:func:`pipeplan.planner.replan.replan`) also carries ``migration``
(:class:`pipeplan.planner.migration.Migration`: what moves from the current plan, and why); the key is
optional, so plans without it, and readers that ignore it, need no new version.  A plan that may
borrow memory (:func:`pipeplan.planner.harvest_solve.solve_harvest`) carries ``harvest`` the same way
(:class:`pipeplan.planner.harvest.Harvest`: the loans, the channels, the memory map per device).

Every planner builds its plan through :func:`pipeplan.planner.simulate.make_plan` so all plans are scored by
the same rules.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeplan.planner.harvest import Harvest
from pipeplan.planner.migration import Migration
from pipeplan.planner.problem import PlanError, PlanOptions

if TYPE_CHECKING:
    from pipeplan.costmodel.graph import ModelGraph

__all__ = ["PLAN_FORMAT", "PLAN_VERSION", "Certificate", "Plan", "SolverDetails", "Stage", "relative_gap",
           "source_of"]

PLAN_FORMAT = "pipeplan.plan"
PLAN_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)  # 1: before costmodel_digest; 2: the ILP's details as untyped keys


# Graph metadata that, with the graph's model, batch size and granularity, rebuilds the captured
# module: "zoo" (a zoo name) or "factory" ("module:function"), the build options and the dtype.
_SOURCE_META = ("zoo", "factory", "seed", "seq_len", "image_size", "dtype")


def source_of(graph: ModelGraph) -> dict[str, Any]:
    """The capture parameters a plan records so that the executor can rebuild the same module.

    >>> from pipeplan.costmodel.graph import ModelGraph
    >>> source_of(ModelGraph("mlp", batch_size=8, meta={"zoo": "mlp", "seed": 0, "seq_len": None}))
    {'model': 'mlp', 'batch_size': 8, 'granularity': 'leaf', 'zoo': 'mlp', 'seed': 0}
    """
    source: dict[str, Any] = {"model": graph.model, "batch_size": graph.batch_size,
                              "granularity": graph.granularity}
    source.update({key: graph.meta[key] for key in _SOURCE_META if graph.meta.get(key) is not None})
    return source


def relative_gap(objective: float, bound: float) -> float:
    """``(objective − bound) / objective``, never negative; 0 for a zero objective."""
    return max(0.0, (objective - bound) / objective) if objective > 0 else 0.0


@dataclass
class SolverDetails:
    """How the ILP (:func:`pipeplan.planner.ilp.solve`) ran: what its certificate's numbers rest on."""

    tick_seconds: float  # seconds per integer tick of the search (every cost term rounded down to ticks)
    solution: str  # where the plan came from: "cp-sat", "stage program", "warm start (BASELINE)", and
    # "; exact pass" / "; tie-break" when pipeplan.planner.ilp_exact replaced it
    solver_status: str  # CP-SAT's status name, or "not run: …" when the stage program proved the plan
    stage_bound: float | None = None  # seconds: the stage program's bound; None when it did not run
    workers: int = 1  # CP-SAT threads
    seed: int = 0
    time_limit: float = 0.0  # seconds the solve was given
    warm_start: str | None = None  # the baseline the solve started from; None for a cold start
    ideals: int | None = None  # the stage program's ideals (sets of layers on the first stages)
    stage_pairs: int | None = None  # its candidate stages
    variables: int | None = None  # of the CP-SAT model; None when CP-SAT did not run
    constraints: int | None = None
    cp_sat_seconds: float | None = None  # CP-SAT's wall time in the main search
    passes: list[str] = field(default_factory=list)  # pipeplan.planner.ilp_exact's passes, each with its outcome

    _LEGACY = ("tick_seconds", "solution", "solver_status", "stage_bound", "workers", "seed", "time_limit",
               "warm_start", "ideals", "stage_pairs", "variables", "constraints", "cp_sat_seconds")

    @classmethod
    def from_legacy(cls, details: dict[str, Any]) -> tuple[SolverDetails | None, dict[str, Any]]:
        """Split a version-1/2 certificate's ``details`` into typed fields and what is left."""
        if "tick_seconds" not in details:
            return None, details
        known = {key: details[key] for key in cls._LEGACY if key in details}
        known.setdefault("solution", "cp-sat")
        known.setdefault("solver_status", "unknown")
        return cls(**known), {k: v for k, v in details.items() if k not in cls._LEGACY}


@dataclass
class Certificate:
    """How a plan was found and how good it is known to be.

    ``status`` is ``OPTIMAL`` (no valid plan is better in seconds, under the problem's cost model,
    by more than ``pipeplan.planner.ilp_exact.EXACT_TOLERANCE`` = 10⁻⁵ relative; ``gap`` is then 0),
    ``FEASIBLE`` (a valid plan, ``gap`` says how far from the bound it may be) or, for a heuristic,
    ``HEURISTIC``; an exact algorithm reports ``OPTIMAL``.  ``objective`` and ``best_bound`` are
    seconds, and ``best_bound`` never exceeds the objective of any valid plan; ``gap`` is
    ``(objective − best_bound) / objective``, ``None`` when unknown.  ``solver`` says how the ILP
    ran (None for other methods); ``details`` holds a method's free-form extras.
    """

    method: str
    status: str
    objective: float
    best_bound: float | None = None
    gap: float | None = None
    solve_time: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    solver: SolverDetails | None = None

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Certificate:
        """A certificate from plan JSON of any readable version."""
        doc = dict(doc)
        solver = doc.pop("solver", None)
        details = doc.pop("details", None) or {}
        if not isinstance(details, dict):
            raise TypeError(f"'details' must be an object, got {type(details).__name__}")
        if solver is None:
            typed, details = SolverDetails.from_legacy(details)
        elif isinstance(solver, dict):
            typed = SolverDetails(**solver)
        else:
            raise TypeError(f"'solver' must be an object, got {type(solver).__name__}")
        return cls(**doc, details=details, solver=typed)


@dataclass
class Stage:
    index: int
    device: str
    layers: list[str]
    compute: float  # seconds per microbatch
    recv: float
    send: float
    time: float  # max(compute, recv, send) or their sum, by the plan's comm mode
    memory: int  # bytes
    capacity: int  # bytes usable on the device


@dataclass
class Plan:
    model: str
    cluster: str
    costmodel: str
    options: PlanOptions
    stages: list[Stage]
    bottleneck: float  # seconds per microbatch of the slowest stage
    latency: float  # seconds for all microbatches through the pipeline (GPipe fill-drain)
    certificate: Certificate
    batch_size: int = 1  # samples per microbatch
    # How to rebuild the captured module (see source_of); None in plans written before it existed.
    source: dict[str, Any] | None = None
    # "sha256:…" of the cost-model file ``costmodel`` named when the plan was made; None for the
    # analytic model (no file) and in version-1 plans.
    costmodel_digest: str | None = None
    # What re-planning moves from the current plan (pipeplan.planner.replan); None for a plan made from scratch.
    migration: Migration | None = None
    # Who lends memory to which stage (pipeplan.planner.harvest_solve); None for a plan that may not borrow.
    harvest: Harvest | None = None

    @property
    def throughput(self) -> float:
        """Samples per second in steady state."""
        return self.batch_size / self.bottleneck if self.bottleneck > 0 else float("inf")

    @property
    def objective_value(self) -> float:
        """What the plan's objective minimises: latency, or the bottleneck for throughput."""
        return self.latency if self.options.objective == "latency" else self.bottleneck

    @property
    def peak_memory(self) -> int:
        return max((s.memory for s in self.stages), default=0)

    @property
    def method(self) -> str:
        return self.certificate.method

    def assignment(self) -> dict[str, str]:
        """Layer name → device id."""
        return {layer: s.device for s in self.stages for layer in s.layers}

    def device_order(self) -> list[str]:
        return [s.device for s in self.stages]

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": PLAN_FORMAT, "version": PLAN_VERSION, "model": self.model,
            "cluster": self.cluster, "costmodel": self.costmodel, "costmodel_digest": self.costmodel_digest,
            "batch_size": self.batch_size,
            "options": asdict(self.options), "bottleneck": self.bottleneck,
            "throughput": self.throughput, "latency": self.latency,
            "peak_memory": self.peak_memory, "certificate": asdict(self.certificate),
            "stages": [asdict(s) for s in self.stages], "source": self.source,
        }
        if self.migration is not None:
            doc["migration"] = self.migration.to_dict()
        if self.harvest is not None:
            doc["harvest"] = self.harvest.to_dict()
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def from_dict(cls, doc: Any) -> Plan:
        if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
            raise PlanError(f"not a pipeplan plan: 'format' must be {PLAN_FORMAT!r}")
        if doc.get("version") not in _READABLE_VERSIONS:
            raise PlanError(f"unknown plan version {doc.get('version')!r}: this pipeplan reads versions "
                            f"{', '.join(map(str, _READABLE_VERSIONS))}; make the plan again with this pipeplan")
        source = doc.get("source")
        if source is not None and not isinstance(source, dict):
            raise PlanError(f"malformed plan: 'source' must be an object, got {type(source).__name__}")
        digest = doc.get("costmodel_digest")
        if digest is not None and not isinstance(digest, str):
            raise PlanError(f"malformed plan: 'costmodel_digest' must be a string, got {type(digest).__name__}")
        migration = Migration.from_dict(doc["migration"]) if doc.get("migration") is not None else None
        harvest = Harvest.from_dict(doc["harvest"]) if doc.get("harvest") is not None else None
        try:
            return cls(
                model=doc["model"], cluster=doc["cluster"], costmodel=doc["costmodel"],
                options=PlanOptions(**doc["options"]),
                stages=[Stage(**s) for s in doc["stages"]], bottleneck=float(doc["bottleneck"]),
                latency=float(doc["latency"]), certificate=Certificate.from_dict(doc["certificate"]),
                batch_size=int(doc.get("batch_size", 1)), source=source, costmodel_digest=digest,
                migration=migration, harvest=harvest,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"malformed plan: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise PlanError(f"cannot read plan {path}: {exc}") from None
