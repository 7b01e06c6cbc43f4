"""Eager forward, the exported graph as captured, and the executor's one-stage module, timed on one pinned core
(``model_profile.measure``: the lowest of three medians).

The exported graph calls every operator as an ``OpOverload``; the executor's stages call the Python bindings
eager code calls (:mod:`pipeplan.executor.python_calls`). This prints how much that is worth per model, and
checks that the stage computes exactly what the graph does:

    .venv/bin/python benchmarks/python_calls.py [--models rwkv,smollm3] [--seconds 1]

Models are held-out factories (``heldout_sets.py`` names them) or zoo names.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from heldout_sets import held_out_sets
from model_profile import factory_source, measure

DEFAULT = "rwkv,olmo_hybrid,zamba,smollm3,chmv2,tinygpt"


def _build(name: str) -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
    from pipeplan.costmodel.source import build_source
    from pipeplan.costmodel.zoo.build import build_model

    factories = {f.rsplit(":", 1)[-1]: f for names in held_out_sets().values() for f in names}
    if name in factories:
        built = build_source(factory_source(factories[name]))
        return built.model, tuple(built.args), dict(built.kwargs)
    zoo = build_model(name, 2)
    return zoo.model, tuple(zoo.args), {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=DEFAULT, help=f"comma-separated (default {DEFAULT})")
    parser.add_argument("--seconds", type=float, default=1.5, help="timing per variant and model (1.5)")
    args = parser.parse_args()

    from pipeplan.costmodel.capture import capture_program
    from pipeplan.costmodel.source import flat_inputs, kwarg_order
    from pipeplan.executor.stages import split_program

    torch.set_flush_denormal(True)  # as model_profile.py times: random weights make denormals
    print(f"core 0, 1 thread, torch {torch.__version__}, load average at start {os.getloadavg()[0]:.2f}")
    print()
    print("| model | operator calls | eager ms | graph ms (overloads) | stage ms (bindings) | stage vs graph | "
          "stage vs eager | stage output equals graph's |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name in args.models.split(","):
        model, inputs, kwargs = _build(name)
        model.eval()
        with torch.no_grad():
            captured = capture_program(model, inputs, kwargs, name=name)
            graph = captured.program.module()
            stage = split_program(captured, [[la.name for la in captured.graph.layers]])[0]
            flat = flat_inputs(inputs, kwargs, kwarg_order(kwargs, captured.program.call_spec.in_spec))
            want = [t for t in torch.utils._pytree.tree_leaves(graph(*inputs, **kwargs)) if isinstance(t, torch.Tensor)]
            got = [t for t in stage.module(*flat) if isinstance(t, torch.Tensor)]
            same = len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
            calls = (functools.partial(model, *inputs, **kwargs), functools.partial(graph, *inputs, **kwargs),
                     functools.partial(stage.module, *flat))
            eager, overloads, bindings = (1e3 * measure(call, args.seconds) for call in calls)
        operators = sum(n.op in ("call_function", "call_method") for n in stage.module.graph.nodes)
        print(f"| {name} | {operators} | {eager:.2f} | {overloads:.2f} | {bindings:.2f} | "
              f"{100 * (bindings / overloads - 1):+.0f}% | {100 * (bindings / eager - 1):+.0f}% | {same} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
