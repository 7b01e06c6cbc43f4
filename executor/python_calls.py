"""Call a stage's operators through PyTorch's generated Python bindings, as eager code does.

An exported graph calls every operator as an ``OpOverload`` (``torch.ops.aten.add.Tensor(x, y)``), whose
call goes through a Python frame and the dispatcher's generic argument parsing. Eager code calls the
generated binding (``torch.add``), which parses its arguments in C++. On the Zen 5 EPYC a chain of 2,000 small
operators cost 1.43 µs an operator eager and 2.2 µs as an exported graph; RWKV (5,724 calls) ran 12.5 ms as its
graph, 7.9 ms with bindings and 9.9 ms eager; SmolLM3 3.3, 2.8 and 3.2 ms (2026-11-30,
``benchmarks/python_calls.py``).

:func:`bind_python_calls` points each ``call_function`` node at the binding of the same name, found in the
namespaces PyTorch generates them in (``torch``'s functions, ``torch.nn.functional``'s C++ half, ``linalg``,
``special``, ``fft``, then ``Tensor``'s methods). A binding parses its arguments against the same schemas and
picks the overload they fit. Each call is tried first on the fake tensors export recorded for it, and keeps
its overload unless the binding returns the same shapes and dtypes (``aten.to.dtype_layout`` has no binding
that takes its ``layout``). Operators that write to an argument (``copy_``, ``div_``, ``out=`` forms) keep
their overload, and so does any whose binding FX could not name in the code it generates.
"""

from __future__ import annotations

import functools
import importlib
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

__all__ = ["bind_python_calls", "python_binding"]

# (torch's stubs do not declare every one of these modules, hence getattr)
_NAMESPACES: tuple[Any, ...] = tuple(getattr(torch._C, name) for name in ("_VariableFunctions", "_nn", "_linalg",
                                                                          "_special", "_fft"))


def _nameable(function: Callable[..., Any]) -> bool:
    """Whether FX's generated code can name ``function`` (it writes a call by its qualified name)."""
    try:
        parts = fx.node._get_qualified_name(function).split(".")
    except Exception:  # whatever FX raises, the overload stays
        return False
    for cut in range(len(parts) - 1, 0, -1):  # the longest importable prefix, then attributes (torch.Tensor.view)
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            found = getattr(found, attr, None)
        return found is function
    return False


@functools.cache  # per operator, for the process: stages and per-layer modules share their operators
def python_binding(op: object) -> tuple[str, Callable[..., Any] | str] | None:
    """How eager code calls an ``aten`` overload that writes to none of its arguments: ``("call_function", f)``
    for a generated function, ``("call_method", name)`` for a ``Tensor`` method (FX calls it on its first
    argument; it cannot name every such method as a function), or ``None``.

    >>> python_binding(torch.ops.aten.add.Tensor) == ("call_function", torch.add)
    True
    >>> python_binding(torch.ops.aten.view.default)
    ('call_method', 'view')
    >>> python_binding(torch.ops.aten.add_.Tensor) is None  # writes to its first argument
    True
    """
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten" or op._schema.is_mutable:
        return None
    name = op._schema.name.split("::", 1)[1]
    if name.startswith("__"):
        return None
    for namespace in _NAMESPACES:
        binding = getattr(namespace, name, None)
        if callable(binding) and _nameable(binding):
            return "call_function", binding
    # Only methods generated in C++ (``TensorBase``'s) that ``torch.Tensor`` does not redefine in Python: its
    # Python methods may share an operator's name and not its arguments (``Tensor.index`` is not ``aten.index``).
    arguments = op._schema.arguments
    method = getattr(torch._C.TensorBase, name, None)
    generated = isinstance(method, types.MethodDescriptorType) and getattr(torch.Tensor, name, None) is method
    if generated and arguments and arguments[0].name == "self":
        return "call_method", name
    return None


def _optional_by_name(schema: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...],
                                                                                          dict[str, Any]]:
    """The call's arguments with every optional one given by its name: a binding may take by keyword only what
    the schema has in order (``aten.to.dtype``'s ``memory_format``), and takes every argument by name.

    >>> _optional_by_name(torch.ops.aten.to.dtype._schema, ("x", torch.float16, False, False, None), {})
    (('x', torch.float16), {'non_blocking': False, 'copy': False, 'memory_format': None})
    """
    ordered = [a for a in schema.arguments if not a.kwarg_only]
    first_optional = next((i for i, a in enumerate(ordered) if a.has_default_value()), len(ordered))
    named = {a.name: value for a, value in zip(ordered[first_optional:], args[first_optional:], strict=False)}
    return tuple(args[:first_optional]), {**named, **kwargs}


_MISSING = object()  # an input export recorded no value for


def _same_result(binding: tuple[str, Callable[..., Any] | str], node: fx.Node, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> bool:
    """Whether the binding, called on the values export recorded for the node's inputs (fake tensors, no data),
    returns values of the shapes and dtypes the node's overload returned. Not every overload has a binding
    that takes its arguments (``aten.to.dtype_layout``'s ``layout``): those keep their overload."""
    fake = fx.node.map_arg((args, kwargs), lambda n: n.meta.get("val", _MISSING))
    if _MISSING in torch.utils._pytree.tree_leaves(fake) or "val" not in node.meta:
        return False
    kind, target = binding
    try:
        if kind == "call_method":
            out = getattr(fake[0][0], str(target))(*fake[0][1:], **fake[1])
        else:
            out = target(*fake[0], **fake[1])  # type: ignore[operator]
    except Exception:  # a binding that refuses these arguments: the overload stays
        return False
    got, want = torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(node.meta["val"])
    return len(got) == len(want) and all(
        isinstance(g, torch.Tensor) == isinstance(w, torch.Tensor)
        and (not isinstance(g, torch.Tensor) or (g.shape == w.shape and g.dtype == w.dtype))
        for g, w in zip(got, want, strict=True))


def bind_python_calls(graph: fx.Graph) -> int:
    """Point ``graph``'s operator calls at their Python bindings; the calls changed. Call it before a
    ``GraphModule`` is made of the graph (or ``recompile()`` the module after): the module's code is generated
    from the graph when it is made.

    >>> from pipeplan.costmodel.capture import capture_program
    >>> program = capture_program(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()),
    ...                           (torch.randn(2, 4),)).program
    >>> module = program.module()
    >>> bind_python_calls(module.graph), [str(n.target) for n in module.graph.nodes if n.op == "call_function"]
    (2, ['<built-in function linear>', '<built-in method relu of type object at ...>'])
    """
    changed = 0
    for node in graph.nodes:
        binding = python_binding(node.target) if node.op == "call_function" else None
        if binding is None:
            continue
        args, kwargs = _optional_by_name(node.target._schema, node.args, dict(node.kwargs))
        if _same_result(binding, node, args, kwargs):
            node.args, node.kwargs = args, kwargs
            node.op, node.target = binding
            changed += 1
    return changed
