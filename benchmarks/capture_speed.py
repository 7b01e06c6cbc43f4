"""How long graph capture takes for each zoo model, and how big the graphs are.

Prints a table; not a test.  Run: ``.venv/bin/python benchmarks/capture_speed.py [--real]``
(``--real`` adds the transformers architectures, about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import time

import torch
from rich.console import Console
from rich.table import Table

from pipeplan.costmodel.capture import capture
from pipeplan.costmodel.units import format_flops
from pipeplan.costmodel.zoo import build_model, list_models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--real", action="store_true", help="include transformers models")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(2)
    table = Table(title=f"graph capture, batch {args.batch}, {torch.get_num_threads()} threads")
    for col in ("model", "build s", "granularity", "layers", "edges", "FLOPs", "capture s"):
        table.add_column(col, justify="left" if col in ("model", "granularity") else "right")
    for entry in list_models():
        if entry.family != "builtin" and not args.real:
            continue
        t0 = time.perf_counter()
        built = build_model(entry.name, args.batch)
        build_s = time.perf_counter() - t0
        for granularity in ("leaf", "block"):
            t0 = time.perf_counter()
            graph = capture(built.model, built.args, granularity=granularity, name=entry.name)
            took = time.perf_counter() - t0
            table.add_row(entry.name, f"{build_s:.2f}", granularity, str(len(graph)),
                          str(graph.nx.number_of_edges()), format_flops(graph.total_flops),
                          f"{took:.2f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
