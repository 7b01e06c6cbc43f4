"""Capture an ``nn.Module`` as a layer DAG with ``torch.export``.

``torch.export`` traces the model into a graph of aten operators, each tagged with the stack of
modules that called it.  :func:`capture` groups those operators into layers:

``leaf`` (default)
    one layer per leaf module call (``Linear``, ``Conv2d``, ``LayerNorm`` …); a leaf module that
    runs two or more matmuls or convolutions (GPT-OSS's experts) is grouped as glue is, below, with
    each of them starting a layer of its own;
``block``
    one layer per repeated block (a transformer block, a ResNet bottleneck): the outermost class
    of non-leaf modules repeated inside ``ModuleList``/``Sequential`` containers with at least
    8 instances, else the most repeated one; operators outside every block fall back to ``leaf``;
``depth:N``
    one layer per module at depth N of the module tree (``blocks.3`` is depth 2).

Operators that no module owns at that granularity (residual adds, reshapes, attention glue written
in a ``forward``) are kept, never dropped, so the graph's total FLOPs equal the model's:

1. consecutive functional operators of one module scope whose inputs all come from the same
   functional layer join it (``q.view(...).transpose(...)`` → one layer);
2. a functional layer with zero FLOPs and a single producer is attached to its producer
   (a ``flatten`` after pooling), and one with no producer and a single consumer (``arange`` for
   position ids) to its consumer.  Both merges provably keep the graph acyclic;
3. everything else becomes a layer of its own, named ``scope:op`` (``blocks.0:add_1``).

A module called several times is one layer when its calls are independent (an embedding used for
tokens and positions) and one layer per call (``enc@1``) when merging would create a cycle.

Complexity: linear in the number of exported operators, plus one acyclicity check per module
that is called more than once.

Before grouping, :mod:`~pipeplan.costmodel.capture.noops` removes the casts to a dtype a tensor
already has, which eager PyTorch skips and export keeps (with a metadata check each): the executor's
stages run this graph, and a cast in a loop would cost a dispatch per step. Where the model's code asks whether
it is exported, it is exported as eager runs it (:mod:`~pipeplan.costmodel.capture.eager_branches`).

The rules above are :mod:`~pipeplan.costmodel.capture.grouping`'s; the graph is built from their
groups by :mod:`~pipeplan.costmodel.capture.assemble`.
"""

from __future__ import annotations

import logging
import re
import sys
from collections import defaultdict
from typing import Any

import torch
from torch import nn
from torch.export.graph_signature import InputKind

from pipeplan.costmodel.capture.assemble import CapturedProgram, assemble_graph
from pipeplan.costmodel.capture.eager_branches import eager_branches
from pipeplan.costmodel.capture.features import OpStats, op_stats, tensor_bytes
from pipeplan.costmodel.capture.grouping import group_operators
from pipeplan.costmodel.capture.noops import drop_noop_conversions
from pipeplan.costmodel.capture.ops import report_uncounted
from pipeplan.costmodel.capture.owners import Owners
from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.errors import UserError

__all__ = ["CaptureError", "CapturedProgram", "capture", "capture_program", "parse_granularity"]

log = logging.getLogger(__name__)

class CaptureError(UserError, ValueError):
    """The model could not be exported, or the capture options are wrong."""


def parse_granularity(text: str) -> tuple[str, int | None]:
    """``"leaf"`` → ("leaf", None); ``"depth:2"`` → ("depth", 2); anything else is refused."""
    text = text.strip().lower()
    if text in ("leaf", "block"):
        return text, None
    m = re.fullmatch(r"depth[:=](\d+)", text)
    if m and int(m.group(1)) >= 1:
        return "depth", int(m.group(1))
    raise CaptureError(f"unknown granularity {text!r}: use 'leaf', 'block' or 'depth:N' with N >= 1")


