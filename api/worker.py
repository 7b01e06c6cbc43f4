"""What runs inside a worker process: capture, solve, compare, predict.

A task is a typed payload (:mod:`pipeplan.api.payloads`) and its answer plain JSON-like data (the pool
pickles both over a pipe between the server and its own workers); nothing a client sends is ever
unpickled or imported: a model is a zoo name or a graph document.  Errors that are the request's
fault are :class:`~pipeplan.errors.UserError` subclasses (PlanError, ClusterError, GraphError, ZooError,
CaptureError, and this module's CostModelError and LayerError) and come back marked as such, with
their message; any other exception (a bare ``ValueError`` from numpy, a broken invariant) is the
service's fault: its traceback goes to the log, and the answer names only its class.

A worker's memory is capped with ``RLIMIT_DATA`` (private writable memory: heap and anonymous maps),
not ``RLIMIT_AS``: the address space also counts what libraries only reserve (torch alone maps
900 MB it never touches; each solver thread's malloc arena reserves 64 MB), so an address-space
cap either blocks honest jobs or is too loose to protect the machine.  Over the cap, Python raises
``MemoryError`` (numpy, networkx, the model building) and the task fails as ``MemoryLimit``; native
code that cannot allocate aborts the worker, which the pool reports with the limit in the message.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import os
import resource
import signal
import traceback
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from pipeplan.api.keys import canonical, digest_of, finite
from pipeplan.api.logs import request_id
from pipeplan.api.payloads import PlanPayload, PredictPayload
from pipeplan.api.placement.payload import PlacePayload
from pipeplan.api.tasks import Outcome, Reply
from pipeplan.errors import UserError

if TYPE_CHECKING:
    from pipeplan.costmodel.graph import ModelGraph
    from pipeplan.planner.ilp import SolverOptions
    from pipeplan.planner.problem import Problem

__all__ = ["CostModelError", "LayerError", "failure_of", "run", "serve"]

log = logging.getLogger(__name__)

_COST_MODELS: dict[str, Any] = {}  # spec -> loaded model, kept for the worker's life


class CostModelError(UserError, ValueError):
    """The named cost model cannot be loaded (a broken or foreign model file), or cannot time what was asked."""


class LayerError(UserError, ValueError):
    """A predict request's layers are not a valid list of layers."""


