"""Rebuild the module a plan was made for, capture it again, and make its input batches.

A plan records how its graph was captured (``Plan.source``: a zoo name or a factory, the microbatch
size, the granularity, the build options and the dtype; see :mod:`pipeplan.costmodel.source`).  The
launcher rebuilds the module from it with the same seed and exports it exactly as
:func:`pipeplan.costmodel.capture.capture_program` does; under ``torchrun`` every stage process does, and
all of them hold the same weights without shipping any.  A module passed to
:func:`pipeplan.executor.run_plan` directly is captured as it is instead.

Custom operators (``torch.library`` ops that a model's package registers when imported, such as
the MoE grouped matmul of ``transformers``) must exist in every stage process before its stage
module is unpickled: :func:`registrations` names the Python modules that registered the ones the
program calls, and :func:`import_registrations` imports them.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from pipeplan.costmodel.capture import CapturedProgram, CaptureError, capture_program
from pipeplan.costmodel.kept_apart import TORCH_NAMESPACES
from pipeplan.costmodel.source import SourceError, build_source, import_source_module, parse_factory
from pipeplan.executor.errors import PlanMismatchError
from pipeplan.planner.plan import Plan

__all__ = ["Rebuilt", "batch_inputs", "batch_kwargs", "import_registrations", "rebuild", "registrations", "sample_rows",
           "source_of_plan", "state_fingerprint", "with_source"]

log = logging.getLogger(__name__)

# Operator namespaces that torch itself provides: never a user's registration.  Capture's (those its FLOP
# counter and the cost model take as torch's own) and the rest of torch's.
_TORCH_NAMESPACES = TORCH_NAMESPACES | {"_c10d_functional", "c10d_functional", "_c10d", "quantized", "_quantized",
                                        "higher_order", "profiler", "debugprims", "rngprims", "inductor", "_dtensor",
                                        "_export", "_operator", "mkldnn", "quantized_decomposed"}


@dataclass
class Rebuilt:
    """The plan's module, one example microbatch (positional and keyword inputs), and its capture."""

    model: nn.Module
    args: tuple[Any, ...]
    captured: CapturedProgram
    kwargs: dict[str, Any] = field(default_factory=dict)
    modules: list[str] = field(default_factory=list)  # Python modules that register its custom operators


def source_of_plan(plan: Plan) -> dict[str, Any]:
    """The plan's ``source``; for a plan written before sources existed, its zoo model at leaf level."""
    if plan.source is not None:
        return dict(plan.source)
    log.warning("plan has no 'source': assuming zoo model %r, batch %d, leaf granularity, seed 0",
                plan.model, plan.batch_size)
    return {"model": plan.model, "zoo": plan.model, "batch_size": plan.batch_size, "granularity": "leaf"}


def with_source(plan: Plan, model: str | None = None, dtype: str | None = None) -> Plan:
    """``plan`` rebuilt from another MODEL (zoo name or factory) and/or in another dtype.

    The plan's model name, microbatch size and granularity stay: the rebuilt module must still
    have the plan's layers, which :func:`pipeplan.executor.validate.check_plan` checks as for any plan.
    """
    if model is None and dtype is None:
        return plan
    from pipeplan.costmodel.source import SourceError, source_spec

    source = source_of_plan(plan)
    try:
        if model is not None:
            for key in ("zoo", "factory"):
                source.pop(key, None)
            source.update(source_spec(model, plan.batch_size, seed=int(source.get("seed") or 0)))
        if dtype is not None:
            planned = source.get("dtype", "fp32")
            source.update({k: v for k, v in source_spec("x", 1, dtype=dtype).items() if k == "dtype"})
            if source["dtype"] != planned:
                log.warning("plan %s was made for %s; running it in %s", plan.model, planned, source["dtype"])
    except SourceError as exc:
        raise PlanMismatchError(str(exc)) from None
    source["model"] = plan.model
    changed = Plan.from_dict(plan.to_dict())
    changed.source = source
    return changed


def registrations(program: torch.export.ExportedProgram, model: nn.Module | None = None) -> list[str]:
    """The Python modules to import so that every operator ``program`` calls is registered.

    A ``torch.library.custom_op`` records the function it wraps, whose module registered it; for an
    operator defined another way, the modules of the model's classes are the best guess (a package
    registers its operators when the modeling code is imported).
    """
    from torch._library.custom_ops import OPDEFS

    modules: list[str] = []
    unknown: list[str] = []
    for node in program.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        namespace = target.namespace
        if namespace in _TORCH_NAMESPACES:
            continue
        qualname = target._schema.name  # "ns::op"
        opdef = OPDEFS.get(qualname)
        fn = getattr(opdef, "_init_fn", None)
        if fn is not None and getattr(fn, "__module__", None):
            modules.append(fn.__module__)
        else:
            unknown.append(qualname)
    if unknown and model is not None:
        modules += [cls.__module__ for m in model.modules() for cls in type(m).__mro__
                    if cls.__module__ not in ("builtins", "torch.nn.modules.module")
                    and not cls.__module__.startswith("torch.")]
    return list(dict.fromkeys(m for m in modules if m != "__main__"))


