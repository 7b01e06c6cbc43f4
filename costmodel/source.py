"""Where a model comes from: a zoo name or your own factory, built the same way in every process.

A *model source* is what ``pipeplan graph|plan|compare|run`` take as MODEL besides a graph file:

- a zoo name (``gpt2``, ``tinygpt``; see ``pipeplan models``);
- a factory ``package.module:function`` or ``path/to/file.py:function``: a callable that returns
  ``(module, args)`` or ``(module, args, kwargs)`` (or an object with ``.model`` and ``.args``).
  It is called after ``torch.manual_seed(seed)`` with ``batch_size=B`` and, when the user gave
  them, ``seq_len=`` and ``image_size=`` — only the keywords its signature accepts; an option the
  factory cannot take is refused instead of ignored.

``dtype`` (``fp32``, ``bf16``, ``fp16``) casts the module's floating parameters and inputs before
capture, so FLOPs, bytes and the executor's stages are all in that dtype.

>>> spec = parse_factory("pipeplan.costmodel.zoo.small:MLP")
>>> spec.module, spec.function
('pipeplan.costmodel.zoo.small', 'MLP')
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pipeplan.errors import UserError

__all__ = ["DTYPES", "BuiltSource", "FactorySpec", "SourceError", "build_source", "capture_source", "cast_dtype",
           "flat_inputs", "import_source_module", "is_factory", "kwarg_order", "parse_dtype", "parse_factory",
           "source_spec"]

# The dtypes a model can be captured, planned and run in (CLI names → torch dtypes).
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class SourceError(UserError, ValueError):
    """A model source that cannot be built: bad factory path, factory error, bad options."""


@dataclass(frozen=True)
class FactorySpec:
    """A parsed ``module:function`` or ``file.py:function``."""

    text: str
    module: str  # importable module name, or the file's path
    function: str

    @property
    def is_file(self) -> bool:
        return self.module.endswith(".py")


@dataclass
class BuiltSource:
    """A built model with one example microbatch: positional ``args`` and keyword ``kwargs``."""

    name: str
    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


def is_factory(text: str) -> bool:
    """Whether MODEL names a factory (``a.b:f``, ``file.py:f``) rather than a zoo name or graph file."""
    head, sep, tail = text.rpartition(":")
    return bool(sep and head and tail.isidentifier())


def parse_factory(text: str) -> FactorySpec:
    """Split a factory path; a malformed one is refused with the expected form."""
    head, sep, tail = text.strip().rpartition(":")
    if not sep or not head or not tail.isidentifier():
        raise SourceError(f"model factory {text!r}: write it as 'package.module:function' or "
                          "'path/to/file.py:function'")
    return FactorySpec(text.strip(), head, tail)


def parse_dtype(name: str | None) -> torch.dtype | None:
    """``"bf16"`` → ``torch.bfloat16``; None stays None (the model's own dtype)."""
    if name is None:
        return None
    key = name.strip().lower().replace("float32", "fp32").replace("bfloat16", "bf16").replace("float16", "fp16")
    if key not in DTYPES:
        raise SourceError(f"unknown dtype {name!r}: choose one of {', '.join(DTYPES)}")
    return DTYPES[key]


def _file_module_name(path: Path) -> str:
    """The name a factory file is imported under: stable across processes, so that classes defined
    in it pickle by reference to the same name everywhere."""
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"pipeplan_factory_{stem}"


def import_source_module(spec: FactorySpec) -> Any:
    """Import the factory's module (a file is loaded by path and kept in ``sys.modules``)."""
    if not spec.is_file:
        try:
            return importlib.import_module(spec.module)
        except ImportError as exc:
            legacy = _legacy_module(spec.module)
            if legacy is not None:  # a plan or graph written before pipeplan's packages had one namespace
                return importlib.import_module(legacy)
            raise SourceError(f"model factory {spec.text!r}: cannot import {spec.module!r} ({exc}); is it "
                              "on PYTHONPATH?") from None
    path = Path(spec.module).resolve()
    if not path.is_file():
        raise SourceError(f"model factory {spec.text!r}: no such file {spec.module!r}")
    name = _file_module_name(path)
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise SourceError(f"model factory {spec.text!r}: cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise SourceError(f"model factory {spec.text!r}: importing {path} failed: "
                          f"{type(exc).__name__}: {exc}") from exc
    return module


def _legacy_module(name: str) -> str | None:
    """``costmodel.zoo.small`` → ``pipeplan.costmodel.zoo.small``: the name a module of pipeplan had
    before its packages moved under one namespace, where ``name`` is one.

    >>> _legacy_module("costmodel.zoo.small"), _legacy_module("mypackage.models")
    ('pipeplan.costmodel.zoo.small', None)
    """
    top = name.partition(".")[0]
    if top not in ("api", "planner", "executor", "costmodel"):
        return None
    return f"pipeplan.{name}" if importlib.util.find_spec(f"pipeplan.{top}") is not None else None


def _call_factory(spec: FactorySpec, options: dict[str, Any]) -> Any:
    fn = getattr(import_source_module(spec), spec.function, None)
    if not callable(fn):
        raise SourceError(f"model factory {spec.text!r}: {spec.module!r} has no callable {spec.function!r}")
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable: pass what it is given
        params = {}
    open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    refused = [k for k in options if k != "batch_size" and params and not open_kwargs and k not in params]
    if refused:
        flags = ", ".join("--" + k.replace("_", "-") for k in refused)
        raise SourceError(f"model factory {spec.text!r} takes no {', '.join(refused)} parameter: drop {flags} "
                          f"or add {' and '.join(refused)} to {spec.function}'s parameters")
    if params and not open_kwargs and "batch_size" not in params:
        raise SourceError(f"model factory {spec.text!r} must accept batch_size=: it is called as "
                          f"{spec.function}(batch_size=B, ...) and returns (module, args)")
    try:
        return fn(**options)
    except Exception as exc:
        raise SourceError(f"model factory {spec.text!r} raised {type(exc).__name__}: {exc}") from exc


def _unpack(spec: FactorySpec, built: Any) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    if hasattr(built, "model") and hasattr(built, "args"):
        return built.model, tuple(built.args), dict(getattr(built, "kwargs", None) or {})
    if isinstance(built, tuple) and len(built) in (2, 3):
        model, args, *rest = built
        kwargs = rest[0] if rest else {}
        if isinstance(model, nn.Module) and isinstance(kwargs, Mapping):
            args = args if isinstance(args, (tuple, list)) else (args,)
            return model, tuple(args), dict(kwargs)
    raise SourceError(f"model factory {spec.text!r} returned {type(built).__name__}; it must return "
                      "(nn.Module, args) or (nn.Module, args, kwargs)")


def cast_dtype(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
               dtype: torch.dtype | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Cast ``model`` (in place) and the floating tensors of the inputs to ``dtype``."""
    if dtype is None:
        return args, kwargs
    model.to(dtype)

    def cast(value: Any) -> Any:
        return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value

    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}


def build_source(source: Mapping[str, Any]) -> BuiltSource:
    """Build the model a source describes (the keys a plan's ``source`` has).

    ``source`` has ``zoo`` or ``factory``, and ``batch_size``; optionally ``seed`` (0), ``seq_len``,
    ``image_size`` and ``dtype``.  The same source builds the same weights and inputs in every
    process.

    >>> built = build_source({"zoo": "mlp", "batch_size": 2, "dtype": "bf16"})
    >>> built.args[0].dtype, next(built.model.parameters()).dtype
    (torch.bfloat16, torch.bfloat16)
    """
    from pipeplan.costmodel.zoo import ZooError, build_model

    batch = int(source.get("batch_size", 1))
    if batch < 1:
        raise SourceError(f"batch size must be at least 1, got {batch}")
    seed = int(source.get("seed") or 0)
    dtype = parse_dtype(source.get("dtype"))
    sizes = {k: int(source[k]) for k in ("seq_len", "image_size") if source.get(k) is not None}
    if source.get("factory"):
        spec = parse_factory(str(source["factory"]))
        torch.manual_seed(seed)
        model, args, kwargs = _unpack(spec, _call_factory(spec, {"batch_size": batch, **sizes}))
        name = str(source.get("model") or spec.function)
    else:
        name = str(source.get("zoo") or source.get("model"))
        try:
            zoo = build_model(name, batch, seed=seed, **sizes)
        except (ZooError, ImportError) as exc:
            raise SourceError(str(exc)) from None
        model, args, kwargs = zoo.model, zoo.args, {}
    model.eval()
    args, kwargs = cast_dtype(model, args, kwargs, dtype)
    return BuiltSource(name, model, args, {k: v for k, v in kwargs.items() if v is not None})


def kwarg_order(kwargs: Mapping[str, Any], in_spec: Any = None) -> list[str]:
    """The keyword inputs in the order an exported program's placeholders take them.

    ``torch.export`` flattens ``(args, kwargs)`` with the keyword order of its ``in_spec``
    (``ExportedProgram.call_spec.in_spec``), which follows the function's signature rather than
    the call.
    """
    context = in_spec.child(1).context if in_spec is not None and kwargs else None
    return [k for k in context if k in kwargs] if context else list(kwargs)


def flat_inputs(args: tuple[Any, ...], kwargs: Mapping[str, Any], order: list[str] | None = None) -> list[Any]:
    """The user inputs as one flat list: the positional ones, then the keyword ones in ``order``
    (see :func:`kwarg_order`), as an exported program's placeholders take them."""
    keys = order if order is not None else list(kwargs)
    return list(torch.utils._pytree.tree_leaves((tuple(args), {k: kwargs[k] for k in keys})))


def source_spec(model: str, batch_size: int, *, seq_len: int | None = None, image_size: int | None = None,
                seed: int = 0, dtype: str | None = None) -> dict[str, Any]:
    """The source of MODEL (a zoo name or a factory) as a plan records it; the dtype normalised."""
    source: dict[str, Any] = {"factory": model} if is_factory(model) else {"zoo": model}
    source.update({"batch_size": batch_size, "seed": seed, "seq_len": seq_len, "image_size": image_size})
    if dtype is not None:
        parse_dtype(dtype)
        source["dtype"] = next(k for k, v in DTYPES.items() if v == parse_dtype(dtype))
    return {k: v for k, v in source.items() if v is not None}


def capture_source(model: str, batch_size: int = 1, *, granularity: str = "leaf", seq_len: int | None = None,
                   image_size: int | None = None, seed: int = 0, dtype: str | None = None,
                   kv_context: int | None = None) -> Any:
    """Build MODEL (zoo name or factory) and capture it as a :class:`~pipeplan.costmodel.graph.ModelGraph`
    whose ``meta`` says how to rebuild it (what a plan's ``source`` records).

    ``kv_context`` (decoders): the planner counts a KV cache of that many tokens per sequence in
    each stage's memory (:mod:`pipeplan.costmodel.memory`); ``meta`` records it with the key and value bytes
    per token of each layer, found from the model's ``k_proj``/``v_proj`` projections.

    >>> g = capture_source("mlp", 2, dtype="fp16")
    >>> g.meta["zoo"], g.meta["dtype"], g.inputs[0].dtype
    ('mlp', 'fp16', 'float16')
    """
    from pipeplan.costmodel.capture import capture

    source = source_spec(model, batch_size, seq_len=seq_len, image_size=image_size, seed=seed, dtype=dtype)
    built = build_source(source)
    graph = capture(built.model, built.args, built.kwargs, granularity=granularity, name=built.name)
    graph.meta.update({k: v for k, v in source.items() if k != "batch_size"})
    graph.meta.setdefault("seed", seed)
    if kv_context is not None:
        from pipeplan.costmodel.zoo.llm import kv_bytes_per_token

        if kv_context < 1:
            raise SourceError(f"a KV cache context must be at least 1 token, got {kv_context}")
        per_token = kv_bytes_per_token(built.model, [layer.name for layer in graph.layers])
        if not per_token:
            raise SourceError(f"{built.name} has no k_proj/v_proj projections to cache: a KV context applies to "
                              "decoders")
        graph.meta.update({"kv_context": kv_context, "kv_bytes_per_token": per_token})
    return graph
