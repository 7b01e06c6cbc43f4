"""The ``pipeplan`` command line.

Each subcommand is one function; heavy imports (torch, transformers) happen inside them so that
``pipeplan --help`` answers at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeplan.errors import UsageError, user_fault, user_input

if TYPE_CHECKING:
    from rich.console import Console

    from pipeplan.costmodel.base import CostModel
    from pipeplan.costmodel.cluster import Cluster
    from pipeplan.costmodel.graph import ModelGraph
    from pipeplan.planner.harvest import HarvestOptions
    from pipeplan.planner.ilp import SolverOptions
    from pipeplan.planner.plan import Plan
    from pipeplan.planner.problem import Problem

__all__ = ["main"]

DEMO_MODEL = "gpt2"
DEMO_CLUSTER = "hetero-a100-t4"

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


class CliError(UsageError):
    """A user mistake in the command's arguments: printed as one line, exit status 2 (as any UserError)."""


def _console() -> Console:
    from rich.console import Console

    console = Console()
    # Piped output (CI logs, `| less`) gets rich's 80 columns otherwise, which folds every name.
    return console if console.is_terminal else Console(width=150)


_MODEL_HELP = ("zoo name, graph JSON file, your own model's factory 'package.module:function' or "
               "'file.py:function' (returns (module, example inputs)), or table:FILE (a cost table's layers)")


def add_model_args(p: argparse.ArgumentParser, model_help: str = _MODEL_HELP, optional: bool = False) -> None:
    """MODEL and the options that shape its capture (also used by ``profile MODEL``)."""
    p.add_argument("model", metavar="MODEL", nargs="?" if optional else None, help=model_help)
    p.add_argument("--batch", type=int, metavar="N", help="batch size (default 1)")
    p.add_argument("--granularity", default="leaf", metavar="G",
                   help="leaf (default), block, or depth:N — what one layer is")
    p.add_argument("--seq-len", type=int, metavar="T", help="tokens per sequence (token models)")
    p.add_argument("--image-size", type=int, metavar="S", help="image side in pixels (image models)")
    p.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), help="cast weights and inputs first (default: "
                   "the model's own, fp32 for the zoo)")


def check_model_name(text: str) -> None:
    """Refuse MODEL that is neither a zoo name nor a factory, pointing to factories."""
    from pipeplan.costmodel.source import is_factory
    from pipeplan.costmodel.zoo import ZooError, get_model

    if not is_factory(text):
        try:
            get_model(text)
        except ZooError as exc:
            raise CliError(f"{exc}; or give a graph JSON file, or your own model as 'package.module:function' or "
                           "'file.py:function' (a factory returning (module, example inputs))") from None


def _add_plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", required=True, metavar="SPEC", help="built-in name or YAML/JSON file")
    p.add_argument("--kv-context", type=int, metavar="T",
                   help="decoders: count a KV cache of T tokens per sequence, for every microbatch in flight, "
                   "in each stage's memory")
    p.add_argument("--load", action="append", default=[], metavar="DEV=LEVEL",
                   help="override a device's current load, e.g. gpu1=2xmemory (repeatable)")
    p.add_argument("--objective", choices=("throughput", "latency"), default="throughput",
                   help="minimise the bottleneck stage (default) or the end-to-end latency")
    p.add_argument("--comm", choices=("overlap", "serial"), default="overlap",
                   help="a stage's time is max(compute, recv, send) (default) or their sum")
    p.add_argument("--microbatches", type=int, default=4, metavar="M", help="microbatches per batch (4)")
    p.add_argument("--min-throughput", type=float, metavar="X",
                   help="with --objective latency: at least X samples/s of throughput")
    p.add_argument("--max-devices", "--max-stages", type=int, metavar="N", dest="max_devices",
                   help="use at most N devices, so at most N stages (one stage per device)")
    p.add_argument("--pin", action="append", default=[], metavar="LAYERS=DEVICE",
                   help="run LAYERS (a layer name or a glob such as 'blocks.1*') on DEVICE (a device id, or a "
                   "device type: any device of it); repeatable, every pin holds")
    p.add_argument("--keep-together", action="append", default=[], metavar="L1,L2,...",
                   help="put these layers (names or globs, comma-separated: 'blocks.0.*' alone is a group) on one "
                   "device; repeatable")
    p.add_argument("--forbid", action="append", default=[], metavar="DEVICE",
                   help="use no layer on DEVICE (an id or a device type); repeatable")
    p.add_argument("--transfer", choices=("per-device", "per-edge"), default="per-device",
                   help="a layer's output is sent once per receiving device (default), or once per consumer "
                   "layer on another device")
    p.add_argument("--memory-margin", type=float, default=0.1, metavar="F",
                   help="share of each device's memory left free (0.1)")
    p.add_argument("--harvest", action="store_true",
                   help="let stages keep weights in other devices' (or, with --host-memory, their host's) spare "
                        "memory, fetched each microbatch (docs/planner.md)")
    p.add_argument("--lender", action="append", metavar="DEVICE",
                   help="with --harvest: a device that may lend (repeatable; default: every device)")
    p.add_argument("--host-memory", metavar="SIZE", default="0",
                   help="with --harvest: memory each host lends its devices, e.g. 64GiB (default 0: no host tier)")
    p.add_argument("--host-bandwidth", metavar="RATE", default="12GB/s",
                   help="with --harvest: the host link's bandwidth, shared by its devices (12GB/s: PCIe)")
    p.add_argument("--reserve", action="append", default=[], metavar="DEV=SIZE",
                   help="with --harvest: memory other work holds on a device (repeatable)")
    p.add_argument("--time-limit", type=float, default=10.0, metavar="S", help="solver time limit (10 s)")
    _add_costmodel_arg(p)
    p.add_argument("--workers", type=int, metavar="N", help="solver threads (default: all cores)")
    p.add_argument("--seed", type=int, default=0, help="solver seed (0)")


