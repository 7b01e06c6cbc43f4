"""What one stage process runs: its module cut from the rebuilt model, and the guard around it.

:func:`build_stages` cuts the model along a plan's stages (:func:`pipeplan.executor.stages.split_program`);
:class:`GuardedStage` is the module a ``PipelineStage`` calls: it moves inputs to the compute device,
marks the module's own exceptions (:class:`ForwardError`) so that the launcher blames the right
stage, and hands back contiguous tensors.  Used by ``pipeplan run``'s stage processes
(:mod:`pipeplan.executor.worker`) and by deployments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from pipeplan.costmodel.source import kwarg_order
from pipeplan.executor.loan_cut import FetchSpec, Lent
from pipeplan.executor.source import Rebuilt, state_fingerprint
from pipeplan.executor.stages import Boundary, split_program
from pipeplan.planner.plan import Plan

__all__ = ["ForwardError", "GuardedStage", "StageBuild", "build_stages"]


@dataclass
class StageBuild:
    """What one stage process runs: its module and the shapes it sends and receives, the example
    microbatch, and, where the outputs are checked, the unsplit model.  ``fingerprint`` digests the
    weights when each process built its own.  The last stage's ``model`` is None when it could
    not be pickled: that stage then rebuilds it from the plan's source."""

    module: fx.GraphModule
    input_meta: list[Boundary]
    output_meta: list[Boundary]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    kwarg_order: list[str]  # the keyword inputs in the exported program's placeholder order
    model: torch.nn.Module | None
    fingerprint: str | None = None
    fetches: list[FetchSpec] = field(default_factory=list)  # borrowed layers, in the order the stage runs them
    lent: list[Lent] = field(default_factory=list)  # weights this stage's process holds for other stages


def build_stages(plan: Plan, rebuilt: Rebuilt, check: bool, fingerprint: bool = False) -> list[StageBuild]:
    """Cut the rebuilt model along the plan's stages; the last stage also gets the unsplit model."""
    digest = state_fingerprint(rebuilt.captured) if fingerprint else None
    programs = split_program(rebuilt.captured, [s.layers for s in plan.stages])
    last = len(programs) - 1
    order = kwarg_order(rebuilt.kwargs, rebuilt.captured.program.call_spec.in_spec)
    return [StageBuild(p.module, p.input_meta, p.output_meta, rebuilt.args, rebuilt.kwargs, order,
                       rebuilt.model if check and k == last else None, digest)
            for k, p in enumerate(programs)]


class ForwardError(RuntimeError):
    """The stage's own computation raised (as opposed to a peer failing or a timeout)."""


class GuardedStage(torch.nn.Module):
    """Runs the stage's module on its compute device and hands back contiguous tensors.

    Exceptions raised by the module are marked, so the launcher can blame the right stage.  Outputs
    are made contiguous because point-to-point transports send only contiguous tensors (a
    transposed or expanded activation at a cut would end the run).  With ``staged``, inputs arrive
    in host memory and outputs leave through it (gloo carries CPU tensors only).
    """

    def __init__(self, module: torch.nn.Module, compute: torch.device, staged: bool, last: bool) -> None:
        super().__init__()
        self.module = module
        self.compute = compute
        self.staged = staged
        self.last = last

    def forward(self, *args: Any) -> Any:
        if self.staged:
            args = tuple(a.to(self.compute, non_blocking=True) if isinstance(a, torch.Tensor) else a for a in args)
        try:
            out = self.module(*args)
        except Exception as exc:
            raise ForwardError(f"{type(exc).__name__}: {exc}") from exc
        leave = torch.device("cpu") if self.staged and not self.last else None
        return tuple(t.contiguous() if leave is None else t.to(leave).contiguous() for t in out)
