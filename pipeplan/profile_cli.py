"""``pipeplan profile MODEL``: every layer of one model timed inside real forward passes.

``pipeplan profile`` without MODEL is the layer sweep of :mod:`pipeplan.costmodel.cli` (rows for training a
learned model). With MODEL it profiles that model (:mod:`pipeplan.executor.profile_model`) and writes its
table (:mod:`pipeplan.costmodel.model_profile`), which ``--costmodel profile:FILE`` plans with. The MODEL
arguments are added here, on top of both packages, because the profiler needs the executor and
``costmodel`` must not import it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeplan.errors import UsageError, user_input

__all__ = ["extend_profile"]

_SOURCE_KEYS = ("zoo", "factory", "seq_len", "image_size", "seed", "dtype")


def extend_profile(parser: argparse.ArgumentParser) -> None:
    """Add MODEL and its options to the ``profile`` parser; without MODEL it runs the sweep as before."""
    from pipeplan.cli_args import add_model_args

    add_model_args(parser, optional=True,
                   model_help="profile this model's every layer inside real forward passes instead of layer "
                   "shapes: a zoo name, 'package.module:function', 'file.py:function' or a graph JSON "
                   "captured from one; writes profiles/MODEL-CPU.json unless --out says where")
    parser.add_argument("--seconds-per-level", type=float, default=2.0, metavar="S",
                        help="with MODEL: seconds of timed passes per contention level (2; at least --repeats "
                        "passes)")
    sweep: Callable[[argparse.Namespace], None] = parser.get_default("func")

    def cmd_profile(args: argparse.Namespace) -> None:
        if args.model is None:
            if args.out is None:
                raise UsageError("give --out DATA.csv for the layer sweep, or a MODEL to profile in real passes")
            sweep(args)
        else:
            cmd_profile_model(args)

    parser.set_defaults(func=cmd_profile)


def _source(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The model source and granularity MODEL names (a graph JSON carries the source it was captured from)."""
    from pipeplan.cli_inputs import check_model_name
    from pipeplan.costmodel.source import source_spec

    text = args.model
    if text.endswith(".json") and Path(text).is_file():
        from pipeplan.costmodel.graph import ModelGraph

        graph = ModelGraph.load(text)
        source = {k: graph.meta[k] for k in _SOURCE_KEYS if graph.meta.get(k) is not None}
        if "zoo" not in source and "factory" not in source:
            raise UsageError(f"{text} does not say which model it was captured from (no 'zoo' or 'factory' in its "
                             "meta): profile the zoo name or factory instead")
        return {**source, "batch_size": graph.batch_size}, graph.granularity
    check_model_name(text)
    return source_spec(text, args.batch or 1, seq_len=args.seq_len, image_size=args.image_size,
                       dtype=args.dtype), args.granularity


def cmd_profile_model(args: argparse.Namespace) -> None:
    from rich.console import Console

    from pipeplan.costmodel.hardware import Contention, cpu_model
    from pipeplan.costmodel.model_profile import default_path
    from pipeplan.costmodel.speed_drift import MODEL_REMEDY, SpeedCheck, drift_verdict
    from pipeplan.costmodel.steadiness import warn_if_unsteady
    from pipeplan.executor.profile_model import ModelProfileSettings, profile_source

    if args.gpu is not None:
        raise UsageError("profiling a MODEL runs on CPU cores only: drop --gpu (the layer sweep takes it)")
    if args.stop_on_drift:
        raise UsageError("--stop-on-drift keeps a sweep's rows so far; a MODEL profile is written whole, and its "
                         "speed checks only warn: drop --stop-on-drift")
    if args.append or args.replace:
        flag = "--append" if args.append else "--replace"
        raise UsageError(f"{flag} changes rows of a sweep dataset; a MODEL profile is written whole: drop {flag}")
    console = Console(stderr=True, soft_wrap=True)  # paths are not folded: they are copied from here
    source, granularity = _source(args)
    with user_input("profile options"):
        settings = ModelProfileSettings(levels=[Contention.parse(x) for x in args.levels.split(",")],
                                        cores=args.cores, threads=args.threads, min_passes=args.repeats,
                                        seconds_per_level=args.seconds_per_level, device_type=args.device_type,
                                        drift_tolerance=args.drift_tolerance or None)
    warn_if_unsteady(settings.cores[0], console.print)
    console.print(f"profiling {args.model} ({granularity}) on cores {list(settings.cores)}, {settings.threads} "
                  f"thread(s), {len(settings.levels)} level(s) × {settings.seconds_per_level:g} s …")
    checks: list[SpeedCheck] = []

    def checked(check: SpeedCheck) -> None:
        checks.append(check)
        console.print(f"  {check.describe()}")

    table = profile_source(source, granularity=granularity, settings=settings,
                           progress=lambda what: console.print(f"  {what}"), checked=checked)
    if checks and settings.drift_tolerance is not None:
        console.print(drift_verdict(checks, settings.drift_tolerance, MODEL_REMEDY))
    out = Path(args.out) if args.out else default_path(table.model, cpu_model())
    table.save(out)
    for level in table.levels:
        graph = f", whole graph {level.graph_s * 1e3:.2f} ms" if level.graph_s else ""
        console.print(f"  {level.load.describe():>12}: sum of {len(table.layers)} layers {level.sum_s * 1e3:.2f} ms"
                      f"{graph}, eager forward {level.forward_s * 1e3:.2f} ms ({level.passes} passes)")
    console.print(f"model profile written to {out}; plan with --costmodel profile:{out}")
