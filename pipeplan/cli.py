"""The ``pipeplan`` command line: the parser, and the one place a user's mistake becomes one line.

Each subcommand lives beside its concept and registers itself here: the inputs
(:mod:`pipeplan.describe_cli`), planning (:mod:`pipeplan.plan_cli`), re-planning
(:mod:`pipeplan.replan_cli`), and the other packages' commands (their ``cli.py``).  Heavy imports
(torch, transformers) happen inside the commands so that ``pipeplan --help`` answers at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

# CliError, add_model_args and check_model_name were defined here: importers of pipeplan.cli keep them.
from pipeplan.cli_args import CliError, add_model_args
from pipeplan.cli_inputs import check_model_name
from pipeplan.errors import user_fault

__all__ = ["CliError", "add_model_args", "build_parser", "check_model_name", "main"]

_EPILOG = """\
examples:
  pipeplan models                                   the models pipeplan can build by name
  pipeplan graph tinygpt --batch 8                  per-layer FLOPs, bytes, intensity, params
  pipeplan graph gpt2 --granularity block --json gpt2.json
  pipeplan cluster hetero-a100-t4                   a cluster's devices and links
  pipeplan costs resnet-50 --cluster 4xa100-nvlink --load gpu1=2xmemory
  pipeplan plan gpt2 --granularity block --cluster hetero-a100-t4 --out plan.json
  pipeplan compare resnet-50 --cluster 8gpu-2hosts --comm serial --png cmp.png
  pipeplan replan --plan plan.json --cluster hetero-a100-t4 --load gpu1=2xcompute --horizon 10m
  pipeplan demo                                     all of the above on the defaults

MODEL is a zoo name (see `pipeplan models`), a graph saved with --json, or your own model's factory:
'package.module:function' or 'file.py:function', called with batch_size= (and seq_len=,
image_size= when given), returning (module, args) or (module, args, kwargs); or table:FILE, a cost
table of measured times (a chain of its rows, or its edges; docs/planner.md), planned with those times.
SPEC is a built-in cluster name (see `pipeplan cluster --list`) or a YAML/JSON file.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pipeplan",
        description="Plan how to split a DNN model across busy GPUs, and check the plan for real.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress and details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    from pipeplan.describe_cli import register_describe
    from pipeplan.plan_cli import register_plan
    from pipeplan.replan_cli import register_replan

    register_describe(sub)  # models, graph, cluster, costs: what a plan is made from
    register_plan(sub)  # plan, compare, demo
    register_replan(sub)  # `replan`: a running plan re-planned for a new cluster state, moving counted

    # Commands of the other packages (profile, costmodel, run, serve, token) live beside their code.
    for module in _extensions():
        module.register(sub)
    from pipeplan.profile_cli import extend_profile

    extend_profile(sub.choices["profile"])  # `profile MODEL`: needs the executor, which costmodel must not import
    return parser


def _extensions() -> list[Any]:
    """Modules that add subcommands: each has ``register(subparsers)`` and ``USER_ERRORS``."""
    import pipeplan.api.cli
    import pipeplan.costmodel.cli
    import pipeplan.executor.cli
    return [pipeplan.costmodel.cli, pipeplan.executor.cli, pipeplan.api.cli]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    # The user's mistakes are UserErrors (CaptureError, GraphError, ZooError, ClusterError, PlanError, CliError,
    # …: one line, status 2), and so are the extensions' expected failures (USER_ERRORS); anything else,
    # a bare ValueError included, is pipeplan's bug and keeps its traceback (status 1).
    expected: tuple[type[Exception], ...] = ()
    for module in _extensions():
        expected += tuple(module.USER_ERRORS)
    try:
        args.func(args)
    except Exception as exc:
        line = user_fault(exc, expected)
        if line is None:
            raise
        print(f"pipeplan {args.command}: error: {line}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
