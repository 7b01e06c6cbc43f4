"""Where a whole-model miss comes from: each layer of one kind timed alone, in a real pass, and predicted.

For every layer of ``--kind`` (default ``conv``) of each model, three times on core 0, one thread, idle:

- **in-model**: the layer's call as timed inside real passes (``pipeplan profile MODEL``'s raw time);
- **alone**: the same layer module called back to back on its own inputs (hot caches, what the sweep times);
- **predicted**: the learned model's sweep estimators alone, and with its in-model correction.

in-model ≫ alone says the pass slows the layer (what the in-model correction is for); alone ≫ sweep-predicted
says the sweep never timed shapes like it (a coverage gap no correction can see). ``--worst N`` lists the N
layers furthest above their sweep prediction, with their weight shapes.

    .venv/bin/python benchmarks/layers_alone.py --models benchmarks/heldout_models.py:hgnet_v2 --worst 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch


def _alone(module: Any, inputs: tuple[Any, ...], calls: int = 15) -> float:
    """Median seconds of ``module(*inputs)`` back to back, after three untimed calls."""
    for _ in range(3):
        module(*inputs)
    samples = []
    for _ in range(calls):
        begin = time.perf_counter()
        module(*inputs)
        samples.append(time.perf_counter() - begin)
    return statistics.median(samples)


def _weight_shape(module: Any) -> tuple[int, ...] | None:
    """The shape of the first parameter a layer's module reads (a convolution's weight)."""
    for node in module.graph.nodes:  # a stage module holds its parameters as attributes
        if node.op == "get_attr" and node.meta.get("val") is not None and node.meta["val"].dim() >= 2:
            return tuple(node.meta["val"].shape)
    return None


def study(factory: str, kind: str, spec: str, device: Any, seconds: float) -> list[dict[str, Any]]:
    from pipeplan.costmodel.capture import capture_program
    from pipeplan.costmodel.learned import LearnedCostModel
    from pipeplan.costmodel.profile import pinned
    from pipeplan.costmodel.registry import load_cost_model
    from pipeplan.costmodel.source import build_source
    from pipeplan.executor.profile_model import ModelProfileSettings, layer_chain, profile_built

    if ":" not in factory:
        factory = f"{Path(__file__).resolve().parent / 'model_profile.py'}:{factory}"
    built = build_source({"factory": factory, "batch_size": 2})
    name = factory.rsplit(":", 1)[-1]
    captured = capture_program(built.model, built.args, built.kwargs, name=name)
    chain = layer_chain(captured, built.model, built.args, built.kwargs)
    table = profile_built(built.model, built.args, built.kwargs, name=name, captured=captured,
                          settings=ModelProfileSettings(seconds_per_level=seconds))
    in_model = dict(zip(chain.layers, table.levels[0].raw_s, strict=True))
    by_name = {la.name: la for la in captured.graph.layers}
    rows = []
    with torch.inference_mode(), pinned([0], 1):
        values: Any = chain.inputs
        for layer_name, stage in zip(chain.layers, chain.stages, strict=True):
            if by_name[layer_name].kind == kind:
                rows.append({"model": name, "layer": layer_name, "in_model": in_model[layer_name],
                             "alone": _alone(stage.module, values), "input": by_name[layer_name].input_shapes[0],
                             "weight": _weight_shape(stage.module)})
            values = stage.module(*values)
    if not rows:
        return rows
    cost_model = load_cost_model(spec)
    assert isinstance(cost_model, LearnedCostModel)
    layers = [by_name[r["layer"]] for r in rows]
    corrected = cost_model.layer_times(layers, device, check_cpu=False)
    correction, cost_model.in_model = cost_model.in_model, None
    try:
        sweep = cost_model.layer_times(layers, device, check_cpu=False)
    finally:
        cost_model.in_model = correction
    for row, s, c in zip(rows, sweep, corrected, strict=True):
        row.update(sweep=s, corrected=c)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", required=True, help="comma-separated: model_profile.py names or factories "
                        "(benchmarks/heldout_models.py:hgnet_v2)")
    parser.add_argument("--kind", default="conv", help="the layer kind to study (conv)")
    parser.add_argument("--learned", default="learned", help="the learned model to predict with (learned)")
    parser.add_argument("--seconds", type=float, default=1.5, help="seconds of passes for the in-model times (1.5)")
    parser.add_argument("--worst", type=int, default=0, metavar="N", help="list each model's N layers furthest "
                        "above their sweep prediction (alone ÷ sweep-predicted × alone)")
    args = parser.parse_args()

    from pipeplan.costmodel.hardware import cpu_model
    from pipeplan.costmodel.profile import ProfileSettings, measure_device

    device = measure_device(ProfileSettings(cores=[0]))
    print(f"CPU {cpu_model()}, core 0, 1 thread; measured {device.peak_flops / 1e9:.0f} GFLOP/s, "
          f"{device.mem_bandwidth / 1e9:.1f} GB/s; cost model {args.learned}; layers of kind {args.kind}\n")
    print("| model | layers | in-model ms | alone ms | sweep-predicted ms | corrected ms | in-model ÷ alone | "
          "alone ÷ sweep |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    worst: list[str] = []
    for factory in (m.strip() for m in args.models.split(",") if m.strip()):
        rows = study(factory, args.kind, args.learned, device, args.seconds)
        if not rows:
            print(f"| {factory.rsplit(':', 1)[-1]} | 0 | | | | | | |")
            continue
        total = {k: sum(r[k] for r in rows) * 1e3 for k in ("in_model", "alone", "sweep", "corrected")}
        print(f"| {rows[0]['model']} | {len(rows)} | {total['in_model']:.2f} | {total['alone']:.2f} | "
              f"{total['sweep']:.2f} | {total['corrected']:.2f} | {total['in_model'] / total['alone']:.2f} | "
              f"{total['alone'] / total['sweep']:.2f} |", flush=True)
        rows.sort(key=lambda r: -(r["alone"] / r["sweep"]) * r["alone"])
        worst += [f"| {r['model']} | {r['layer']} | {'×'.join(map(str, r['input']))} | "
                  f"{'×'.join(map(str, r['weight'] or ()))} | {r['in_model'] * 1e3:.3f} | {r['alone'] * 1e3:.3f} | "
                  f"{r['sweep'] * 1e3:.3f} | {r['alone'] / r['sweep']:.2f} |" for r in rows[:args.worst]]
    if worst:
        print("\n| model | layer | input | weight | in-model ms | alone ms | sweep-predicted ms | alone ÷ sweep |\n"
              "|---|---|---|---|---:|---:|---:|---:|")
        print("\n".join(worst))


if __name__ == "__main__":
    main()
