"""The arguments several ``pipeplan`` commands share, the error for a bad one, and the console they print to.

Declaring them here keeps one spelling and one help text for MODEL, SPEC and the planning options
across ``graph``, ``costs``, ``plan``, ``compare``, ``replan`` and ``profile MODEL``; what they name is
built by :mod:`pipeplan.cli_inputs`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pipeplan.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["CliError", "add_costmodel_arg", "add_model_args", "add_plan_args", "rich_console"]


class CliError(UsageError):
    """A user mistake in the command's arguments: printed as one line, exit status 2 (as any UserError)."""


def rich_console() -> Console:
    """The console the commands print their tables to."""
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
                   "the model's own, fp32 for the zoo); with --layers, the dtype the layers run and are recorded "
                   "in (fp32)")


def add_plan_args(p: argparse.ArgumentParser) -> None:
    """SPEC and every option of a planning problem and its solver (``plan``, ``compare``, ``replan``)."""
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
    p.add_argument("--in-flight", type=int, metavar="N",
                   help="microbatches whose activations a stage keeps at once (default: all M)")
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
                        "memory, fetched each microbatch or, with --fetch batch, once per batch (docs/planner.md)")
    p.add_argument("--lender", action="append", metavar="DEVICE",
                   help="with --harvest: a device that may lend (repeatable; default: every device)")
    p.add_argument("--host-memory", metavar="SIZE", default="0",
                   help="with --harvest: memory each host lends its devices, e.g. 64GiB (default 0: no host tier)")
    p.add_argument("--host-bandwidth", metavar="RATE", default="12GB/s",
                   help="with --harvest: the host link's bandwidth, shared by its devices (12GB/s: PCIe)")
    p.add_argument("--reserve", action="append", default=[], metavar="DEV=SIZE",
                   help="with --harvest: memory other work holds on a device (repeatable)")
    p.add_argument("--fetch", choices=("microbatch", "batch"), default="microbatch",
                   help="with --harvest: fetch a borrowed layer each microbatch (default), or once per batch (the "
                        "borrowing stage runs its batch layer by layer, holding all its microbatches' activations)")
    p.add_argument("--stash", action="store_true",
                   help="with --harvest --fetch batch: a borrowing stage may keep the activations of the microbatches "
                        "it is not computing with a lender between its layers, instead of holding all of them")
    p.add_argument("--time-limit", type=float, default=10.0, metavar="S", help="solver time limit (10 s)")
    add_costmodel_arg(p)
    p.add_argument("--workers", type=int, metavar="N", help="solver threads (default: all cores)")
    p.add_argument("--seed", type=int, default=0, help="solver seed (0)")


def add_costmodel_arg(p: argparse.ArgumentParser) -> None:
    """``--costmodel CM``: which cost model prices the layers."""
    p.add_argument("--costmodel", metavar="CM",
                   help="analytic (roofline, the default), learned (the shipped contention-aware CPU model), "
                   "the path of a model file from `pipeplan costmodel train`, or profile:FILE (a table from "
                   "`pipeplan profile MODEL`: measured times of that model's layers), or table:FILE (seconds per "
                   "layer and device type from any profiler, CSV or JSON: docs/planner.md). Unset, a table that "
                   "`pipeplan profile` wrote for this model on this CPU (in ./profiles or $PIPEPLAN_PROFILES) "
                   "is used when it holds the graph's layers, analytic otherwise")
