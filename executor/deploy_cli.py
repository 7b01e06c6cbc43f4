"""``pipeplan deploy``: start a deployment of a plan and serve a generated stream of requests.

There is no network endpoint yet: the command is the deployment's load test.  It submits
``--requests`` samples drawn as a run draws its batches, at ``--rate`` per second (open loop: a
request the full queue refuses is counted, not retried) or as fast as the queue takes them,
checks the first ``--check`` answers against the unsplit model, and prints the deployment's
statistics (:mod:`pipeplan.executor.deploy_stats`) beside the plan's predicted stage compute, and
every live switch: ``--switch PLAN.json@N`` switches to another plan once N requests are sent,
``--drift R`` re-plans when a stage's compute strays from its prediction by more than R, and a
stage process that dies is re-planned around unless ``--no-recover``.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from pipeplan.errors import user_input
from pipeplan.executor.errors import QueueFullError, RunError

if TYPE_CHECKING:
    from pipeplan.executor.deploy import Deployment
    from pipeplan.executor.deploy_stats import DeploymentStats
    from pipeplan.planner.plan import Plan

__all__ = ["add_deploy_arguments", "cmd_deploy"]


def add_deploy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", required=True, metavar="PLAN.json", help="a plan saved by `pipeplan plan --out`")
    p.add_argument("--model", metavar="MODEL", help="rebuild the model from this zoo name or factory instead")
    p.add_argument("--cluster", metavar="SPEC", help="cluster spec (default: the plan's cluster, by name)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="as for `pipeplan run`")
    p.add_argument("--threads", type=int, metavar="T", help="threads per stage (default: its cores)")
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe", help="as for `pipeplan run`")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds any send, receive or collective may wait (60)")
    p.add_argument("--queue-size", type=int, default=256, metavar="Q", help="requests waiting at most (256)")
    p.add_argument("--max-wait-ms", type=float, default=5.0, metavar="MS",
                   help="a partial microbatch leaves once its oldest request waited this long (5)")
    p.add_argument("--in-flight", type=int, metavar="K", help="microbatches in the pipeline at once (stages + 1)")
    p.add_argument("--requests", type=int, default=1000, metavar="N", help="requests to send (1000)")
    p.add_argument("--rate", type=float, default=0.0, metavar="R",
                   help="requests per second, open loop (0: as fast as the queue takes them)")
    p.add_argument("--check", type=int, default=16, metavar="K",
                   help="answers compared with the unsplit model (16; 0: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated requests (0)")
    p.add_argument("--stats", metavar="OUT.json", help="write the final statistics as JSON")
    p.add_argument("--switch", metavar="PLAN.json@N", help="switch live to another plan after N requests are sent")
    p.add_argument("--drift", type=float, metavar="R",
                   help="re-plan when a stage's measured compute strays from the prediction by more than R (0.5)")
    p.add_argument("--no-recover", action="store_true",
                   help="a stage process that dies fails the requests not answered, instead of a re-plan")
    p.add_argument("--no-calibrate", action="store_true",
                   help="do not record the stages' times for calibrated:MODEL cost models when it closes")


def _send(d: Deployment, requests: list[tuple[tuple[Any, ...], dict[str, Any]]], rate: float,
          switch: tuple[Plan, int] | None = None) -> list[Future[Any]]:
    futures: list[Future[Any]] = []
    start = time.perf_counter()
    for k, (args, kwargs) in enumerate(requests):
        if switch is not None and k == switch[1]:
            d.switch(switch[0], why=f"--switch after {k} requests")
        if rate > 0:
            time.sleep(max(0.0, start + k / rate - time.perf_counter()))
        try:
            futures.append(d.submit(*args, kwargs=kwargs, timeout=0.0 if rate > 0 else 60.0))
        except QueueFullError:
            continue  # open loop: counted as refused by the deployment
    return futures


def _check(d: Deployment, requests: list[tuple[tuple[Any, ...], dict[str, Any]]], answers: list[Any]) -> str:
    """Compare answers with the unsplit model run on each sample alone; raise RunError if they differ."""
    import torch

    from pipeplan.executor.check import compare_outputs, tensor_leaves, tolerance

    model = d.reference
    if model is None or not answers:
        return "answers not checked"

    def reference(k: int) -> list[torch.Tensor]:
        args, kwargs = requests[k]
        one = torch.utils._pytree.tree_map(
            lambda a: a.unsqueeze(0) if isinstance(a, torch.Tensor) and a.dim() else a, (args, kwargs))
        with torch.no_grad():
            out = model(*one[0], **one[1])
        return [t[0] for t in tensor_leaves(out)]

    leaves = [a if isinstance(a, tuple) else (a,) for a in answers]
    dtype = next((t.dtype for t in leaves[0] if t.is_floating_point()), torch.float32)
    tol, basis = tolerance(dtype, "cpu")
    result = compare_outputs(leaves, reference, tol=tol, basis=basis)
    if not result.ok:
        raise RunError(f"the deployment's answers differ from the unsplit model's: {result.message}")
    return f"{len(answers)} answers: {result.message}"


def _table(stats: DeploymentStats, plan: Plan) -> Any:
    from rich.table import Table

    table = Table(title=f"{plan.model}: deployment of {len(plan.stages)} stages, microbatches of {plan.batch_size}",
                  title_justify="left")
    for col in ("stage", "device", "microbatches", "compute pred", "compute", "recv", "send", "idle", "util"):
        table.add_column(col, justify="left" if col == "device" else "right")
    for s, planned in zip(stats.stages, plan.stages, strict=True):
        table.add_row(str(s.index), s.device, str(s.microbatches), f"{planned.compute * 1e3:.3f}",
                      *(f"{v * 1e3:.3f}" for v in (s.compute, s.recv, s.send, s.idle)), f"{s.utilization:.0%}")
    table.caption = (f"ms per microbatch over the last microbatches; {stats.answered} answered, {stats.refused} "
                     f"refused, {stats.failed} failed, {stats.padded} padding samples; {stats.throughput:.1f} "
                     f"requests/s; latency p50 {stats.latency['p50'] * 1e3:.2f} ms, p99 "
                     f"{stats.latency['p99'] * 1e3:.2f} ms; queueing p50 {stats.queueing['p50'] * 1e3:.2f} ms, "
                     f"p99 {stats.queueing['p99'] * 1e3:.2f} ms")
    table.caption_justify = "left"
    return table


def _switches_table(stats: DeploymentStats) -> Any:
    from rich.table import Table

    from pipeplan.costmodel.units import format_bytes

    table = Table(title=f"live switches: {len(stats.switches)}", title_justify="left")
    for col in ("layout", "at s", "why", "stages after", "layers moved", "sent", "reloaded", "pause ms",
                "replayed", "bottleneck pred ms", "measured ms"):
        table.add_column(col, justify="left" if col in ("why", "stages after") else "right")
    for r in stats.switches:
        measured = f"{r.measured_bottleneck * 1e3:.3f}" if r.measured_bottleneck is not None else "–"
        table.add_row(str(r.layout), f"{r.at:.2f}", r.why, ", ".join(r.devices_after), str(len(r.moves)),
                      format_bytes(r.bytes_sent), format_bytes(r.bytes_reloaded), f"{r.pause * 1e3:.1f}",
                      str(r.replayed), f"{r.predicted_bottleneck * 1e3:.3f}", measured)
    return table


def _replans_line(stats: DeploymentStats) -> str:
    """How many re-plans, how many stayed, and each device's slowdown after the last."""
    stayed = sum(r.decision == "stay" for r in stats.replans)
    slowdowns = ", ".join(f"{dev} {s:.2f}×" for dev, s in stats.replans[-1].slowdowns.items())
    return (f"re-plans: {len(stats.replans)} ({stayed} stayed, {len(stats.replans) - stayed} switched); "
            f"slowdowns after the last: {slowdowns}")


