"""Refuse a plan that cannot run on the rebuilt model, before any stage process starts.

The plan's stages must cover the captured graph's layers exactly once (no unknown layer, no
missing one, no stage without layers), agree with the graph's model and microbatch size, and keep
every edge of the graph going forward in stage order.
"""

from __future__ import annotations

from pipeplan.costmodel.graph import ModelGraph
from pipeplan.executor.errors import PlanMismatchError
from pipeplan.planner.plan import Plan

__all__ = ["check_plan"]


def _some(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_plan(plan: Plan, graph: ModelGraph) -> None:
    """Raise :class:`PlanMismatchError` naming the first way ``plan`` does not fit ``graph``.

    >>> from pipeplan.costmodel.graph import Layer
    >>> from pipeplan.planner.plan import Certificate, Stage
    >>> from pipeplan.planner.problem import PlanOptions
    >>> g = ModelGraph("toy", batch_size=1)
    >>> g.add_layer(Layer("a", "linear", "Linear", 0, 1, 1, 1, 1, 1, 1))
    >>> stage = Stage(0, "cpu0", ["a", "b"], 0.0, 0.0, 0.0, 0.0, 0, 1)
    >>> check_plan(Plan("toy", "c", "analytic", PlanOptions(), [stage], 0.0, 0.0,
    ...                 Certificate("x", "HEURISTIC", 0.0)), g)
    Traceback (most recent call last):
    ...
    pipeplan.executor.errors.PlanMismatchError: plan names layer 'b', which model 'toy' (leaf granularity) does not have
    """
    described = f"model {graph.model!r} ({graph.granularity} granularity)"
    if plan.model != graph.model:
        raise PlanMismatchError(f"plan is for model {plan.model!r}, but its source rebuilds {graph.model!r}")
    if plan.batch_size != graph.batch_size:
        raise PlanMismatchError(f"plan's microbatch is {plan.batch_size} samples, but the rebuilt "
                                f"{described} was captured with {graph.batch_size}")
    if not plan.stages:
        raise PlanMismatchError("plan has no stages")
    seen: dict[str, int] = {}  # layer -> position of its stage in the pipeline
    for k, stage in enumerate(plan.stages):
        if not stage.layers:
            raise PlanMismatchError(f"stage {k} on {stage.device} has no layers")
        for layer in stage.layers:
            if layer in seen:
                raise PlanMismatchError(f"layer {layer!r} is in stage {seen[layer]} and in stage {k}")
            seen[layer] = k
    unknown = [name for name in seen if name not in graph]
    if unknown:
        noun = "layer" if len(unknown) == 1 else "layers"
        raise PlanMismatchError(f"plan names {noun} {_some(unknown)}, which {described} does not have")
    missing = [layer.name for layer in graph.layers if layer.name not in seen]
    if missing:
        raise PlanMismatchError(f"plan leaves out {len(missing)} of the {len(graph)} layers of {described}: "
                                f"{_some(missing)}")
    for src, dst, _ in graph.edges():
        if seen[src] > seen[dst]:
            raise PlanMismatchError(f"edge {src} -> {dst} goes backwards, from stage {seen[src]} to stage "
                                    f"{seen[dst]}: stages must be in pipeline order")
