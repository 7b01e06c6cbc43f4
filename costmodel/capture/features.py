"""Per-operator features of an exported program: FLOPs, bytes moved, and the operator's kind.

FLOPs come from :mod:`torch.utils.flop_counter`: every node of the exported graph is run once under
:class:`~torch.utils.flop_counter.FlopCounterMode` on fake tensors (shapes only, no arithmetic), so
the counts are exactly what the counter reports for the eager model, and capturing a large model
costs no real compute.

PyTorch's counter has no formula for the CPU fused attention kernel, so an eager CPU model reports
zero FLOPs for ``scaled_dot_product_attention``.  :func:`register_extra_flop_formulas` adds the
standard formula (the one the counter already uses for the CUDA kernels) for that kernel; it runs
on import, so totals taken with ``FlopCounterMode`` anywhere in the process include attention.
Operators the counter has no formula for at all (custom ones) are handled in
:mod:`pipeplan.costmodel.capture.ops`: a formula registered by name, the op's Python body, or a warning.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from pipeplan.costmodel.capture.ops import UncountedOps, body_flops, flop_formulas, kernels_of
from pipeplan.costmodel.kept_apart import APART_OPS, RESIZE_OPS, UNFOLD_OPS

__all__ = [
    "APART_OPS",
    "KINDS",
    "RESIZE_OPS",
    "UNFOLD_OPS",
    "OpStats",
    "module_kind",
    "op_kind",
    "op_label",
    "op_stats",
    "register_extra_flop_formulas",
    "tensor_bytes",
]

KINDS = (
    "linear", "conv", "matmul", "attention", "layernorm", "batchnorm", "activation", "softmax",
    "pool", "embedding", "elementwise", "reduction", "reshape", "identity", "block", "unfold", "resize",
    "other",
)


@dataclass(frozen=True)
class OpStats:
    flops: int
    bytes_read: int
    bytes_written: int
    is_view: bool
    uncounted: tuple[str, ...] = ()  # foreign operators inside that got no FLOPs (capture_ops)
    kernels: int = 1  # the kernels one call runs (a view: none; the grouped-matmul fallback: one per group)


def register_extra_flop_formulas() -> None:
    """Teach FlopCounterMode the FLOPs of attention kernels it does not know (idempotent)."""
    aten = torch.ops.aten
    extra = [getattr(aten, name, None) for name in ("_scaled_dot_product_flash_attention_for_cpu",)]
    missing = [op for op in extra if op is not None and op not in flop_counter.flop_registry]
    if not missing:
        return

    @flop_counter.register_flop_formula(missing)
    def _sdpa_cpu_flop(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None,
                       **kwargs: Any) -> int:
        return int(flop_counter.sdpa_flop_count(query, key, value))


register_extra_flop_formulas()


def tensor_bytes(value: Any) -> int:
    """Bytes of a tensor, or of the tensors inside a tuple/list; 0 for anything else."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def is_view_op(target: Any) -> bool:
    """True for operators whose result aliases an input (views move no memory)."""
    if target is operator.getitem:
        return True
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


class _FlopInterpreter(torch.fx.Interpreter):
    """Runs a graph node by node, each under its own FlopCounterMode.

    Per node it also keeps the foreign operators that ran without a FLOP formula
    (:mod:`pipeplan.costmodel.capture.ops`); a ``custom_op`` with no formula is counted from its Python
    body when that body runs on fake tensors.
    """

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.flops: dict[str, int] = {}
        self.uncounted: dict[str, tuple[str, ...]] = {}
        self.formulas = flop_formulas()

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op != "call_function":
            return super().run_node(n)
        counter = FlopCounterMode(display=False, custom_mapping=self.formulas)
        with UncountedOps(counter) as missing, counter:
            result = super().run_node(n)
        flops, uncounted = int(counter.get_total_flops()), missing.names
        if uncounted and flops == 0:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            from_body = body_flops(n.target, args, kwargs, self.formulas)
            if from_body is not None:
                flops, uncounted = from_body
        self.flops[n.name] = flops
        if uncounted:
            self.uncounted[n.name] = tuple(uncounted)
        return result