def _add_costmodel_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--costmodel", metavar="CM",
                   help="analytic (roofline, the default), learned (the shipped contention-aware CPU model), "
                   "the path of a model file from `pipeplan costmodel train`, or profile:FILE (a table from "
                   "`pipeplan profile MODEL`: measured times of that model's layers), or table:FILE (seconds per "
                   "layer and device type from any profiler, CSV or JSON: docs/planner.md). Unset, a table that "
                   "`pipeplan profile` wrote for this model on this CPU (in ./profiles or $PIPEPLAN_PROFILES) "
                   "is used when it holds the graph's layers, analytic otherwise")


def _cost_model(args: argparse.Namespace, graph: ModelGraph | None = None,
                cluster: Cluster | None = None) -> CostModel:
    """The model --costmodel names; unset, this graph's own profile if one covers a device, else analytic."""
    from pipeplan.costmodel.registry import load_cost_model

    if args.costmodel:
        with user_input(""):  # "cost model 'x.zip': no such model file …", or no GPU model shipped yet
            return load_cost_model(args.costmodel)
    if str(getattr(args, "model", "")).startswith(_TABLE):  # a model given as a cost table costs what it says
        return load_cost_model(args.model)
    if graph is not None and cluster is not None:
        from pipeplan.costmodel.profiled import load_profiled, matching_profile

        path = matching_profile(graph)
        if path is not None:
            model = load_profiled(f"profile:{path}")
            covered = [d.id for d in cluster.devices if model.covers(d)]
            if covered:
                _console().print(f"costs from the model profile {path} (measured on this CPU) for "
                                 f"{', '.join(covered)}; --costmodel analytic to ignore it", highlight=False)
                return model
    return load_cost_model("analytic")


def _graph(args: argparse.Namespace) -> ModelGraph:
    from pipeplan.costmodel.graph import ModelGraph
    from pipeplan.costmodel.source import capture_source

    text = args.model
    if text.startswith(_TABLE):
        return _table_graph(args)
    if text.endswith(".json") or Path(text).is_file():
        given = [flag for flag, value in (("--batch", args.batch), ("--seq-len", args.seq_len),
                                          ("--image-size", args.image_size), ("--dtype", args.dtype))
                 if value is not None]
        if given:
            raise CliError(f"{text} is a graph file, captured with fixed shapes: {', '.join(given)} apply to zoo "
                           "models and factories only (capture it again with `pipeplan graph MODEL ... --json`)")
        graph = ModelGraph.load(text)
        if getattr(args, "kv_context", None) is not None:
            if not graph.meta.get("kv_bytes_per_token"):
                raise CliError(f"{text} records no key/value bytes per token: plan the model itself with "
                               "--kv-context, not its graph file")
            graph.meta["kv_context"] = args.kv_context
        return graph
    check_model_name(text)
    # A KV context that makes no sense is a SourceError naming it, reported like any bad option.
    return capture_source(text, args.batch or 1, granularity=args.granularity, seq_len=args.seq_len,
                          image_size=args.image_size, dtype=args.dtype, kv_context=getattr(args, "kv_context", None))


_TABLE = "table:"


