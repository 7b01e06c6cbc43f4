"""What runs inside a worker process: capture, solve, compare; and the zoo list (``__main__``).

Everything here takes and returns plain JSON-like data (the pool pickles it over a pipe between
the server and its own workers); nothing a client sends is ever unpickled or imported: a model is a
zoo name or a graph document.  Errors that are the request's fault are ``ValueError``s (PlanError,
ClusterError, GraphError, ZooError, CaptureError) and come back marked as such.
"""

from __future__ import annotations

import logging
import os
import signal
import traceback
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from api.keys import canonical, digest_of, finite

__all__ = ["run", "serve"]

log = logging.getLogger(__name__)

_COST_MODELS: dict[str, Any] = {}  # spec -> loaded model, kept for the worker's life


def serve(conn: Connection) -> None:
    """The worker's loop: announce readiness, then answer one task at a time until told to stop."""
    # Ctrl-C reaches the whole process group; the server stops its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import planner.ilp  # noqa: F401  # imported before "ready" so the first solve is not slower

    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the server is gone
            return
        if message is None:
            return
        task_id, kind, payload = message
        reply: tuple[Any, ...]
        try:
            reply = (task_id, True, run(kind, payload), None, None, False)
        except ValueError as exc:
            reply = (task_id, False, None, type(exc).__name__, str(exc), True)
        except Exception as exc:
            log.error("task %s (%s) failed:\n%s", task_id, kind, traceback.format_exc())
            reply = (task_id, False, None, type(exc).__name__, f"internal error: {type(exc).__name__}: {exc}",
                     False)
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return


def run(kind: str, payload: dict[str, Any]) -> Any:
    """Do one task; see the module docstring for what each kind returns."""
    if kind == "plan":
        return _plan(payload)
    if kind == "compare":
        return _compare(payload)
    raise ValueError(f"unknown task kind {kind!r}")


def _models() -> list[dict[str, str]]:
    from costmodel.zoo import list_models

    return [{"name": m.name, "family": m.family, "inputs": m.inputs, "description": m.description}
            for m in list_models()]


def _graph(payload: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    """The request's graph, and its stored form when it was captured here (else None)."""
    from costmodel.graph import ModelGraph

    if payload.get("graph_text") is not None:  # sent, or captured before
        return ModelGraph.from_json(payload["graph_text"]), None
    from costmodel.zoo import capture_model

    zoo = payload["zoo"]
    graph = capture_model(zoo["name"], zoo["batch"], granularity=zoo["granularity"],
                          seq_len=zoo["seq_len"], image_size=zoo["image_size"])
    doc = graph.to_dict()
    stored = {"digest": digest_of(doc), "doc": canonical(doc), "model": graph.model, "layers": len(graph),
              "edges": graph.nx.number_of_edges()}
    return graph, stored


def _problem(payload: dict[str, Any]) -> tuple[Any, Any, dict[str, Any] | None]:
    from costmodel.registry import load_cost_model
    from planner.cluster import Cluster
    from planner.ilp import SolverOptions
    from planner.problem import PlanOptions, Problem

    graph, stored = _graph(payload)
    cluster = Cluster.from_dict(payload["cluster"])
    spec = payload["costmodel"]
    if spec not in _COST_MODELS:
        _COST_MODELS[spec] = load_cost_model(spec)
    options = PlanOptions(**payload["options"])
    problem = Problem(graph, cluster, _COST_MODELS[spec], options)
    if options.min_throughput is not None and problem.max_bottleneck >= _longest_stage(problem):
        # A floor no stage can break changes nothing, but planner.ilp scales it into an int64 and
        # overflows when it is extreme (min_throughput=1e-12): plan without it, report the options asked.
        problem = Problem(graph, cluster, _COST_MODELS[spec], replace(options, min_throughput=None))
    return problem, SolverOptions(**payload["solver"]), stored


def _longest_stage(problem: Any) -> float:
    """Seconds no stage of any plan can exceed: every layer at its slowest, and every output sent
    over its slowest link, both ways."""
    k = problem.n_devices
    sends = sum(max((problem.transfer(u, a, b) for a in range(k) for b in range(k)), default=0.0)
                for u in range(problem.n_layers) if problem.succ[u])
    return float(sum(max(row) for row in problem.time) + 2 * sends)


def _plan(payload: dict[str, Any]) -> dict[str, Any]:
    from api.reservations import stage_kind
    from planner.ilp import solve
    from planner.problem import PlanOptions

    problem, solver, stored = _problem(payload)
    plan = solve(problem, solver)
    plan.costmodel = payload["costmodel_name"]
    plan.options = PlanOptions(**payload["options"])
    loads = {s.device: stage_kind((problem.graph[name] for name in s.layers), problem.cluster.device(s.device))
             for s in plan.stages}
    return {"graph": stored, "plan": finite(plan.to_dict()), "loads": loads}


def _compare(payload: dict[str, Any]) -> dict[str, Any]:
    from planner.compare import compare
    from planner.problem import PlanOptions

    problem, solver, stored = _problem(payload)
    comp = compare(problem, solver)
    for plan in comp.plans.values():
        plan.costmodel = payload["costmodel_name"]
        plan.options = PlanOptions(**payload["options"])
    ilp = comp.plans["ilp"].objective_value
    rows = [{"method": name, "plan": finite(plan.to_dict()),
             "objective_vs_ilp": finite(plan.objective_value / ilp) if ilp else None,
             "bottleneck_vs_bound": finite(plan.bottleneck / comp.lower_bound) if comp.lower_bound else None}
            for name, plan in comp.plans.items()]
    return {"graph": stored, "comparison": {
        "model": problem.graph.model, "cluster": problem.cluster.name, "objective": problem.options.objective,
        "lower_bound": finite(comp.lower_bound), "plans": rows,
        "failures": [{"method": m, "error": why} for m, why in comp.failures.items()]}}


if __name__ == "__main__":  # ``python -m api.worker models``: the zoo list as JSON (see api.zoo)
    import json
    import sys

    if sys.argv[1:] != ["models"]:
        sys.exit("usage: python -m api.worker models")
    print(json.dumps(_models()))
