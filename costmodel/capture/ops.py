"""Operators ``FlopCounterMode`` cannot count: formulas pipeplan knows, formulas users register,
and the list of operators that still got no FLOPs.

``FlopCounterMode`` counts an operator with a formula, or by running its decomposition when it has
one (``linear`` → ``addmm``).  A custom operator (``torch.library.custom_op``, a C++ extension, the
MoE grouped matmul of ``transformers``) has neither, so it silently counts 0 — and a planner that
believes the experts of an MoE layer are free puts them all in one stage.  This module closes
that gap in three steps, in order of trust:

1. a **formula** registered by name (:func:`register_flop_formula`; pipeplan ships the grouped
   matmuls, ``aten::_grouped_mm`` and ``transformers::grouped_mm_fallback``, and the FFTs, which are
   ``aten`` operators the counter has no formula for);
2. the operator's **Python implementation** (a ``torch.library.custom_op`` body) run on fake
   tensors under the counter, which is the op's decomposition in all but name (:func:`body_flops`);
   a body that needs real values (``offs.tolist()``) cannot run on fake tensors and is skipped,
   and so is one that runs longer than ``BODY_SECONDS`` (it may block on I/O or a device);
3. otherwise the operator is **reported**: :class:`UncountedOps` records every operator outside
   ``aten``/``prims`` that ran without a formula, and :func:`report_uncounted` logs a warning
   naming them and stores them in ``ModelGraph.meta["uncounted_ops"]``.

``aten`` operators without a formula (``add``, ``relu``) count 0 by the counter's convention, on
purpose: the roofline charges them by bytes moved.  Only foreign operators are suspect.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
import torch.fx
from torch._library.custom_ops import _maybe_get_opdef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from pipeplan.costmodel.kept_apart import TORCH_NAMESPACES

__all__ = [
    "BODY_SECONDS",
    "FlopFormula",
    "UncountedOps",
    "body_flops",
    "flop_formulas",
    "kernels_of",
    "qualified_name",
    "register_flop_formula",
    "report_uncounted",
]

log = logging.getLogger(__name__)

#: ``formula(*input_shapes, out_shape=..., **kwargs) -> FLOPs``: tensors arrive as their shapes,
#: the convention of :func:`torch.utils.flop_counter.register_flop_formula`.
FlopFormula = Callable[..., int]


def _grouped_mm_flops(a_shape: Any, b_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """Grouped matmul: every row of ``a`` meets one group's matrix, so the cost is that of one
    matmul of all rows, however the rows are split among groups.

    ``a (S, K) @ b (G, K, N) → (S, N)`` (MoE experts) and ``a (G, M, K) @ b (G, K, N)`` are
    ``2·out·K``; ``a (M, ΣK) @ b (ΣK, N) → (G, M, N)`` splits K, so it is ``2·M·ΣK·N``.
    """
    if len(a_shape) == 2 and len(b_shape) == 2:
        return 2 * int(a_shape[0]) * int(a_shape[1]) * int(b_shape[1])
    out = 1
    for d in out_shape:
        out *= int(d)
    return 2 * out * int(a_shape[-1])


# Operators that run one kernel per group: ``transformers``' grouped matmul fallback loops over the experts
# in Python, one ``mm`` each (``aten::_grouped_mm`` is one kernel on a GPU, so it stays one).  A layer
# priced as one matmul of all rows costs a mixture of 8 experts at about half its time on a CPU core.
_PER_GROUP_OPS = frozenset({"transformers::grouped_mm_fallback"})


def kernels_of(node: torch.fx.Node) -> int:
    """The kernels one call of ``node`` runs: one, but one per group (expert) for :data:`_PER_GROUP_OPS`,
    whose third argument holds each group's end offset."""
    if (qualified_name(node.target) not in _PER_GROUP_OPS or len(node.args) < 3
            or not isinstance(node.args[2], torch.fx.Node)):
        return 1
    offs = node.args[2].meta.get("val")
    return max(1, int(offs.shape[0])) if isinstance(offs, torch.Tensor) and offs.dim() == 1 else 1


def _fft_flops(points: Any, dims: Any, complex_input: bool) -> int:
    """A radix-2 FFT's ``5·N·log2(n)`` real FLOPs for ``N`` complex points transformed along dims of ``n``
    (several dims: the sum of their logs); a real signal, in or out, costs half."""
    numel = math.prod(int(d) for d in points)
    work = 5 * numel * sum(math.log2(max(int(points[d]), 1)) for d in dims)
    return int(work if complex_input else work / 2)


# aten operators with real arithmetic that ``FlopCounterMode`` has no formula for, and so would count 0
# (FNet mixes tokens with an FFT in place of attention)
_FFT_FORMULAS: dict[str, FlopFormula] = {
    "aten::_fft_c2c": lambda x, dim, *args, out_shape=None, **kw: _fft_flops(x, dim, complex_input=True),
    "aten::_fft_r2c": lambda x, dim, *args, out_shape=None, **kw: _fft_flops(x, dim, complex_input=False),
    "aten::_fft_c2r": lambda x, dim, *args, out_shape=None, **kw: _fft_flops(out_shape, dim, complex_input=False),
}
_FORMULAS: dict[str, FlopFormula] = {
    "aten::_grouped_mm": _grouped_mm_flops,
    "transformers::grouped_mm_fallback": _grouped_mm_flops,
    **_FFT_FORMULAS,
}


