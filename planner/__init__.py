"""Pipeline partitioning for pipeplan: clusters, problems, plans, the ILP, baselines, simulator.

Public surface::

    from pipeplan.planner import load_cluster, Problem, PlanOptions, solve, SolverOptions, BASELINES, evaluate
    from pipeplan.planner import GraphBuilder  # a layer graph by hand (keyword-only layers, order computed)

``planner`` depends on ``costmodel`` and knows nothing of the executor or the service.  The ILP
(``solve``, ``SolverOptions``) is imported on first use: OR-Tools takes most of a second to load,
and the executor's stage processes read plans without ever solving one.
"""

from __future__ import annotations

import importlib
from typing import Any

from pipeplan.costmodel.cluster import Cluster, ClusterError, Link, builtin_clusters, load_cluster
from pipeplan.planner.baselines import BASELINES, best_baseline
from pipeplan.planner.builder import GraphBuilder
from pipeplan.planner.plan import Certificate, Plan, SolverDetails, Stage
from pipeplan.planner.problem import PlanError, PlanOptions, Problem
from pipeplan.planner.simulate import evaluate, make_plan, violation

__all__ = [
    "BASELINES", "Certificate", "Cluster", "ClusterError", "GraphBuilder", "Link", "Plan", "PlanError",
    "PlanOptions", "Problem", "SolverDetails", "SolverOptions", "Stage", "best_baseline", "builtin_clusters",
    "evaluate", "load_cluster", "make_plan", "solve", "violation",
]


def __getattr__(name: str) -> Any:
    if name in ("solve", "SolverOptions"):
        return getattr(importlib.import_module("pipeplan.planner.ilp"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The folder is installed as pipeplan.planner; imported under another name it would be a second copy.
if __name__ != "pipeplan.planner":
    raise ImportError(f"import pipeplan.planner, not {__name__}: pipeplan's packages live under one namespace")
