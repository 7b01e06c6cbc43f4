"""What can go wrong when a plan is run: a plan that does not fit the model, or a run that fails.

A :class:`PlanMismatchError` is raised before any process starts (the plan names layers the model
does not have, or was made for another model); a :class:`RunError` after (a stage raised, a stage
died, a collective timed out, the outputs differ from the unsplit model's).
"""

from __future__ import annotations

from pipeplan.errors import UserError

__all__ = ["DeploymentClosed", "ExecutorError", "OutputMismatchError", "PlanMismatchError", "QueueFullError",
           "RunError", "StageFailure"]


class ExecutorError(Exception):
    """Base of the executor's errors: the CLI prints them as one line."""


class PlanMismatchError(ExecutorError, UserError, ValueError):
    """The plan cannot be run on this model: wrong model, missing or unknown layers, bad stages, bad
    run options (a :class:`~pipeplan.errors.UserError`: the caller's to fix)."""


class RunError(ExecutorError, RuntimeError):
    """The run started but did not finish correctly."""


class StageFailure(RunError):
    """One stage process failed; ``stage`` is its index and ``device`` the plan's device for it."""

    def __init__(self, stage: int, device: str, message: str, details: str = "") -> None:
        super().__init__(f"stage {stage} on {device} failed: {message}")
        self.stage = stage
        self.device = device
        self.details = details  # the stage's traceback, for logs and --verbose


class OutputMismatchError(RunError):
    """The pipeline ran, but its outputs differ from the unsplit model's; ``report`` has the measurements."""

    def __init__(self, message: str, report: object) -> None:
        super().__init__(message)
        self.report = report


class QueueFullError(ExecutorError):
    """A deployment's request queue stayed full for the whole of ``submit``'s timeout."""


class DeploymentClosed(ExecutorError):
    """The deployment no longer takes requests: it was closed, or a stage failed (``__cause__`` says which)."""