def _table_graph(args: argparse.Namespace) -> ModelGraph:
    """MODEL ``table:FILE``: the chain (or the edges) a cost table describes, named after the file;
    ``--batch`` says the samples per microbatch the times were measured with."""
    from pipeplan.costmodel.table import load_table

    given = [flag for flag, value in (("--seq-len", args.seq_len), ("--image-size", args.image_size),
                                      ("--dtype", args.dtype), ("--kv-context", getattr(args, "kv_context", None)))
             if value is not None]
    if given:
        raise CliError(f"{args.model} is a cost table, measured at fixed shapes: {', '.join(given)} do not apply")
    return load_table(args.model).graph(model=Path(args.model.removeprefix(_TABLE)).stem, batch_size=args.batch or 1)


def _cluster(spec: str, loads: Sequence[str] = ()) -> Cluster:
    from pipeplan.costmodel.cluster import load_cluster
    from pipeplan.costmodel.hardware import Contention

    cluster = load_cluster(spec)
    for item in loads:
        device, sep, level = item.partition("=")
        if not sep:
            raise CliError(f"--load {item!r}: write DEVICE=LEVEL, e.g. gpu1=2xmemory")
        with user_input(""):  # "cannot read load 'lots': use 'idle', …"
            load = Contention.parse(level)
        cluster = cluster.with_load(device.strip(), load)
    return cluster


def cmd_models(args: argparse.Namespace) -> None:
    from rich.table import Table

    from pipeplan.costmodel.zoo import list_models

    table = Table(title="model zoo (random weights, nothing downloaded)", title_justify="left")
    for col in ("name", "family", "input", "description"):
        table.add_column(col)
    for m in list_models():
        table.add_row(m.name, m.family, m.inputs, m.description)
    _console().print(table)


def cmd_graph(args: argparse.Namespace) -> None:
    from pipeplan.render import graph_table

    graph = _graph(args)
    _console().print(graph_table(graph, top=args.top))
    if args.json:
        graph.save(args.json)
        _console().print(f"graph written to {args.json}")


def cmd_cluster(args: argparse.Namespace) -> None:
    import json

    from pipeplan.costmodel.cluster import builtin_clusters
    from pipeplan.render import cluster_table, links_table

    if args.detect:
        if args.spec:
            raise CliError(f"--detect describes this machine: give no SPEC ({args.spec!r}), or drop --detect")
        from pipeplan.costmodel.cluster_detect import detect_cluster

        _console().print("measuring this machine's devices (fp32 matmul and copy, a few seconds each) …")
        cluster = detect_cluster(args.name, gpus=not args.no_gpus)
    elif args.list or not args.spec:
        _console().print("built-in clusters: " + ", ".join(builtin_clusters()))
        return
    else:
        cluster = _cluster(args.spec, args.load)
    console = _console()
    console.print(cluster_table(cluster))
    console.print(links_table(cluster))
    if args.json:
        Path(args.json).write_text(json.dumps(cluster.to_dict(), indent=1))
        console.print(f"cluster written to {args.json}")
    if args.out:
        cluster.save(args.out)
        console.print(f"cluster written to {args.out}")


def cmd_costs(args: argparse.Namespace) -> None:
    from pipeplan.render import device_times_table, layer_times_table

    graph = _graph(args)
    cluster = _cluster(args.cluster, args.load)
    model = _cost_model(args, graph, cluster)
    console = _console()
    if not args.summary:
        console.print(layer_times_table(graph, cluster, model))
    console.print(device_times_table(graph, cluster, model))


def _problem(args: argparse.Namespace) -> tuple[Problem, SolverOptions]:
    from pipeplan.planner.ilp import SolverOptions
    from pipeplan.planner.problem import PlanOptions, Problem

    options = PlanOptions(objective=args.objective, comm=args.comm, microbatches=args.microbatches,
                          min_throughput=args.min_throughput, max_devices=args.max_devices,
                          memory_margin=args.memory_margin, transfer=args.transfer, pins=tuple(args.pin),
                          keep_together=tuple(_layer_list(group) for group in args.keep_together),
                          forbid_devices=tuple(args.forbid))
    graph, cluster = _graph(args), _cluster(args.cluster, args.load)
    problem = Problem(graph, cluster, _cost_model(args, graph, cluster), options)
    return problem, SolverOptions(time_limit=args.time_limit, workers=args.workers, seed=args.seed)


