"""Subcommands of ``pipeplan`` that belong to this package (registered by :mod:`pipeplan.cli`).

Heavy imports happen inside the command functions so that ``pipeplan --help`` answers at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from pipeplan.errors import user_fault
from pipeplan.executor.errors import ExecutorError

__all__ = ["USER_ERRORS", "add_run_arguments", "cmd_run", "main", "register"]

# Failures printed as one line, exit status 2, besides the UserErrors (a plan that does not fit the model, bad
# run options, the planner's errors): a run that failed (a stage died, the outputs differ) says why in its message.
USER_ERRORS: tuple[type[Exception], ...] = (ExecutorError,)

_EPILOG = """\
examples:
  pipeplan plan mlp --batch 8 --cluster local-cpu --out plan.json
  pipeplan run --plan plan.json                          2 stage processes, pinned to cores 0 and 1
  pipeplan run --plan plan.json --load cpu1=1xcompute --report run.json
  torchrun --nproc-per-node 2 -m pipeplan.executor --plan plan.json           the same, launched by torchrun
  torchrun --nnodes 2 --node-rank R --nproc-per-node 1 --rdzv-backend c10d \\
           --rdzv-endpoint host0:29400 -m pipeplan.executor --plan plan.json     one stage per host
"""


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", required=True, metavar="PLAN.json", help="a plan saved by `pipeplan plan --out`")
    p.add_argument("--model", metavar="MODEL",
                   help="rebuild the model from this zoo name or factory ('package.module:function', "
                   "'file.py:function') instead of the plan's source (for a plan made from a graph file)")
    p.add_argument("--dtype", choices=("fp32", "bf16", "fp16"),
                   help="run in this dtype instead of the one the plan was made for (the report notes it)")
    p.add_argument("--batches", type=int, default=8, metavar="N", help="measured batches (8)")
    p.add_argument("--microbatches", type=int, metavar="M", help="microbatches per batch (the plan's)")
    p.add_argument("--warmup", type=int, default=1, metavar="W", help="unmeasured batches first (1)")
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe",
                   help="gpipe: fill-drain per batch (default); 1f1b: bounded in-flight outputs, receives "
                   "posted ahead")
    p.add_argument("--in-flight", type=int, metavar="K", help="with 1f1b: outputs a stage keeps unsent")
    p.add_argument("--load", action="append", default=[], metavar="DEV=LEVEL",
                   help="start real co-runners on a stage's device for the run, e.g. cpu1=1xcompute")
    p.add_argument("--report", metavar="OUT.json", help="write the run report as JSON")
    p.add_argument("--check-batches", type=int, default=2, metavar="K",
                   help="measured batches compared with the unsplit model (2)")
    p.add_argument("--no-check", action="store_true", help="do not compare outputs with the unsplit model")
    p.add_argument("--cluster", metavar="SPEC", help="cluster spec (default: the plan's cluster, by name)")
    p.add_argument("--costmodel", metavar="SPEC",
                   help="cost model that re-predicts stages under --load (default: the plan's)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="cpu (gloo) or cuda (NCCL); auto: cpu when the plan's devices are CPU cores")
    p.add_argument("--threads", type=int, metavar="T", help="threads per stage (default: its cores)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds any send, receive or collective may wait (60)")
    p.add_argument("--run-timeout", type=float, default=3600.0, metavar="S", help="seconds for the whole run")
    p.add_argument("--seed", type=int, default=0, help="seed of the input batches (0)")
    p.add_argument("--memory-cap", action="append", default=[], metavar="DEV=SIZE",
                   help="weight bytes DEV (or host:NAME) may hold, enforced in its process; a plan that borrows "
                   "is capped at its memory map by default")
    p.add_argument("--no-calibrate", action="store_true",
                   help="do not record this run's stage times for calibrated:MODEL cost models")


def cmd_run(args: argparse.Namespace) -> None:
    from rich.console import Console

    from pipeplan.executor.errors import OutputMismatchError
    from pipeplan.executor.harvest_report import loans_table
    from pipeplan.executor.lending import parse_caps
    from pipeplan.executor.options import RunOptions, parse_loads
    from pipeplan.executor.report import RunReport, report_table, verdict
    from pipeplan.executor.run import run_plan
    from pipeplan.executor.source import with_source
    from pipeplan.planner.plan import Plan

    options = RunOptions(
        batches=args.batches, microbatches=args.microbatches, warmup=args.warmup, schedule=args.schedule,
        in_flight=args.in_flight, loads=parse_loads(args.load),
        check_batches=0 if args.no_check else args.check_batches, device=args.device, threads=args.threads,
        timeout=args.timeout, run_timeout=args.run_timeout, seed=args.seed, cluster=args.cluster,
        costmodel=args.costmodel, calibrate=not args.no_calibrate, memory_caps=parse_caps(args.memory_cap))
    console = Console() if sys.stdout.isatty() else Console(width=170)
    report: RunReport | None
    try:
        report = run_plan(with_source(Plan.load(args.plan), args.model, args.dtype), options=options)
    except OutputMismatchError as exc:
        if args.report and isinstance(exc.report, RunReport):
            exc.report.save(args.report)
        raise
    if report is None:  # a rank other than 0 under torchrun: rank 0 reports
        return
    console.print(report_table(report))
    loans = loans_table(report)
    if loans is not None:
        console.print(loans)
    console.print(verdict(report))
    for note in report.notes:
        console.print(f"note: {note}")
    if args.report:
        report.save(args.report)
        console.print(f"report written to {args.report}")


def register(sub: Any) -> None:
    """Add this package's subcommands to the ``pipeplan`` subparsers ``sub``."""
    p = sub.add_parser(
        "run", help="run a plan for real: one process per stage, measured against the prediction",
        description="Run PLAN as pipelined inference, one process per stage (gloo on CPU, NCCL on CUDA), "
        "check its outputs against the unsplit model, and print each stage's measured compute, "
        "transfer and idle time beside the plan's prediction.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    p.set_defaults(func=cmd_run)
    from pipeplan.executor.deploy_cli import add_deploy_arguments, cmd_deploy

    p = sub.add_parser(
        "deploy", help="keep a plan running and serve a stream of requests through it (a load test, for now)",
        description="Start PLAN's stages once and serve a generated stream of requests through a bounded queue, "
        "microbatched with a latency bound; check answers against the unsplit model and print each stage's "
        "compute, transfer and idle time and the requests' queueing and latency.",
        epilog="example:\n  pipeplan deploy --plan plan.json --requests 2000 --rate 500 --max-wait-ms 2",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_deploy_arguments(p)
    p.set_defaults(func=cmd_deploy)


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeplan.executor``: the ``run`` command alone, for ``torchrun -m pipeplan.executor``."""
    parser = argparse.ArgumentParser(prog="python -m pipeplan.executor", description="Run a pipeplan plan.",
                                     epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress and details")
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        cmd_run(args)
    except Exception as exc:  # as pipeplan.cli.main: the user's fault is one line, anything else a traceback
        line = user_fault(exc, USER_ERRORS)
        if line is None:
            raise
        print(f"pipeplan run: error: {line}", file=sys.stderr)
        return 2
    return 0