def qualified_name(op: Any) -> str:
    """``"ns::name"`` of an operator, an overload packet, or a ``"ns::name"``/``"ns.name"`` string."""
    if isinstance(op, str):
        text = op.strip()
        if "::" not in text and text.count(".") >= 1:
            ns, _, rest = text.partition(".")
            text = f"{ns}::{rest.split('.')[0]}"
        return text
    packet = getattr(op, "overloadpacket", op)
    name = getattr(packet, "_qualified_op_name", None)
    if isinstance(name, str):
        return name
    return getattr(op, "__name__", str(op))


def register_flop_formula(op: str | torch._ops.OpOverloadPacket, formula: FlopFormula) -> None:
    """Count ``op`` (``"mylib::moe_mm"`` or ``torch.ops.mylib.moe_mm``) with ``formula`` in every
    later capture, and stop warning that it is uncounted.

    The operator need not be loaded yet: formulas are looked up by name when a graph uses them.
    A formula returning 0 is the way to say "this operator really does no arithmetic".

    >>> register_flop_formula("doctest::scaled_mm", lambda a, b, out_shape=None: 2 * a[0] * a[1] * b[1])
    >>> _FORMULAS.pop("doctest::scaled_mm") is not None
    True
    """
    name = qualified_name(op)
    if "::" not in name:
        raise ValueError(f"cannot register a FLOP formula for {op!r}: name the operator as "
                         "'namespace::name' (e.g. 'mylib::moe_mm') or pass torch.ops.mylib.moe_mm")
    if not callable(formula):
        raise ValueError(f"the FLOP formula for {name} must be callable, got {type(formula).__name__}")
    _FORMULAS[name] = formula


def _resolve(name: str) -> torch._ops.OpOverloadPacket | None:
    ns, _, op = name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, ns), op)
    except (AttributeError, RuntimeError):  # not loaded (yet) in this process
        return None
    return packet if isinstance(packet, torch._ops.OpOverloadPacket) else None


def flop_formulas() -> dict[Any, FlopFormula]:
    """The registered formulas whose operators are loaded, keyed by overload packet: the
    ``custom_mapping`` of a :class:`FlopCounterMode`."""
    resolved: dict[Any, FlopFormula] = {}
    for name, formula in _FORMULAS.items():
        packet = _resolve(name)
        if packet is not None:
            resolved[packet] = formula
    return resolved


class UncountedOps(TorchDispatchMode):
    """Records the foreign operators that ran with no FLOP formula.

    Enter it *before* (beneath) a :class:`FlopCounterMode`: the counter handles each operator
    first, decomposing what it can, so this mode sees only what the counter finally ran.
    """

    supports_higher_order_operators = True

    def __init__(self, counter: FlopCounterMode) -> None:
        super().__init__()
        self.counter = counter
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        packet = getattr(func, "overloadpacket", None)
        if packet is not None and packet not in self.counter.flop_registry:
            name = qualified_name(packet)
            if name.split("::")[0] not in TORCH_NAMESPACES and name not in self.names:
                self.names.append(name)
        return func(*args, **kwargs)


BODY_SECONDS = 2.0  # wall time a custom op's body may take on fake tensors before it is left uncounted


def body_flops(target: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
               formulas: Mapping[Any, FlopFormula]) -> tuple[int, list[str]] | None:
    """FLOPs of a ``torch.library.custom_op`` counted by running its Python body on (fake) tensors.

    Returns (FLOPs, operators still uncounted inside the body), or ``None`` when ``target`` has no
    Python body or the body cannot run without real values.
    """
    opdef = _maybe_get_opdef(target) if isinstance(target, torch._ops.OpOverload) else None
    if opdef is None:
        return None
    counter = FlopCounterMode(display=False, custom_mapping=dict(formulas))
    try:
        with _budget(BODY_SECONDS), UncountedOps(counter) as inner, counter:
            opdef._init_fn(*args, **kwargs)
    except Exception as exc:  # a body may do anything; one that needs data cannot be counted
        log.debug("cannot count %s from its Python body on fake tensors: %s", qualified_name(target), exc)
        return None
    return int(counter.get_total_flops()), inner.names


class _OverBudget(Exception):
    pass


@contextmanager
def _budget(seconds: float) -> Iterator[None]:
    """Raise inside the block after ``seconds`` of wall time: a custom op's body may block (I/O,
    a device wait, a sleep) and capture must not hang with it.  Only the main thread can take a
    timer signal; elsewhere the body runs unbounded."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _OverBudget(f"the body ran longer than {seconds:g} s")

    # An outer timer (pytest-timeout's, a caller's alarm) is honoured and set going again after.
    outer, _ = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer) if outer > 0 else seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer > 0:  # what is left of it; one already due fires at once, under its own handler
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 1e-6))


def report_uncounted(model: str, layer_ops: Iterable[tuple[str, Iterable[str]]]) -> dict[str, list[str]]:
    """Warn about operators that got no FLOPs; return ``{operator: [layers using it]}``.

    ``layer_ops`` pairs each layer name with the uncounted operators inside it.
    """
    uncounted: dict[str, list[str]] = {}
    for layer, names in layer_ops:
        for name in names:
            layers = uncounted.setdefault(name, [])
            if layer not in layers:
                layers.append(layer)
    if uncounted:
        listing = "; ".join(f"{op} in {', '.join(layers[:4])}{' …' if len(layers) > 4 else ''}"
                            for op, layers in sorted(uncounted.items()))
        log.warning("%s: %d operator(s) have no FLOP formula and were counted as 0 FLOPs: %s. Predicted "
                    "times for these layers rest on bytes alone; register a formula with "
                    "pipeplan.costmodel.register_flop_formula('namespace::op', formula)",
                    model, len(uncounted), listing)
    return uncounted
