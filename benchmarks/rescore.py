"""Score cost-model files on every model of a ``model_profile.py`` table without timing anything again.

A learned model's predictions depend on the graph and the model file, not on this core's spell (it prices
the device it was profiled on), so a retrained or ablated model can be judged against the eager times a
judging run already measured: two minutes of captures instead of half an hour of timings, on the same
ground truth as the run's own columns. The output is a table ``heldout_sets.py`` sums up per set.

    .venv/bin/python benchmarks/rescore.py all-sets.md --learned learned,/tmp/new.zip > rescored.md
    .venv/bin/python benchmarks/heldout_sets.py rescored.md

Used on 2026-11-30 to judge the Zen 5's model trained without its new feature (``results-zen5-leafsplit/``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from heldout_sets import _eager_ms, _rows, held_out_sets  # noqa: E402
from model_profile import factory_source  # noqa: E402


def rescore(table: Path, specs: list[str], say: Callable[[str], None] = print) -> None:
    """Print a table: each model of ``table`` held out, its eager ms there, and each cost model's sum."""
    from pipeplan.costmodel.capture import capture_program
    from pipeplan.costmodel.profile import ProfileSettings, measure_device
    from pipeplan.costmodel.registry import load_cost_model
    from pipeplan.costmodel.source import build_source

    eager = _eager_ms(*_rows(table))
    models = [load_cost_model(spec) for spec in specs]
    device = measure_device(ProfileSettings(cores=[0]))  # its type picks the reference figures, as when judged
    say(f"predictions of {', '.join(specs)} against the eager times of {table}")
    say("")
    say("| model | layers | eager ms | " + " | ".join(f"{spec} ms (err)" for spec in specs) + " |")
    say("|---|---:|---:|" + "---:|" * len(specs))
    for factory in (m for names in held_out_sets().values() for m in names):
        name = factory.rsplit(":", 1)[-1]
        if name not in eager:
            continue
        built = build_source(factory_source(factory))
        graph = capture_program(built.model, built.args, built.kwargs, name=name).graph
        sums = [1e3 * sum(m.layer_times(graph.layers, device, check_cpu=False)) for m in models]
        cells = " | ".join(f"{ms:.2f} ({100 * (ms / eager[name] - 1):+.0f}%)" for ms in sums)
        say(f"| {name} | {len(graph.layers)} | {eager[name]:.2f} | {cells} |")
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", type=Path, help="a model_profile.py output whose eager times to score against")
    parser.add_argument("--learned", required=True, metavar="SPEC,SPEC",
                        help="cost models to score: learned, learned-epyc, a model file, probed:…")
    args = parser.parse_args()
    if not args.table.is_file():
        parser.error(f"{args.table}: no such table")
    rescore(args.table, [s for s in args.learned.split(",") if s])


if __name__ == "__main__":
    main()
