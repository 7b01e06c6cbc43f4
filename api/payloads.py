"""What a worker process is asked to do: a plan or compare job, or a prediction, as frozen values.

The server builds them once from the checked request (:mod:`pipeplan.api.resolve`,
:mod:`pipeplan.api.routes.costmodel`); the pool sends them to its worker processes over a pipe
(pickled: only the server's own objects, never a client's bytes), and the durable queue stores a
job's in its row as JSON (:meth:`PlanPayload.to_json`), which a ``pipeplan worker`` on any machine
reads back.  Nothing a client sends is code: a model is a zoo name or a graph document.

The planner's own :class:`~pipeplan.planner.problem.PlanOptions` travel as they are; the solver's
limits travel as :class:`SolverLimits`, the part of :class:`~pipeplan.planner.ilp.SolverOptions` a
client may set, so that the server need not import the solver (OR-Tools) to describe a job.  A plan
that may borrow memory carries :class:`~pipeplan.planner.harvest.HarvestOptions` the same way.

>>> limits = SolverLimits(time_limit=5.0, workers=1, seed=0, gap_limit=0.0)
>>> limits.key()
{'time_limit': 5.0, 'workers': 1, 'seed': 0, 'gap_limit': 0.0}
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.hardware import Contention, Device
from pipeplan.planner.harvest import HarvestOptions
from pipeplan.planner.problem import PlanOptions

if TYPE_CHECKING:
    from pipeplan.planner.ilp import SolverOptions

__all__ = ["PlanPayload", "PredictPayload", "SolverLimits", "ZooCapture"]


@dataclass(frozen=True)
class SolverLimits:
    """The solver settings a request chooses (within the service's limits)."""

    time_limit: float  # seconds for the whole solve
    workers: int  # CP-SAT threads
    seed: int
    gap_limit: float  # stop once (objective − bound) / objective ≤ this

    def key(self) -> dict[str, Any]:
        """The form request keys were made of (:func:`pipeplan.api.keys.request_key`): keep it as is,
        or stored plans are no longer found."""
        return {"time_limit": self.time_limit, "workers": self.workers, "seed": self.seed,
                "gap_limit": self.gap_limit}

    def options(self) -> SolverOptions:
        """The solver's own options (imports the solver: call it in a worker)."""
        from pipeplan.planner.ilp import SolverOptions

        return SolverOptions(time_limit=self.time_limit, workers=self.workers, seed=self.seed,
                             gap_limit=self.gap_limit)


@dataclass(frozen=True)
class ZooCapture:
    """A zoo model to capture, with its input sizes (``name`` is the zoo's canonical name)."""

    name: str
    batch: int
    granularity: str
    seq_len: int | None = None
    image_size: int | None = None
    kv_context: int | None = None


@dataclass(frozen=True)
class PlanPayload:
    """A plan or compare job: the graph (or the zoo model to capture), the cluster's state, the cost
    model, the options, the solver's limits, and for a plan that may borrow memory its harvesting options."""

    cluster: Cluster  # its current state: the spec with each device's load, reservations included
    costmodel: str  # what the worker loads (pipeplan.costmodel.registry.load_cost_model)
    costmodel_name: str  # what the plan records
    options: PlanOptions
    solver: SolverLimits
    graph_text: str | None = None  # the graph's canonical JSON, when it is known before the job
    zoo: ZooCapture | None = None  # else the zoo model the worker captures first
    harvest: HarvestOptions | None = None  # a plan job solved with solve_harvest; None: no borrowing

    def __post_init__(self) -> None:
        if self.graph_text is None and self.zoo is None:  # a bug in the server, not in a request
            raise ValueError("a plan payload needs a graph or a zoo model")

    def to_json(self) -> dict[str, Any]:
        """The JSON form a queued job keeps (``jobs.spec``); :meth:`from_json` reads it back."""
        doc: dict[str, Any] = {"cluster": self.cluster.to_dict(), "costmodel": self.costmodel,
                               "costmodel_name": self.costmodel_name, "options": asdict(self.options),
                               "solver": asdict(self.solver)}
        if self.graph_text is not None:
            doc["graph_text"] = self.graph_text
        if self.zoo is not None:
            doc["zoo"] = asdict(self.zoo)
        if self.harvest is not None:
            doc["harvest"] = self.harvest.to_dict()
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PlanPayload:
        """A payload from :meth:`to_json`'s form (or the plain dicts jobs queued before it kept)."""
        zoo, harvest = doc.get("zoo"), doc.get("harvest")
        return cls(cluster=Cluster.from_dict(doc["cluster"]), costmodel=doc["costmodel"],
                   costmodel_name=doc["costmodel_name"], options=PlanOptions(**doc["options"]),
                   solver=SolverLimits(**doc["solver"]), graph_text=doc.get("graph_text"),
                   zoo=ZooCapture(**zoo) if zoo is not None else None,
                   harvest=HarvestOptions(**harvest) if harvest is not None else None)


@dataclass(frozen=True)
class PredictPayload:
    """A prediction: each layer's time on each device.  The layers are the client's documents, parsed
    and checked by the worker (a bad one is a :class:`~pipeplan.api.worker.LayerError`)."""

    layers: Any  # the client's layer documents, as sent
    devices: tuple[Device, ...]
    load: Contention | None  # one load for every device; None: each device's own
    costmodel: str
    costmodel_name: str