def import_registrations(modules: Sequence[str], source: Mapping[str, Any] | None = None) -> None:
    """Import the modules that register the custom operators a stage calls, and the plan's factory
    module (which may register its own), before a stage module that calls them is unpickled."""
    factory = (source or {}).get("factory")
    if factory:
        try:
            import_source_module(parse_factory(str(factory)))
        except SourceError as exc:
            raise PlanMismatchError(str(exc)) from None
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise PlanMismatchError(f"module {name!r}, which registers custom operators the model calls, cannot "
                                    f"be imported in a stage process: {exc}") from None


def rebuild(plan: Plan, model: nn.Module | None = None, args: Sequence[Any] | None = None,
            kwargs: Mapping[str, Any] | None = None) -> Rebuilt:
    """Build the plan's module (or take ``model`` called on ``args``/``kwargs``) and capture it as
    the planner did.

    Raises :class:`PlanMismatchError` when the source cannot be built or exported.
    """
    source = source_of_plan(plan)
    if model is None:
        if args is not None or kwargs is not None:
            raise PlanMismatchError("inputs were given without a module: pass the module too, or neither")
        try:
            built = build_source(source)
        except SourceError as exc:
            raise PlanMismatchError(f"cannot rebuild the plan's model {plan.model!r}: {exc}") from None
        model, call_args, call_kwargs = built.model, built.args, built.kwargs
    else:
        if args is None:
            raise PlanMismatchError("a module was given without its example inputs: run_plan(plan, module, inputs)")
        call_args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
        call_kwargs = dict(kwargs or {})
        model.eval()
    meta = next((name for name, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta), None)
    if meta is not None:  # capture would succeed (it needs shapes only); the first stage would not
        raise PlanMismatchError(
            f"the plan's model {plan.model!r} is built on the meta device ({meta!r} has no data): the zoo's "
            "LLM-scale models are for planning only, nothing can run them here; run a smaller configuration "
            "of the same architecture from a factory (`pipeplan plan module:function`) to check a plan for real")
    try:
        captured = capture_program(model, call_args, call_kwargs,
                                   granularity=str(source.get("granularity", "leaf")),
                                   name=str(source.get("model", plan.model)))
    except CaptureError as exc:
        raise PlanMismatchError(f"cannot capture the plan's model: {exc}") from None
    return Rebuilt(model, call_args, captured, call_kwargs, registrations(captured.program, model))


def sample_rows(samples: int, microbatches: int, seed: int, index: int) -> torch.Tensor:
    """Which of an example's ``samples`` make up batch ``index`` (``samples × microbatches`` of them, drawn with
    replacement): one draw per sample count, the same for every input with that many samples, so that a sample's
    parts stay together (token ids with their boxes, pixels with their mask)."""
    gen = torch.Generator().manual_seed((seed * 1_000_003 + index) * 1_009 + samples)
    return torch.randint(0, samples, (samples * microbatches,), generator=gen)


def batch_inputs(example: Sequence[Any], microbatches: int, seed: int, index: int) -> tuple[Any, ...]:
    """Batch ``index`` of the run's stream: ``microbatches`` random microbatches shaped like ``example``.

    Each sample is one of the example's samples, drawn at random (:func:`sample_rows`), and every input of it
    comes from that same sample: only values the model was shown are safe, and they are safe only together.
    Floats may carry indices (Pix2Struct's flattened patches start with each patch's row and column, which
    index embeddings); integers may carry structure (LiLT's boxes are x0, y0, x1, y1 with x1 ≥ x0: drawn
    uniformly over their range, as token ids once were, a box of negative width indexed its embedding out of
    range). Every process that asks for the same batch gets the same tensors. Values that are not tensors, and a
    tensor with no rows (an empty cache) or no dimensions, stay as they are.

    >>> x = batch_inputs((torch.zeros(2, 3),), microbatches=4, seed=0, index=1)[0]
    >>> tuple(x.shape)
    (8, 3)
    """
    out: list[Any] = []
    for arg in example:
        if not isinstance(arg, torch.Tensor) or arg.dim() == 0 or arg.shape[0] == 0:
            out.append(arg)
        else:
            out.append(arg[sample_rows(arg.shape[0], microbatches, seed, index)])
    return tuple(out)


def batch_kwargs(example: Mapping[str, Any], microbatches: int, seed: int, index: int) -> dict[str, Any]:
    """:func:`batch_inputs` for keyword inputs: the same samples as the positional ones of the batch."""
    keys = sorted(example)
    values = batch_inputs(tuple(example[k] for k in keys), microbatches, seed, index)
    return dict(zip(keys, values, strict=True))


def state_fingerprint(captured: CapturedProgram) -> str:
    """A digest of the exported weights: stage processes compare it to prove they built the same model."""
    digest = hashlib.sha256()
    program = captured.program
    for name, tensor in sorted({**program.state_dict, **program.constants}.items()):
        if isinstance(tensor, torch.Tensor):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]
