"""``pipeplan models | graph | cluster | costs``: the inputs of a plan, shown before planning.

The model zoo, a model's per-layer table, a cluster's devices and links, and every layer's predicted
time on every device: what the planner will see, so that a surprising plan can be traced to its input.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeplan.cli_args import CliError, add_costmodel_arg, add_model_args, rich_console
from pipeplan.cli_inputs import read_cluster, read_cost_model, read_graph

__all__ = ["cmd_cluster", "cmd_costs", "cmd_graph", "cmd_models", "register_describe"]


def register_describe(sub: Any) -> None:
    """Add ``models``, ``graph``, ``cluster`` and ``costs`` to the CLI's subparsers."""
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
    add_costmodel_arg(p)
    p.set_defaults(func=cmd_costs)


def cmd_models(args: argparse.Namespace) -> None:
    from rich.table import Table

    from pipeplan.costmodel.zoo import list_models

    table = Table(title="model zoo (random weights, nothing downloaded)", title_justify="left")
    for col in ("name", "family", "input", "description"):
        table.add_column(col)
    for m in list_models():
        table.add_row(m.name, m.family, m.inputs, m.description)
    rich_console().print(table)


def cmd_graph(args: argparse.Namespace) -> None:
    from pipeplan.render import graph_table

    graph = read_graph(args)
    rich_console().print(graph_table(graph, top=args.top))
    if args.json:
        graph.save(args.json)
        rich_console().print(f"graph written to {args.json}")


def cmd_cluster(args: argparse.Namespace) -> None:
    import json

    from pipeplan.costmodel.cluster import builtin_clusters
    from pipeplan.render import cluster_table, links_table

    if args.detect:
        if args.spec:
            raise CliError(f"--detect describes this machine: give no SPEC ({args.spec!r}), or drop --detect")
        from pipeplan.costmodel.cluster_detect import detect_cluster

        rich_console().print("measuring this machine's devices (fp32 matmul and copy, a few seconds each) …")
        cluster = detect_cluster(args.name, gpus=not args.no_gpus)
    elif args.list or not args.spec:
        rich_console().print("built-in clusters: " + ", ".join(builtin_clusters()))
        return
    else:
        cluster = read_cluster(args.spec, args.load)
    console = rich_console()
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

    graph = read_graph(args)
    cluster = read_cluster(args.cluster, args.load)
    model = read_cost_model(args, graph, cluster)
    console = rich_console()
    if not args.summary:
        console.print(layer_times_table(graph, cluster, model))
    console.print(device_times_table(graph, cluster, model))
