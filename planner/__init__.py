"""Pipeline partitioning for pipeplan: clusters, problems, plans, the ILP, baselines, simulator.

Public surface::

    from planner import load_cluster, Problem, PlanOptions, solve, SolverOptions, BASELINES, evaluate
    from planner import GraphBuilder  # a layer graph by hand (keyword-only layers, order computed)

``planner`` depends on ``costmodel`` and knows nothing of the executor or the service.  The ILP
(``solve``, ``SolverOptions``) is imported on first use: OR-Tools takes most of a second to load,
and the executor's stage processes read plans without ever solving one.
"""

from __future__ import annotations

import importlib
from typing import Any

from planner.baselines import BASELINES, best_baseline
from planner.builder import GraphBuilder
from planner.cluster import Cluster, ClusterError, Link, builtin_clusters, load_cluster
from planner.plan import Certificate, Plan, SolverDetails, Stage
from planner.problem import PlanError, PlanOptions, Problem
from planner.simulate import evaluate, make_plan, violation

__all__ = [
    "BASELINES", "Certificate", "Cluster", "ClusterError", "GraphBuilder", "Link", "Plan", "PlanError",
    "PlanOptions", "Problem", "SolverDetails", "SolverOptions", "Stage", "best_baseline", "builtin_clusters",
    "evaluate", "load_cluster", "make_plan", "solve", "violation",
]


def __getattr__(name: str) -> Any:
    if name in ("solve", "SolverOptions"):
        return getattr(importlib.import_module("planner.ilp"), name)
    raise AttributeError(f"module 'planner' has no attribute {name!r}")
