"""Turn a plan or compare request into what a worker needs, checking every part on the way.

Each problem becomes a 4xx that names the field: a graph over the size limits (413), a graph
``ModelGraph.from_dict`` refuses, an unknown cluster, a spec ``Cluster.from_dict`` refuses, a
time limit over the service's, ``reserve`` on a cluster that is not registered, harvesting options
that name a device the cluster lacks or reserve more than a device offers (422).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from pipeplan.api.costmodels import CostModels, ResolvedCostModel
from pipeplan.api.database import Database
from pipeplan.api.errors import ApiError, user_label
from pipeplan.api.keys import KeyParts, canonical, digest_text, request_key, zoo_key
from pipeplan.api.payloads import PlanPayload, SolverLimits, ZooCapture
from pipeplan.api.registry import ClusterState, Registry, state_of
from pipeplan.api.schemas.common import GraphModelRef, ZooModelRef
from pipeplan.api.schemas.plans import CompareCreate, PlanCreate
from pipeplan.api.settings import Settings
from pipeplan.api.store import find_graph, zoo_digest
from pipeplan.api.zoo import ZooCatalog
from pipeplan.planner.harvest import HarvestOptions
from pipeplan.planner.problem import PlanError, PlanOptions

__all__ = ["GraphInfo", "Prepared", "Resolver", "check_sizes"]

# The largest sizes a graph may state.  The ILP's memory constraints are int64 (CP-SAT): a layer's
# bytes times the microbatches in flight (at most 4096) must stay far below 2**63; and FLOPs are
# divided as floats.  Far above any real model, and a clear 422 instead of an overflow deep inside.
_MAX_BYTES = 2**48
_MAX_FLOPS = 2**62
_SIZE_LIMITS = {"flops": _MAX_FLOPS, "bytes_read": _MAX_FLOPS, "bytes_written": _MAX_BYTES,
                "param_bytes": _MAX_BYTES, "activation_bytes": _MAX_BYTES, "kernels": 2**31}

_SEEN_ONE = 512 * 1024  # largest graph text remembered
_SEEN_ALL = 32 * 2**20  # all of them together


@dataclass(frozen=True)
class GraphInfo:
    digest: str
    doc: str  # canonical JSON
    model: str
    layers: int
    edges: int


@dataclass(frozen=True, kw_only=True)
class Prepared:
    kind: str  # plan | compare
    key: str  # final when the graph is known; else provisional (a zoo model not captured yet)
    final: bool
    key_parts: KeyParts
    digest: str | None  # the graph's, when known
    graph: GraphInfo | None  # an uploaded graph
    zoo_key: str | None
    cluster: ClusterState
    costmodel: ResolvedCostModel
    options: PlanOptions  # built once, from the request's options
    solver: SolverLimits
    zoo: ZooCapture | None  # the zoo model's name and sizes
    reserve: bool
    request: dict[str, Any]  # what is stored with the job and the plan
    timeout: float  # seconds the job may take, everything included
    timeout_note: str = ""  # what those seconds are made of
    owner: str | None = None  # who asked (the owner of the job and the plan it makes)
    harvest: HarvestOptions | None = None  # a plan that may borrow memory; None: no borrowing

    @property
    def costmodel_name(self) -> str:
        return self.costmodel.name


class Resolver:
    def __init__(self, db: Database, settings: Settings, registry: Registry, costmodels: CostModels,
                 zoo: ZooCatalog) -> None:
        self.db, self.settings, self.registry, self.costmodels, self.zoo = db, settings, registry, costmodels, zoo
        # Graphs seen lately, by the digest of the document as sent: a repeated upload (the common
        # case of an identical request) skips parsing and checking it again.  Bounded in bytes.
        self._seen: OrderedDict[str, GraphInfo] = OrderedDict()
        self._seen_bytes = 0
        self._lock = threading.Lock()

    def prepare(self, session: Session, body: PlanCreate | CompareCreate, kind: str,
                zoo_name: str | None) -> Prepared:
        """Check ``body`` and resolve its parts, reading the registry and stored graphs in ``session``."""
        solver = self._solver(body)
        # Resolved (its file hashed) but not loaded: a learned model is loaded by the worker that
        # uses it, so a slow or broken model file costs the server nothing.
        costmodel = self.costmodels.resolve(body.costmodel)
        reserve = bool(getattr(body, "reserve", False))
        if isinstance(body.cluster, str):
            cluster = self.registry.get(session, body.cluster, ["body", "cluster"])
        else:
            spec = body.cluster.model_dump(mode="json", exclude_none=True)
            user_label(spec["name"], ["body", "cluster", "name"], 128)
            cluster = state_of(self.registry.validate(spec, ["body", "cluster"]))
        if reserve and not cluster.registered:
            raise ApiError(422, "reserve needs a registered cluster: PUT it to /v1/clusters/{name} and plan "
                           "on it by name", ["body", "reserve"])
        options, options_key = self._options(body, cluster)
        harvest = _harvest(body, cluster, options)
        if harvest is not None:  # in the key as the planner reads it: "64GiB" and its bytes are one request
            options_key = {**options_key, "harvest": harvest.to_dict()}
        graph: GraphInfo | None = None
        zk: str | None = None
        zoo: ZooCapture | None = None
        capture = 0.0
        if isinstance(body.model, GraphModelRef):
            graph = self._graph(body.model.graph)
            digest: str | None = graph.digest
        else:
            assert isinstance(body.model, ZooModelRef) and zoo_name is not None
            m = body.model
            zk = zoo_key(zoo_name, m.batch, m.granularity, m.seq_len, m.image_size, m.kv_context)
            zoo = ZooCapture(zoo_name, m.batch, m.granularity, m.seq_len, m.image_size, m.kv_context)
            digest = zoo_digest(session, zk)
            if digest is None:  # never captured: the job captures it first
                capture = self.settings.capture_timeout
        parts = KeyParts(cluster.digest, costmodel.identity, options_key, solver.key())
        key = request_key(kind, digest or f"zoo:{zk}", *parts)
        request = body.model_dump(mode="json", exclude={"model"})
        request["model"] = {"graph_digest": graph.digest} if graph is not None else \
            body.model.model_dump(mode="json")
        # The whole job, preprocessing included: CP-SAT stops itself at its own limit, but reading the
        # graph and building the model can take longer than the solve on a big problem.
        grace = self.settings.job_grace
        # A comparison with harvesting solves twice, each under the time limit: the plan that borrows,
        # then the ILP (the baselines are quick beside them).
        solves = 2 if kind == "compare" and harvest is not None else 1
        timeout = capture + solves * solver.time_limit + grace
        limits = f"{solves} × " if solves > 1 else ""
        note = f"{limits}the solver's {solver.time_limit:g} s + {grace:g} s for the rest (PIPEPLAN_JOB_GRACE)"
        if capture:
            note += f" + {capture:g} s to capture the model (PIPEPLAN_CAPTURE_TIMEOUT)"
        return Prepared(kind=kind, key=key, final=digest is not None, key_parts=parts, digest=digest, graph=graph,
                        zoo_key=zk, cluster=cluster, costmodel=costmodel, options=options, solver=solver, zoo=zoo,
                        reserve=reserve, request=request, timeout=timeout, timeout_note=note, harvest=harvest)

    def payload(self, prep: Prepared) -> PlanPayload:
        """What the worker needs for ``prep`` (built only when a job is submitted)."""
        graph_text = prep.graph.doc if prep.graph is not None else None
        if graph_text is None and prep.digest is not None:  # captured before: the worker skips torch altogether
            with self.db.read() as session:
                found = find_graph(session, digest=prep.digest)
            if found is not None:
                graph_text = found.doc
        return PlanPayload(cluster=prep.cluster.effective, costmodel=prep.costmodel.spec,
                           costmodel_name=prep.costmodel.name, options=prep.options, solver=prep.solver,
                           graph_text=graph_text, zoo=prep.zoo, harvest=prep.harvest)

    def _solver(self, body: PlanCreate | CompareCreate) -> SolverLimits:
        s = self.settings
        limit = body.solver.time_limit if body.solver.time_limit is not None else s.default_time_limit
        if limit > s.max_time_limit:
            raise ApiError(422, f"time limit {limit:g} s is over this service's limit of {s.max_time_limit:g} s",
                           ["body", "solver", "time_limit"])
        threads = body.solver.threads if body.solver.threads is not None else s.solver_threads
        if threads > s.max_solver_threads:
            raise ApiError(422, f"{threads} solver threads asked; this service allows at most "
                           f"{s.max_solver_threads}", ["body", "solver", "threads"])
        return SolverLimits(time_limit=limit, workers=threads, seed=body.solver.seed, gap_limit=body.solver.gap_limit)

    def _options(self, body: PlanCreate | CompareCreate,
                 cluster: ClusterState) -> tuple[PlanOptions, dict[str, Any]]:
        """The request's options, and their dump as request keys cover it (the schema's, unchanged)."""
        dumped = body.options.model_dump()
        try:
            options = PlanOptions(**dumped)
        except PlanError as exc:
            raise ApiError(422, str(exc), ["body", "options"]) from None
        devices = len(cluster.effective.devices)
        if options.max_devices is not None and options.max_devices > devices:
            raise ApiError(422, f"max_devices is {options.max_devices} but cluster {cluster.name!r} has "
                           f"{devices} devices", ["body", "options", "max_devices"])
        return options, dumped

    def _graph(self, raw: Any) -> GraphInfo:
        from pipeplan.costmodel.graph import GraphError, ModelGraph

        loc: list[str | int] = ["body", "model", "graph"]
        try:
            sent = digest_text(json.dumps(raw, sort_keys=True, separators=(",", ":")))
        except (TypeError, ValueError, RecursionError):
            sent = None
        if sent is not None:
            with self._lock:
                seen = self._seen.get(sent)
                if seen is not None:
                    self._seen.move_to_end(sent)
                    return seen
        s = self.settings
        if isinstance(raw, dict):
            for field, limit in (("layers", s.max_graph_layers), ("edges", s.max_graph_edges)):
                items = raw.get(field)
                if isinstance(items, list) and len(items) > limit:
                    raise ApiError(413, f"the graph has {len(items)} {field}; this service takes at most {limit}",
                                   [*loc, field], "too_large")
        try:
            graph = ModelGraph.from_dict(raw)
        except (GraphError, RecursionError) as exc:  # RecursionError: a document nested too deep to read
            raise ApiError(422, str(exc) or type(exc).__name__, loc) from None
        user_label(graph.model, [*loc, "model"], 256)
        check_sizes(graph, loc)
        text = canonical(graph.to_dict())
        info = GraphInfo(digest_text(text), text, graph.model, len(graph), graph.nx.number_of_edges())
        if sent is not None and len(text) <= _SEEN_ONE:
            with self._lock:
                self._seen[sent] = info
                self._seen_bytes += len(text)
                while self._seen_bytes > _SEEN_ALL:
                    _, dropped = self._seen.popitem(last=False)
                    self._seen_bytes -= len(dropped.doc)
        return info


def _harvest(body: PlanCreate | CompareCreate, cluster: ClusterState, options: PlanOptions) -> HarvestOptions | None:
    """The request's harvesting options, checked against the cluster; None when it asks for none."""
    asked = getattr(body, "harvest", None)
    if asked is None:
        return None
    loc: list[str | int] = ["body", "harvest"]
    devices = {d.id: d for d in cluster.effective.devices}
    known = f"cluster {cluster.name!r} has {', '.join(devices)}"
    for i, lender in enumerate(asked.lenders or ()):
        if lender not in devices:
            raise ApiError(422, f"lender {lender!r} is not a device of the cluster: {known}", [*loc, "lenders", i])
    for device, nbytes in asked.reserved.items():
        if device not in devices:
            raise ApiError(422, f"reserved names {device!r}, which is not a device of the cluster: {known}",
                           [*loc, "reserved", device])
        usable = int(devices[device].memory * (1.0 - options.memory_margin))
        if nbytes > usable:
            raise ApiError(422, f"reserved {nbytes} bytes on {device!r}, more than the {usable} it offers after "
                           "the memory margin", [*loc, "reserved", device])
    try:
        return HarvestOptions(tuple(asked.lenders) if asked.lenders is not None else None, asked.host_memory,
                              asked.host_bandwidth, asked.host_latency, tuple(sorted(asked.reserved.items())),
                              asked.fetch, asked.stash)
    except PlanError as exc:  # the schema has read every value: a rule of the planner's own
        raise ApiError(422, str(exc), loc) from None


def check_sizes(graph: Any, loc: list[str | int]) -> None:
    """A 422 naming the first size of ``graph`` (a ModelGraph) over the planner's numeric range."""
    if graph.batch_size > 2**31:
        raise ApiError(422, f"batch_size {graph.batch_size} is over {2**31}", [*loc, "batch_size"])
    for layer in graph.layers:
        for name, limit in _SIZE_LIMITS.items():
            if getattr(layer, name) > limit:
                raise ApiError(422, f"layer {layer.name!r}: {name} {getattr(layer, name)} is over {limit}",
                               [*loc, "layers"])
    for src, dst, nbytes in graph.edges():
        if nbytes > _MAX_BYTES:
            raise ApiError(422, f"edge {src} -> {dst}: bytes {nbytes} is over {_MAX_BYTES}", [*loc, "edges"])