def _layer_list(text: str) -> tuple[str, ...]:
    """``--keep-together a,b*,c``: the names and globs (one glob may name the whole group)."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise CliError(f"--keep-together {text!r}: an empty name; give layer names or globs separated by commas")
    return names


def _harvest_options(args: argparse.Namespace) -> HarvestOptions | None:
    """The harvesting options of ``--harvest`` and its companions; None without ``--harvest``."""
    from pipeplan.planner.harvest import HarvestOptions

    if not args.harvest:
        if args.lender or args.reserve or args.host_memory != "0":
            raise CliError("--lender, --reserve and --host-memory need --harvest")
        return None
    return HarvestOptions(lenders=tuple(args.lender) if args.lender else None, host_memory=args.host_memory,
                          host_bandwidth=args.host_bandwidth, reserved=tuple(args.reserve))


def _print_harvest(console: Console, plan: Plan) -> None:
    from pipeplan.render import loans_table, memory_map_table, plan_table

    console.print(plan_table(plan))
    console.print(memory_map_table(plan))
    if plan.harvest is not None and plan.harvest.loans:
        console.print(loans_table(plan))


def cmd_plan(args: argparse.Namespace) -> None:
    from pipeplan.planner.harvest_solve import solve_harvest
    from pipeplan.planner.ilp import solve
    from pipeplan.render import plan_table

    problem, solver = _problem(args)
    harvest = _harvest_options(args)
    console = _console()
    console.print(f"solving: {problem.n_layers} layers on {problem.n_devices} devices, "
                  f"time limit {solver.time_limit:g}s{', harvesting spare memory' if harvest else ''} …")
    plan = solve_harvest(problem, harvest, solver) if harvest is not None else solve(problem, solver)
    if harvest is not None:
        _print_harvest(console, plan)
    else:
        console.print(plan_table(plan))
    if args.out:
        plan.save(args.out)
        console.print(f"plan written to {args.out}")
    if args.png:
        from pipeplan.planner.plot import plot_plans

        png = plot_plans(problem, {"harvest" if harvest is not None else plan.method: plan}, args.png)
        console.print(f"Gantt chart and memory per device written to {png}")


def _show_comparison(console: Console, problem: Problem, solver: SolverOptions, png: str,
                     with_plan: bool = False, extra: dict[str, Plan] | None = None) -> None:
    """Plan with the ILP and every baseline, print the table (and the ILP's stages), write the PNG
    (with the ``extra`` plans, such as one that borrows memory, drawn after them)."""
    from pipeplan.planner.compare import compare, comparison_table, plot_comparison
    from pipeplan.render import plan_table

    console.print(f"planning {problem.graph.model} ({problem.n_layers} layers) on {problem.cluster.name} "
                  f"with the ILP (CP-SAT) and every baseline, {problem.options.microbatches} microbatches …")
    comp = compare(problem, solver)
    if with_plan:
        console.print(plan_table(comp.plans["ilp"]))
    console.print(comparison_table(comp))
    console.print(f"Gantt charts and memory per device written to {plot_comparison(comp, png, extra)}")


def cmd_compare(args: argparse.Namespace) -> None:
    from pipeplan.planner.harvest_solve import solve_harvest
    from pipeplan.planner.problem import PlanError

    problem, solver = _problem(args)
    harvest = _harvest_options(args)
    png = args.png or f"compare-{problem.graph.model}-{problem.cluster.name}.png"
    console = _console()
    borrowing: dict[str, Plan] = {}
    if harvest is not None:
        # The comparison covers plans that keep their weights at home; the plan that borrows is
        # printed before it and drawn after them in the PNG (its Gantt chart with its fetches).
        console.print("with harvesting:")
        borrowing["harvest"] = solve_harvest(problem, harvest, solver)
        _print_harvest(console, borrowing["harvest"])
    try:
        _show_comparison(console, problem, solver, png, extra=borrowing)
    except PlanError as exc:
        if harvest is None:
            raise
        from pipeplan.planner.plot import plot_plans

        console.print(f"without harvesting: {exc}")
        console.print(f"Gantt chart and memory per device written to {plot_plans(problem, borrowing, png)}")


def cmd_demo(args: argparse.Namespace) -> None:
    from pipeplan.costmodel.zoo import capture_model
    from pipeplan.planner.ilp import SolverOptions
    from pipeplan.planner.problem import PlanOptions, Problem
    from pipeplan.render import cluster_table, device_times_table, graph_table

    console = _console()
    console.rule(f"pipeplan demo: {args.model} on {args.cluster}")
    console.print(f"capturing {args.model} (batch {args.batch}, {args.granularity} granularity) "
                  "with torch.export …")
    graph = capture_model(args.model, args.batch, granularity=args.granularity)
    console.print(graph_table(graph))
    cluster = _cluster(args.cluster, args.load)
    console.print(cluster_table(cluster))
    model = _cost_model(args, graph, cluster)
    console.print(device_times_table(graph, cluster, model))
    problem = Problem(graph, cluster, model, PlanOptions(microbatches=args.microbatches))
    _show_comparison(console, problem, SolverOptions(time_limit=args.time_limit, seed=0), args.png,
                     with_plan=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pipeplan",
        description="Plan how to split a DNN model across busy GPUs, and check the plan for real.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress and details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("models", help="list the model zoo")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("graph", help="capture a model and print its per-layer table",
                       description="Capture MODEL with torch.export and print one row per layer: "
                       "FLOPs, bytes moved, arithmetic intensity, parameters, activations.")
    add_model_args(p)
    p.add_argument("--json", metavar="OUT", help="also save the graph as versioned JSON")
    p.add_argument("--top", type=int, metavar="K", help="show only the K layers with most FLOPs")
    p.set_defaults(func=cmd_graph)

    p = sub.add_parser("cluster", help="show a cluster spec: devices, loads and links")
    p.add_argument("spec", nargs="?", metavar="SPEC", help="built-in name or YAML/JSON file")
    p.add_argument("--list", action="store_true", help="list the built-in clusters")
    p.add_argument("--load", action="append", default=[], metavar="DEV=LEVEL",
                   help="set a device's load: idle, 2xmemory, 1xcompute, 0.3, 30%% (repeatable)")
    p.add_argument("--json", metavar="OUT", help="write the expanded spec (every link) as JSON")
    p.add_argument("--detect", action="store_true",
                   help="describe this machine: GPUs (name, memory, measured matmul and copy rates, NVLink/PCIe "
                   "links from NVML) and CPU cores")
    p.add_argument("--name", metavar="NAME", help="with --detect: the cluster's name (default HOST-detected)")
    p.add_argument("--no-gpus", action="store_true", help="with --detect: CPU cores only")
    p.add_argument("--out", metavar="OUT.yaml", help="write the spec as YAML (or JSON by suffix), for plan and run")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("costs", help="analytic time of every layer on every device of a cluster",
                       description="Predict each layer's time on each device under its current "
                       "load with the roofline cost model, and the whole model on each device.")
    add_model_args(p)
    p.add_argument("--cluster", required=True, metavar="SPEC", help="built-in name or file")
    p.add_argument("--load", action="append", default=[], metavar="DEV=LEVEL",
                   help="override a device's load (repeatable)")
    p.add_argument("--summary", action="store_true", help="only the per-device totals")
    _add_costmodel_arg(p)
    p.set_defaults(func=cmd_costs)

    p = sub.add_parser("plan", help="split a model into pipeline stages with the ILP (CP-SAT)",
                       description="Find the split of MODEL across the devices of SPEC that minimises "
                       "the bottleneck stage (throughput) or the latency, under memory limits, taking "
                       "each device's current load into account.")
    add_model_args(p)
    _add_plan_args(p)
    p.add_argument("--out", metavar="PLAN.json", help="save the plan as versioned JSON")
    p.add_argument("--png", metavar="OUT.png", help="also draw the plan: its Gantt chart and the memory per device "
                   "(own, lent, reserved, free; borrowed)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("compare", help="the ILP beside every baseline: table and Gantt PNG",
                       description="Plan MODEL on SPEC with the ILP and with the uniform, "
                       "parameter-balanced, time-balanced and chain-DP baselines; print a table and "
                       "write a PNG with each plan's pipeline schedule and memory per device.")
    add_model_args(p)
    _add_plan_args(p)
    p.add_argument("--png", metavar="OUT.png", help="where to write the picture")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("demo", help="the main job on built-in defaults",
                       description=f"Capture {DEMO_MODEL}, show its layers and the {DEMO_CLUSTER} "
                       "cluster with one device busy, then plan it with the ILP and the baselines.")
    p.add_argument("--model", default=DEMO_MODEL)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--granularity", default="block")
    p.add_argument("--cluster", default=DEMO_CLUSTER)
    p.add_argument("--load", action="append", default=["gpu2=1xcompute"], metavar="DEV=LEVEL")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--time-limit", type=float, default=10.0)
    p.add_argument("--png", default="demo-compare.png")
    _add_costmodel_arg(p)
    p.set_defaults(func=cmd_demo)

    from pipeplan.replan_cli import register_replan

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
