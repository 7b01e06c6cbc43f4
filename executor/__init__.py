"""Runs a pipeplan plan as pipelined inference on ``torch.distributed.pipelining``.

Public surface::

    from executor import run_plan, RunOptions, RunReport
    from executor import split_program, check_plan            # the pieces, for other runners
    from executor import ExecutorError, PlanMismatchError, RunError, StageFailure, OutputMismatchError
    from executor import deploy_plan, Deployment, ServeOptions                # a plan kept serving requests
    from executor import QueueFullError, DeploymentClosed

``executor`` sits on top of ``costmodel`` and ``planner``.  Names are imported lazily so that
``pipeplan --help`` does not pay for torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Deployment": "executor.deploy",
    "ServeOptions": "executor.deploy",
    "deploy_plan": "executor.deploy",
    "DeploymentClosed": "executor.errors",
    "ExecutorError": "executor.errors",
    "OutputMismatchError": "executor.errors",
    "PlanMismatchError": "executor.errors",
    "QueueFullError": "executor.errors",
    "RunError": "executor.errors",
    "StageFailure": "executor.errors",
    "RunOptions": "executor.options",
    "RunReport": "executor.report",
    "StageReport": "executor.report",
    "report_table": "executor.report",
    "verdict": "executor.report",
    "run_plan": "executor.run",
    "StageProgram": "executor.stages",
    "split_program": "executor.stages",
    "check_plan": "executor.validate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'executor' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
