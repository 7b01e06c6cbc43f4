"""``pipeplan replan``: the plan serving now, re-planned for a new cluster state with the cost of
moving its weights counted (:mod:`pipeplan.planner.replan`), and the decision to stay or move explained."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

    from pipeplan.planner.plan import Plan

__all__ = ["decision_text", "migration_table", "register_replan"]


def register_replan(sub: Any) -> None:
    """Add the ``replan`` subcommand to the CLI's subparsers."""
    from pipeplan.cli_args import add_model_args, add_plan_args

    p = sub.add_parser("replan", help="re-plan a running plan for a new cluster state, counting what moving costs",
                       description="Find the plan for the new cluster state (SPEC, --load) that minimises the "
                       "bottleneck plus the time to move the weights from the current plan, spread over the "
                       "horizon; keep the current plan when no move pays. MODEL defaults to the model the "
                       "plan records (a zoo name or factory).")
    add_model_args(p, optional=True)
    add_plan_args(p)
    p.add_argument("--plan", required=True, metavar="CURRENT.json", help="the plan serving now")
    p.add_argument("--horizon", required=True, metavar="H",
                   help="how long the new plan serves before the next change: 10m, 2h, 90s (counted at the "
                   "current plan's rate), or 5000mb (microbatches)")
    p.add_argument("--reload-bandwidth", default="12GB/s", metavar="RATE",
                   help="where the weights of a device that left come from: its bandwidth (12GB/s, host memory "
                   "over PCIe)")
    p.add_argument("--reload-latency", default="1ms", metavar="T", help="that source's latency (1ms)")
    p.add_argument("--shared-reload", action="store_true",
                   help="one reload stream for every device (a file server) instead of one per device")
    p.add_argument("--out", metavar="PLAN.json", help="save the new plan, with its migration section")
    p.set_defaults(func=cmd_replan)


def _model_from_plan(args: argparse.Namespace, current: Plan) -> None:
    """Without MODEL, the model the current plan was made for, at its batch and granularity."""
    from pipeplan.cli_args import CliError

    if args.model is not None:
        return
    source = current.source or {}
    name = source.get("zoo") or source.get("factory")
    if not name:
        raise CliError(f"the plan records no zoo name or factory for {current.model!r}: give MODEL (e.g. the "
                       "graph JSON it was planned from)")
    args.model = name
    args.batch = args.batch or source.get("batch_size")
    args.granularity = source.get("granularity", args.granularity)
    for key in ("seq_len", "image_size", "dtype"):
        if getattr(args, key) is None:
            setattr(args, key, source.get(key))


def cmd_replan(args: argparse.Namespace) -> None:
    from pipeplan.cli_args import CliError, rich_console
    from pipeplan.cli_inputs import read_harvest_options, read_problem
    from pipeplan.planner.migration import Reload
    from pipeplan.planner.plan import Plan
    from pipeplan.planner.replan import replan
    from pipeplan.render import plan_table

    if read_harvest_options(args) is not None:  # add_plan_args offers them; a re-plan does not borrow (yet)
        raise CliError("replan does not take --harvest: a re-plan with migration cost plans without borrowing "
                       "memory; plan with `pipeplan plan --harvest` instead")
    current = Plan.load(args.plan)
    _model_from_plan(args, current)
    problem, solver = read_problem(args)
    reload = Reload.of(args.reload_bandwidth, args.reload_latency, args.shared_reload)
    console = rich_console()
    console.print(f"re-planning {problem.graph.model} from {args.plan} onto {problem.cluster.name} "
                  f"({problem.n_devices} devices), horizon {args.horizon}, time limit {solver.time_limit:g}s …")
    plan = replan(problem, current, args.horizon, reload=reload, options=solver)
    console.print(plan_table(plan))
    console.print(migration_table(plan))
    console.print(decision_text(plan), highlight=False)
    if args.out:
        plan.save(args.out)
        console.print(f"plan written to {args.out}")


def migration_table(plan: Plan) -> Table:
    """One row per layer that changes device, and the channels' totals as the footer."""
    from rich.table import Table

    from pipeplan.costmodel.units import format_bytes, format_seconds

    moved = plan.migration
    assert moved is not None, "a plan from pipeplan.planner.replan carries its migration"
    table = Table(title=f"moves: {_count(len(moved.moves), 'layer')}", title_justify="left")
    for col in ("layer", "from", "to", "bytes", "seconds"):
        table.add_column(col, justify="right" if col in ("bytes", "seconds") else "left")
    for m in moved.moves:
        table.add_row(m.layer, m.source, m.target, format_bytes(m.bytes), format_seconds(m.seconds))
    for c in moved.channels:
        table.add_row("[dim]channel[/dim]", c.source, c.target, format_bytes(c.bytes), format_seconds(c.seconds))
    return table


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def decision_text(plan: Plan) -> str:
    """The decision, with the figures it rests on."""
    from pipeplan.costmodel.units import format_bytes, format_seconds

    moved = plan.migration
    assert moved is not None
    n = f"{moved.horizon_microbatches:,.0f} microbatches"
    lines = [f"decision: {moved.decision.upper()} — objective {format_seconds(moved.objective)} per microbatch "
             f"(bottleneck {format_seconds(plan.bottleneck)} + migration {format_seconds(moved.seconds)} / {n}), "
             f"{plan.certificate.status}"]
    lines.append(f"  moved: {format_bytes(moved.bytes)} of the model's {format_bytes(moved.model_bytes)} in "
                 f"{format_seconds(moved.seconds)}, {_count(len(moved.channels), 'channel')} in parallel")
    if moved.stay is not None:
        lines.append(f"  keep the current plan: {format_seconds(moved.stay.objective)} per microbatch")
    else:
        lines.append(f"  the current plan cannot stay: {moved.stay_invalid}")
    if moved.fresh is not None:
        lines.append(f"  least bottleneck, moving what it needs: {format_seconds(moved.fresh.bottleneck)} + "
                     f"{format_seconds(moved.fresh.migration_seconds)} / {n} = "
                     f"{format_seconds(moved.fresh.objective)} per microbatch")
    if moved.break_even_microbatches is not None:
        target = "the least-bottleneck plan" if moved.compared == "fresh" else "this plan"
        lines.append(f"  moving to {target} pays from {moved.break_even_microbatches:,.0f} microbatches on")
    elif moved.stay is not None:
        lines.append("  no plan with a lower bottleneck: moving never pays")
    return "\n".join(lines)