def _loans_lines(d: Deployment) -> list[str]:
    """What each borrowing stage fetched and each lender process held, from the processes' totals."""
    from pipeplan.costmodel.units import format_bytes

    lines = []
    for t in d.totals or []:
        fetched = t.get("loans", {}).get("fetched")
        if fetched:
            lenders = ", ".join(sorted(fetched["lenders"]))
            lines.append(f"{t['device']} fetched borrowed weights {fetched['fetches']} times "
                         f"({format_bytes(fetched['bytes'])}) from {lenders}, waiting {fetched['waited'] * 1e3:.1f} ms")
        if "lent" in t:
            lines.append(f"lender {t['device']} held {format_bytes(t['lent']['memory']['home'])} of weights and "
                         f"served {t['lent']['served']['requests']} fetches")
    return lines


def _switch_arg(text: str | None) -> tuple[Plan, int] | None:
    from pipeplan.cli_args import CliError
    from pipeplan.executor.deploy_options import refuse_loans
    from pipeplan.planner.plan import Plan

    if text is None:
        return None
    path, sep, count = text.rpartition("@")
    if not sep or not path or not count.isdigit():
        raise CliError(f"--switch {text!r}: write PLAN.json@N, e.g. other.json@500")
    plan = Plan.load(path)
    refuse_loans(plan, f"--switch {path}")  # before the deployment starts, not once N requests are in
    return plan, int(count)


def cmd_deploy(args: argparse.Namespace) -> None:
    import json
    from pathlib import Path

    from rich.console import Console

    from pipeplan.executor.deploy import ServeOptions, deploy_plan
    from pipeplan.executor.deploy_loans import check_servable
    from pipeplan.executor.options import RunOptions
    from pipeplan.executor.source import with_source
    from pipeplan.planner.plan import Plan

    options = RunOptions(cluster=args.cluster, device=args.device, threads=args.threads, schedule=args.schedule,
                         timeout=args.timeout, calibrate=not args.no_calibrate)
    with user_input("deploy options"):  # --queue-size, --max-wait-ms, --in-flight, --drift out of range
        serving = ServeOptions(queue_size=args.queue_size, max_wait_ms=args.max_wait_ms, in_flight=args.in_flight,
                               recover=not args.no_recover, drift=args.drift)
    plan = with_source(Plan.load(args.plan), args.model)
    check_servable(plan)  # deploy_plan refuses it too; here before --switch's plan is read
    switch = _switch_arg(args.switch)
    console = Console() if sys.stdout.isatty() else Console(width=170)
    with deploy_plan(plan, options=options, serving=serving) as d:
        requests = d.samples(args.requests, seed=args.seed)
        futures = _send(d, requests, args.rate, switch)
        answers = [f.result() for f in futures]
        stats = d.stats()
    console.print(_table(stats, d.plan))
    if stats.switches:
        console.print(_switches_table(stats))
    if stats.replans:
        console.print(_replans_line(stats))
    checked = requests[: args.check] if len(futures) == len(requests) else []
    console.print(_check(d, checked, answers[: len(checked)]) if checked else
                  "answers not checked" + (" (some requests were refused)" if args.check else ""))
    for line in _loans_lines(d):
        console.print(line)
    for note in d.calibration_notes:
        console.print(note)
    if args.stats:
        Path(args.stats).write_text(json.dumps(stats.to_dict(), indent=1))
        console.print(f"statistics written to {args.stats}")
