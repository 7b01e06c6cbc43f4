"""Rebuild the module a plan was made for, capture it again, and make its input batches.

A plan records how its graph was captured (``Plan.source``: a zoo name or a ``module:function``
factory, the microbatch size, the granularity and the zoo's build options).  Every stage process
rebuilds the same module from it with the same seed, so all of them hold the same weights without
shipping any, and exports it exactly as :func:`costmodel.capture.capture_program` does.

A factory is called as ``factory(batch_size=B)`` after ``torch.manual_seed(seed)`` and returns
``(module, args)`` (or any object with ``.model`` and ``.args``).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from costmodel.capture import CapturedProgram, CaptureError, capture_program
from executor.errors import PlanMismatchError
from planner.plan import Plan

__all__ = ["Rebuilt", "batch_inputs", "import_factory", "rebuild", "source_of_plan", "state_fingerprint"]

log = logging.getLogger(__name__)


@dataclass
class Rebuilt:
    """The plan's module, one example microbatch, and its capture."""

    model: nn.Module
    args: tuple[Any, ...]
    captured: CapturedProgram


def source_of_plan(plan: Plan) -> dict[str, Any]:
    """The plan's ``source``; for a plan written before sources existed, its zoo model at leaf level."""
    if plan.source is not None:
        return dict(plan.source)
    log.warning("plan has no 'source': assuming zoo model %r, batch %d, leaf granularity, seed 0",
                plan.model, plan.batch_size)
    return {"model": plan.model, "zoo": plan.model, "batch_size": plan.batch_size, "granularity": "leaf"}


def _factory(path: str) -> Any:
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise PlanMismatchError(f"model factory {path!r}: write it as 'package.module:function'")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise PlanMismatchError(f"model factory {path!r} cannot be imported: {exc}") from None


def import_factory(plan: Plan) -> None:
    """Import the module of the plan's factory, if any: custom operators it registers must exist in
    every stage process before a stage module that calls them runs."""
    factory = (plan.source or {}).get("factory")
    if factory:
        _factory(str(factory))


def _build(source: dict[str, Any]) -> tuple[nn.Module, tuple[Any, ...]]:
    from costmodel.zoo import ZooError, build_model

    batch = int(source.get("batch_size", 1))
    seed = int(source.get("seed", 0))
    if source.get("factory"):
        torch.manual_seed(seed)
        built = _factory(str(source["factory"]))(batch_size=batch)
        model, args = (built.model, built.args) if hasattr(built, "model") else built
        if not isinstance(model, nn.Module):
            raise PlanMismatchError(f"model factory {source['factory']!r} returned {type(model).__name__}, "
                                    "not (nn.Module, args)")
        return model.eval(), tuple(args)
    name = source.get("zoo") or source.get("model")
    try:
        built = build_model(str(name), batch, seq_len=source.get("seq_len"),
                            image_size=source.get("image_size"), seed=seed)
    except (ZooError, ImportError) as exc:
        raise PlanMismatchError(f"cannot rebuild the plan's model {name!r}: {exc}") from None
    return built.model.eval(), built.args


def rebuild(plan: Plan) -> Rebuilt:
    """Build the plan's module and capture it as the planner did.

    Raises :class:`PlanMismatchError` when the source cannot be built or exported.
    """
    source = source_of_plan(plan)
    model, args = _build(source)
    try:
        captured = capture_program(model, args, granularity=str(source.get("granularity", "leaf")),
                                   name=str(source.get("model", plan.model)))
    except CaptureError as exc:
        raise PlanMismatchError(f"cannot capture the plan's model: {exc}") from None
    return Rebuilt(model, args, captured)


def batch_inputs(example: tuple[Any, ...], microbatches: int, seed: int, index: int) -> tuple[Any, ...]:
    """Batch ``index`` of the run's stream: ``microbatches`` random microbatches shaped like ``example``.

    Floating tensors are normal; integer tensors (token ids) are uniform over the example's range,
    so every id stays valid for the model's embedding; other values are repeated as they are.
    Every process that asks for the same batch gets the same tensors.

    >>> x = batch_inputs((torch.zeros(2, 3),), microbatches=4, seed=0, index=1)[0]
    >>> tuple(x.shape)
    (8, 3)
    """
    gen = torch.Generator().manual_seed(seed * 1_000_003 + index)
    out: list[Any] = []
    for arg in example:
        if not isinstance(arg, torch.Tensor) or arg.dim() == 0:
            out.append(arg)
            continue
        shape = (arg.shape[0] * microbatches, *arg.shape[1:])
        if arg.is_floating_point():
            out.append(torch.randn(shape, generator=gen, dtype=arg.dtype))
        elif arg.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
            low, high = int(arg.min()), int(arg.max()) + 1
            out.append(torch.randint(low, high, shape, generator=gen, dtype=arg.dtype))
        else:
            out.append(arg.repeat(microbatches, *([1] * (arg.dim() - 1))))
    return tuple(out)


def state_fingerprint(captured: CapturedProgram) -> str:
    """A digest of the exported weights: stage processes compare it to prove they built the same model."""
    digest = hashlib.sha256()
    program = captured.program
    for name, tensor in sorted({**program.state_dict, **program.constants}.items()):
        if isinstance(tensor, torch.Tensor):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]
