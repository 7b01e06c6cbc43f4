"""What the ``pipeplan`` commands' arguments name, built: the model graph, the cluster, the cost
model, the planning problem and the harvesting options.

The arguments themselves are declared in :mod:`pipeplan.cli_args`; every mistake in them is a
:class:`~pipeplan.cli_args.CliError` (or another UserError) that says what to change.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pipeplan.cli_args import CliError, rich_console
from pipeplan.errors import user_input

if TYPE_CHECKING:
    from pipeplan.costmodel.base import CostModel
    from pipeplan.costmodel.cluster import Cluster
    from pipeplan.costmodel.graph import ModelGraph
    from pipeplan.planner.harvest import HarvestOptions
    from pipeplan.planner.ilp import SolverOptions
    from pipeplan.planner.problem import Problem

__all__ = ["check_model_name", "read_cluster", "read_cost_model", "read_graph", "read_harvest_options",
           "read_problem"]

_TABLE = "table:"  # MODEL or --costmodel given as a cost table of measured times


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


def read_cost_model(args: argparse.Namespace, graph: ModelGraph | None = None,
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
                rich_console().print(f"costs from the model profile {path} (measured on this CPU) for "
                                     f"{', '.join(covered)}; --costmodel analytic to ignore it", highlight=False)
                return model
    return load_cost_model("analytic")


def read_graph(args: argparse.Namespace) -> ModelGraph:
    """MODEL as a layer graph: a cost table's layers, a saved graph file, or a zoo model or factory captured."""
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


def read_cluster(spec: str, loads: Sequence[str] = ()) -> Cluster:
    """SPEC with each ``--load DEVICE=LEVEL`` applied."""
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


def read_problem(args: argparse.Namespace) -> tuple[Problem, SolverOptions]:
    """The planning problem and solver options of :func:`pipeplan.cli_args.add_plan_args`' arguments."""
    from pipeplan.planner.ilp import SolverOptions
    from pipeplan.planner.problem import PlanOptions, Problem

    options = PlanOptions(objective=args.objective, comm=args.comm, microbatches=args.microbatches,
                          in_flight=args.in_flight, min_throughput=args.min_throughput, max_devices=args.max_devices,
                          memory_margin=args.memory_margin, transfer=args.transfer, pins=tuple(args.pin),
                          keep_together=tuple(_layer_list(group) for group in args.keep_together),
                          forbid_devices=tuple(args.forbid))
    graph, cluster = read_graph(args), read_cluster(args.cluster, args.load)
    problem = Problem(graph, cluster, read_cost_model(args, graph, cluster), options)
    return problem, SolverOptions(time_limit=args.time_limit, workers=args.workers, seed=args.seed)


def _layer_list(text: str) -> tuple[str, ...]:
    """``--keep-together a,b*,c``: the names and globs (one glob may name the whole group)."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise CliError(f"--keep-together {text!r}: an empty name; give layer names or globs separated by commas")
    return names


def read_harvest_options(args: argparse.Namespace) -> HarvestOptions | None:
    """The harvesting options of ``--harvest`` and its companions; None without ``--harvest``."""
    from pipeplan.planner.harvest import HarvestOptions

    if not args.harvest:
        if args.lender or args.reserve or args.host_memory != "0" or args.fetch != "microbatch" or args.stash:
            raise CliError("--lender, --reserve, --host-memory, --fetch and --stash need --harvest")
        return None
    if args.stash and args.fetch != "batch":
        raise CliError("--stash needs --fetch batch: only a stage that runs its batch layer by layer holds other "
                       "microbatches' activations between its layers")
    return HarvestOptions(lenders=tuple(args.lender) if args.lender else None, host_memory=args.host_memory,
                          host_bandwidth=args.host_bandwidth, reserved=tuple(args.reserve), fetch=args.fetch,
                          stash=args.stash)