def _runtime_inputs(ep: torch.export.ExportedProgram, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> list[Any]:
    """The exported graph's placeholders in order: lifted parameters/buffers/constants, then inputs."""
    user_inputs = list(torch.utils._pytree.tree_leaves((args, kwargs)))
    values: list[Any] = []
    state = {**ep.state_dict, **ep.constants}
    for spec in ep.graph_signature.input_specs:
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT:
            values.append(user_inputs.pop(0))
        else:
            values.append(state[spec.target])
    return values


def op_stats(ep: torch.export.ExportedProgram, args: tuple[Any, ...],
             kwargs: dict[str, Any] | None = None) -> dict[str, OpStats]:
    """FLOPs and memory traffic of every ``call_function`` node of ``ep``, keyed by node name."""
    gm = ep.graph_module
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        # Detached: a forward needs no autograd, and FlopCounterMode's module tracker crashes on
        # a parameter that requires grad inside a ``torch.cond`` branch (no grad_fn there).
        fake = [mode.from_tensor(v.detach()) if isinstance(v, torch.Tensor) else v
                for v in _runtime_inputs(ep, args, kwargs or {})]
        interp = _FlopInterpreter(gm)
        interp.run(*fake)
    stats: dict[str, OpStats] = {}
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        out = tensor_bytes(n.meta.get("val"))
        if is_view_op(n.target):
            stats[n.name] = OpStats(interp.flops.get(n.name, 0), 0, 0, True, interp.uncounted.get(n.name, ()), 0)
            continue
        args_in = _unique_node_args(n)
        if op_name(n.target) in _GATHER_OPS and n.args and isinstance(n.args[0], torch.fx.Node):
            # A lookup reads the rows it returns, not the whole table (an embedding's 150 MB).
            table = n.args[0]
            read = out + sum(tensor_bytes(a.meta.get("val")) for a in args_in if a is not table)
        else:
            read = sum(tensor_bytes(a.meta.get("val")) for a in args_in)
        stats[n.name] = OpStats(interp.flops.get(n.name, 0), read, out, False, interp.uncounted.get(n.name, ()),
                                kernels_of(n))
    return stats


_GATHER_OPS = {"aten.embedding", "aten.index_select", "aten.index", "aten.gather", "aten.take",
               "aten.embedding_bag", "aten._embedding_bag"}


def _unique_node_args(n: torch.fx.Node) -> list[torch.fx.Node]:
    seen: dict[torch.fx.Node, None] = {}
    for a in n.all_input_nodes:
        seen.setdefault(a, None)
    return list(seen)


def op_name(target: Any) -> str:
    """A short, stable name for an operator: ``aten.linear``, ``getitem``."""
    if target is operator.getitem:
        return "getitem"
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return str(packet).replace("aten::", "aten.")
    return getattr(target, "__name__", str(target))


def op_label(node: torch.fx.Node) -> str:
    """:func:`op_name`, with the variant that changes the operator's cost where one does: GELU's tanh
    approximation (``F.gelu(x, approximate="tanh")``, ``aten.gelu[tanh]``) runs a polynomial and a tanh
    per element, 2–3× the exact GELU's time on a CPU core at the same bytes.

    A cost model that never saw a variant prices it as its base operator
    (:func:`pipeplan.costmodel.dataset.op_base`).
    """
    name = op_name(node.target)
    if name == "aten.gelu" and node.kwargs.get("approximate", "none") == "tanh":
        return f"{name}[tanh]"
    return name


_OP_KINDS: list[tuple[tuple[str, ...], str]] = [
    # Patch rearrangement (nn.Unfold / nn.Fold): no FLOPs, but a kernel of its own that copies kh·kw times.
    (UNFOLD_OPS, "unfold"),
    (RESIZE_OPS, "resize"),
    (("scaled_dot_product", "flash_attention", "efficient_attention"), "attention"),
    (("aten.linear", "aten.addmm"), "linear"),
    (("aten.mm", "aten.bmm", "aten.matmul", "aten.baddbmm", "aten.einsum", "grouped_mm"), "matmul"),
    (("conv",), "conv"),
    (("layer_norm", "group_norm", "rms_norm"), "layernorm"),
    (("batch_norm",), "batchnorm"),
    (("softmax",), "softmax"),
    (("relu", "gelu", "silu", "sigmoid", "tanh", "hardtanh", "elu", "mish", "hardswish"), "activation"),
    (("pool",), "pool"),
    (("embedding",), "embedding"),
    (("aten.sum", "aten.mean", "aten.amax", "aten.max", "aten.var", "aten.std", "aten.norm"), "reduction"),
    (("dropout", "aten.clone", "aten.alias", "aten.detach", "aten.contiguous", "aten.to"), "identity"),
]


def op_kind(name: str, is_view: bool = False) -> str:
    """Kind of one operator given :func:`op_name`'s result."""
    if is_view:
        return "reshape"
    for needles, kind in _OP_KINDS:
        if any(name == n or name.startswith(n + ".") or (not n.startswith("aten.") and n in name)
               for n in needles):
            return kind
    if name.startswith("aten."):
        return "elementwise" if name.split(".")[1] in _ELEMENTWISE else "other"
    return "other"


_ELEMENTWISE = {
    "add", "add_", "sub", "mul", "mul_", "div", "pow", "sqrt", "rsqrt", "exp", "log", "neg", "abs",
    "where", "masked_fill", "clamp", "cos", "sin", "erf", "reciprocal", "cat", "stack", "copy_",
    "fill_", "zeros_like", "ones_like", "full_like", "arange", "zeros", "ones", "full", "eq", "ne",
    "lt", "gt", "le", "ge", "logical_not", "logical_and", "bitwise_not", "cumsum", "tril", "triu",
    "type_as", "_to_copy", "scalar_tensor", "minimum", "maximum", "flip", "roll", "pad",
    "constant_pad_nd", "new_ones", "new_zeros", "index", "index_select", "gather", "repeat",
}

_MODULE_KINDS: list[tuple[tuple[str, ...], str]] = [
    # norms first: "ConvNextLayerNorm" is a norm, not a convolution
    (("layernorm", "rmsnorm", "groupnorm"), "layernorm"),
    (("batchnorm",), "batchnorm"),
    (("linear",), "linear"),
    (("conv",), "conv"),
    (("embedding",), "embedding"),
    (("softmax",), "softmax"),
    (("relu", "gelu", "silu", "sigmoid", "tanh", "activation", "swish", "mish", "elu"), "activation"),
    (("pool",), "pool"),
    (("dropout", "identity"), "identity"),
]


def module_kind(class_name: str, is_leaf: bool) -> str | None:
    """Kind of a module from its class name; ``None`` when the class says nothing recognisable.

    A module with children is a ``block``; ``None`` lets the caller fall back to the kind of the
    module's heaviest operator.
    """
    if not is_leaf:
        return "block"
    if class_name == "Conv1D":  # transformers' GPT-2 Conv1D is a Linear with a transposed weight
        return "linear"
    lowered = class_name.lower()
    for needles, kind in _MODULE_KINDS:
        if any(n in lowered for n in needles):
            return kind
    return None