def _export(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.export.ExportedProgram:
    def trace() -> torch.export.ExportedProgram:
        with torch.no_grad():
            return torch.export.export(model, args, kwargs=kwargs, strict=False)

    with eager_branches(model) as changed:  # the graph eager runs where the model's code asks if it is exported
        if changed:
            try:
                return trace()
            except Exception as exc:  # its eager branch does not export: take the one its authors wrote for export
                log.info("exporting %s with eager's branches failed (%s); exporting those %s choose under export",
                         type(model).__name__, str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                         ", ".join(changed))
    try:
        return trace()
    except Exception as exc:  # torch raises many types; the user needs the model name and the cause
        raise CaptureError(f"torch.export could not trace {type(model).__name__}: {exc}{_hint(exc)}") from exc


def _hint(exc: Exception) -> str:
    """What to change for a failure a user meets often, or nothing."""
    text = str(exc)
    # a transformers decoder built with its default config returns its key/value cache, an object
    # torch.export cannot flatten; inference split into stages does not carry it between calls
    if "in output, which is not a known type" in text and "Cache" in text:
        return ("\n(the model returns its key/value cache: build it with use_cache=False in its config, "
                "e.g. LlamaConfig(..., use_cache=False), or pass use_cache=False as a keyword input)")
    return ""


def capture(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    granularity: str = "leaf",
    name: str | None = None,
) -> ModelGraph:
    """Capture ``model`` called on ``args``/``kwargs`` as a :class:`ModelGraph`.

    >>> g = capture(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), (torch.randn(2, 4),))
    >>> [layer.name for layer in g.layers], g.total_flops
    (['0', '1'], 128)
    """
    return capture_program(model, args, kwargs, granularity=granularity, name=name).graph


def capture_program(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    granularity: str = "leaf",
    name: str | None = None,
) -> CapturedProgram:
    """Like :func:`capture`, and also return the exported program and which layer owns each node.

    >>> cp = capture_program(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), (torch.randn(2, 4),))
    >>> sorted(set(cp.node_layers.values()))
    ['0', '1']
    """
    kwargs = kwargs or {}
    owners = Owners(model, *parse_granularity(granularity))
    model.eval()
    ep = _export(model, args, kwargs)
    dropped = drop_noop_conversions(ep)  # stages run this graph: no dispatch eager would skip
    try:
        stats = op_stats(ep, args, kwargs)
    except Exception as exc:  # an operator the FLOP counter cannot run; say which and why
        raise CaptureError(f"counting the FLOPs of {type(model).__name__}'s exported graph failed: {exc}. "
                           "If the failing operator is a custom one, give it a fake (meta) kernel with "
                           "torch.library.register_fake") from exc
    graph_nodes = list(ep.graph.nodes)

    # -- placeholders: parameters, buffers and constants versus the model's inputs ----------
    placeholder_kind = {}
    placeholders = [n for n in graph_nodes if n.op == "placeholder"]
    for spec, n in zip(ep.graph_signature.input_specs, placeholders, strict=True):
        placeholder_kind[n.name] = "input" if spec.kind == InputKind.USER_INPUT else "param"

    ops, dead = _live([n for n in graph_nodes if n.op == "call_function" and _is_real(n, stats[n.name])],
                      next(n for n in graph_nodes if n.op == "output"))
    name = name or type(model).__name__
    captured = _layers(name, granularity, owners, ops, graph_nodes, placeholder_kind, stats, ep, args, kwargs)
    graph = captured.graph
    if granularity != "leaf":
        leaf = _layers(name, "leaf", Owners(model, "leaf", None), ops, graph_nodes, placeholder_kind, stats,
                       ep, args, kwargs)
        _attach_parts(captured, leaf)
    if dropped:
        log.info("%s: removed %d node(s): casts to the dtype a tensor already has, and metadata checks", name, dropped)
    if dead:
        scopes = list(dict.fromkeys(_dead_name(owners, n) for n in dead))
        graph.meta["dropped_dead"] = scopes
        log.info("%s: dropped %d operator(s) whose results nothing uses, in %s",
                 graph.model, len(dead), ", ".join(scopes))
    uncounted = report_uncounted(graph.model, ((captured.node_layers[n.name], stats[n.name].uncounted)
                                              for n in ops if stats[n.name].uncounted))
    if uncounted:
        graph.meta["uncounted_ops"] = uncounted
    return captured


def _attach_parts(merged: CapturedProgram, leaf: CapturedProgram) -> None:
    """Give each layer of a coarser capture the leaf layers it is made of (``Layer.parts``).

    A block's own features (all its FLOPs and bytes in one row) describe no layer a cost model was
    fitted on; its leaf layers do. A leaf layer belongs to the layer that owns its first operator
    (leaf glue merged across two blocks is rare and small). A layer that is one leaf layer gets none.
    """
    owner: dict[str, str] = {}
    for node, leaf_name in leaf.node_layers.items():
        owner.setdefault(leaf_name, merged.node_layers[node])
    parts: dict[str, list[Layer]] = defaultdict(list)
    for layer in leaf.graph.layers:  # in the leaf graph's topological order
        parts[owner[layer.name]].append(layer)
    for layer in merged.graph.layers:
        own = parts.get(layer.name, [])
        if len(own) > 1:
            layer.parts = own


def _layers(name: str, granularity: str, owners: Owners, ops: list[torch.fx.Node],
            graph_nodes: list[torch.fx.Node], placeholder_kind: dict[str, str], stats: dict[str, OpStats],
            ep: torch.export.ExportedProgram, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CapturedProgram:
    """Group the live operators ``ops`` into layers as ``owners`` decides, and build the graph."""
    grouping = group_operators(ops, owners, stats)
    return assemble_graph(name, granularity, owners, grouping, ops, graph_nodes, placeholder_kind, stats, ep, args,
                          kwargs)


def _dead_name(owners: Owners, n: torch.fx.Node) -> str:
    """What a dropped operator would have been called: its module, or ``scope:op`` for glue."""
    functional, path, _ = owners.owner(n)
    return (f"{path}:{n.name}" if path else n.name) if functional else path


def _live(ops: list[torch.fx.Node], output: torch.fx.Node) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
    """Split ``ops`` into (live, dead): live operators reach the model's output or have a side
    effect (an in-place write such as ``index_put_`` into a tensor used later), or feed one that
    does.  Export keeps a module whose result is unused; it costs time but is not the model's work.
    """
    impure = [n for n in ops if n.is_impure()]
    live: set[torch.fx.Node] = set()
    stack = [*output.all_input_nodes, *impure]
    while stack:
        n = stack.pop()
        if n not in live:
            live.add(n)
            stack.extend(n.all_input_nodes)
    return [n for n in ops if n in live], [n for n in ops if n not in live]


def _is_real(n: torch.fx.Node, stats: OpStats) -> bool:
    """Skip the runtime assertions export inserts: they compute nothing and produce no tensor."""
    return stats.flops > 0 or tensor_bytes(n.meta.get("val")) > 0 or bool(n.users)


class _CallableModule(type(sys.modules[__name__])):  # type: ignore[misc]
    """``from costmodel import capture`` must give the function, yet importing this submodule binds
    ``pipeplan.costmodel.capture`` to the module (import order decides which one a user gets): the module
    is made callable as the function, so both spellings work in any order."""

    def __call__(self, *args: Any, **kwargs: Any) -> ModelGraph:
        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
