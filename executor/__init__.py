"""Runs a pipeplan plan as pipelined inference on ``torch.distributed.pipelining``.

Public surface::

    from pipeplan.executor import run_plan, RunOptions, RunReport
    from pipeplan.executor import split_program, check_plan            # the pieces, for other runners
    from pipeplan.executor import ExecutorError, PlanMismatchError, RunError, StageFailure, OutputMismatchError
    from pipeplan.executor import deploy_plan, Deployment, ServeOptions                # a plan kept serving requests
    from pipeplan.executor import QueueFullError, DeploymentClosed

``executor`` sits on top of ``costmodel`` and ``planner``.  Names are imported lazily so that
``pipeplan --help`` does not pay for torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Deployment": "pipeplan.executor.deploy",
    "ServeOptions": "pipeplan.executor.deploy",
    "deploy_plan": "pipeplan.executor.deploy",
    "DeploymentClosed": "pipeplan.executor.errors",
    "ExecutorError": "pipeplan.executor.errors",
    "OutputMismatchError": "pipeplan.executor.errors",
    "PlanMismatchError": "pipeplan.executor.errors",
    "QueueFullError": "pipeplan.executor.errors",
    "RunError": "pipeplan.executor.errors",
    "StageFailure": "pipeplan.executor.errors",
    "RunOptions": "pipeplan.executor.options",
    "RunReport": "pipeplan.executor.report",
    "StageReport": "pipeplan.executor.report",
    "report_table": "pipeplan.executor.report",
    "verdict": "pipeplan.executor.report",
    "run_plan": "pipeplan.executor.run",
    "StageProgram": "pipeplan.executor.stages",
    "split_program": "pipeplan.executor.stages",
    "check_plan": "pipeplan.executor.validate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


# The folder is installed as pipeplan.executor; imported under another name it would be a second copy.
if __name__ != "pipeplan.executor":
    raise ImportError(f"import pipeplan.executor, not {__name__}: pipeplan's packages live under one namespace")