def serve(conn: Connection, memory_limit: int = 0, log_format: str | None = None) -> None:
    """The worker's loop: announce readiness, then answer one task at a time until told to stop;
    ``memory_limit`` bytes of private memory at most (0: no limit); log lines in ``log_format``
    (``json`` or ``text``, as the server's; None: Python's defaults), carrying each task's request ID."""
    # Ctrl-C reaches the whole process group; the server stops its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_format is not None:
        import logging.config

        from pipeplan.api.logs import logging_config

        logging.config.dictConfig(logging_config("warning", log_format, access=False))
    import pipeplan.planner.ilp  # noqa: F401  # imported before "ready" so the first solve is not slower

    if memory_limit:
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        limit = memory_limit if hard == resource.RLIM_INFINITY else min(memory_limit, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the server is gone
            return
        if message is None:
            return
        task_id, kind, payload, rid = message
        token = request_id.set(rid)
        outcome: Outcome | None = None
        try:
            outcome = Outcome(True, run(kind, payload))
        except MemoryError:
            pass  # answered below: here the traceback still holds everything the task built
        except Exception as exc:
            if not isinstance(exc, UserError) and memory_limit and _peak_resident() >= 0.9 * memory_limit:
                # C code that cannot allocate often fails as something else (SystemError in an import,
                # a RuntimeError from a library): near the limit, that is the likely cause.  Decided
                # before failure_of formats and logs a traceback, which needs memory the task still holds.
                outcome = _out_of_memory(kind, memory_limit, f" ({type(exc).__name__}: {exc})")
            else:
                outcome = failure_of(exc, task_id, kind)
        finally:
            request_id.reset(token)
        if outcome is None:
            # Out of memory: what the task built is unreachable now and freed (the pool replaces this
            # worker anyway: its heap stays fragmented at the high-water mark); a log line that still
            # cannot be formatted is not worth losing the answer for.
            gc.collect()
            with contextlib.suppress(MemoryError):
                log.warning("task %s (%s) ran out of memory (limit %d bytes)", task_id, kind, memory_limit)
            outcome = _out_of_memory(kind, memory_limit)
        try:
            conn.send(Reply(task_id, outcome))
        except (EOFError, OSError):
            return


def failure_of(exc: Exception, task_id: str, kind: str) -> Outcome:
    """The outcome of task ``task_id`` that raised ``exc``: the request's fault, with the message, for a
    :class:`~pipeplan.errors.UserError`; else the service's, with the traceback logged and an answer
    that names only the exception's class (a numpy message or an invariant says nothing to a client).

    >>> failure_of(LayerError("layers[0] must be an object"), "t1", "predict").user_error
    True
    >>> failure_of(ValueError("operands could not be broadcast"), "t1", "plan").error
    'internal error (ValueError); the service logged it with task t1'
    """
    if isinstance(exc, UserError):
        return Outcome(False, None, str(exc), type(exc).__name__, user_error=True)
    log.error("task %s (%s) failed:\n%s", task_id, kind, "".join(traceback.format_exception(exc)))
    return Outcome(False, None, f"internal error ({type(exc).__name__}); the service logged it with task {task_id}",
                   type(exc).__name__)


def _out_of_memory(kind: str, limit: int, detail: str = "") -> Outcome:
    return Outcome(False, None, f"this {kind} job needed more memory than a worker may hold ({limit} bytes, "
                   f"PIPEPLAN_JOB_MEMORY){detail}; send a smaller graph or cluster, or ask the operator for more",
                   "MemoryLimit", user_error=True)


def _peak_resident() -> int:
    """This process's peak resident bytes (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run(kind: str, payload: PlanPayload | PredictPayload | PlacePayload) -> Any:
    """Do one task; see the module docstring for what each kind returns."""
    if kind in ("plan", "compare") and isinstance(payload, PlanPayload):
        return _plan(payload) if kind == "plan" else _compare(payload)
    if kind == "predict" and isinstance(payload, PredictPayload):
        return _predict(payload)
    if kind == "place" and isinstance(payload, PlacePayload):
        from pipeplan.api.placement.decide import decide

        return decide(payload)
    raise ValueError(f"no {kind!r} task takes a {type(payload).__name__}")  # the server's bug: a 500


def _graph(payload: PlanPayload) -> tuple[ModelGraph, dict[str, Any] | None]:
    """The request's graph, and its stored form when it was captured here (else None)."""
    from pipeplan.costmodel.graph import ModelGraph

    if payload.graph_text is not None:  # sent, or captured before
        return ModelGraph.from_json(payload.graph_text), None
    from pipeplan.costmodel.zoo import capture_model

    zoo = payload.zoo
    assert zoo is not None, "PlanPayload holds a graph or a zoo model"
    graph = capture_model(zoo.name, zoo.batch, granularity=zoo.granularity, seq_len=zoo.seq_len,
                          image_size=zoo.image_size, kv_context=zoo.kv_context)
    doc = graph.to_dict()
    stored = {"digest": digest_of(doc), "doc": canonical(doc), "model": graph.model, "layers": len(graph),
              "edges": graph.nx.number_of_edges()}
    return graph, stored


def _cost_model(spec: str) -> Any:
    """The cost model ``spec`` names, loaded once per worker (a learned one takes seconds)."""
    from pipeplan.costmodel.registry import load_cost_model

    if spec not in _COST_MODELS:
        try:
            _COST_MODELS[spec] = load_cost_model(spec)
        except ValueError as exc:  # resolved by the server: what is left is a broken or foreign file
            raise CostModelError(str(exc)) from None
    return _COST_MODELS[spec]


def _problem(payload: PlanPayload) -> tuple[Problem, SolverOptions, dict[str, Any] | None]:
    """The planner's problem, as the request states it, and the solver's options."""
    from pipeplan.planner.problem import Problem

    graph, stored = _graph(payload)
    problem = Problem(graph, payload.cluster, _cost_model(payload.costmodel), payload.options)
    return problem, payload.solver.options(), stored


def _plan(payload: PlanPayload) -> dict[str, Any]:
    from pipeplan.api.reservations import stage_kind
    from pipeplan.planner.ilp import solve

    problem, solver, stored = _problem(payload)
    if payload.harvest is not None:  # the plan's harvest section holds the memory map and the loans
        from pipeplan.planner.harvest_solve import solve_harvest

        plan = solve_harvest(problem, payload.harvest, solver)
    else:
        plan = solve(problem, solver)
    plan.costmodel = payload.costmodel_name
    loads = {s.device: stage_kind((problem.graph[name] for name in s.layers), problem.cluster.device(s.device))
             for s in plan.stages}
    return {"graph": stored, "plan": finite(plan.to_dict()), "loads": loads}


def _compare(payload: PlanPayload) -> dict[str, Any]:
    from pipeplan.api.comparison import comparison

    problem, solver, stored = _problem(payload)
    return {"graph": stored, "comparison": comparison(problem, solver, payload.costmodel_name, payload.harvest)}


def _seconds(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _predict(payload: PredictPayload) -> dict[str, Any]:
    """Each layer's time on each device: ``layers`` (graph-format layer documents), ``devices``
    (loads included), ``load`` (one load for all of them, or None)."""
    from pipeplan.api.errors import ApiError
    from pipeplan.api.resolve import check_sizes
    from pipeplan.costmodel.graph import GRAPH_FORMAT, GRAPH_VERSION, GraphError, ModelGraph

    doc = {"format": GRAPH_FORMAT, "version": GRAPH_VERSION, "model": "predict", "batch_size": 1,
           "layers": payload.layers, "edges": []}
    try:
        graph = ModelGraph.from_dict(doc)
        check_sizes(graph, ["body"])
    except ApiError as exc:
        raise LayerError(exc.detail) from None
    except (GraphError, RecursionError) as exc:  # RecursionError: parts nested too deep to read
        raise LayerError(str(exc) or type(exc).__name__) from None
    model = _cost_model(payload.costmodel)
    try:
        # A device at a time: a learned model predicts a whole list of layers in one batch.
        times = {d.id: model.layer_times(graph.layers, d, payload.load) for d in payload.devices}
    except UserError as exc:  # a cost table without these layers or devices
        raise CostModelError(f"cost model {payload.costmodel_name!r}: {exc}") from None
    rows = []
    for i, layer in enumerate(graph.layers):
        memory = model.layer_memory(layer)
        rows.append({"name": layer.name, "seconds": {d: _seconds(t[i]) for d, t in times.items()},
                     "params": memory.params, "activations": memory.activations, "workspace": memory.workspace})
    totals = {d: float(sum(t)) for d, t in times.items()}
    return {"costmodel": payload.costmodel_name, "devices": list(totals), "layers": rows,
            "totals": {d: _seconds(t) for d, t in totals.items()}}
