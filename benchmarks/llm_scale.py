"""LLM-scale planning: capture time, plan time, gap and peak memory for the zoo's decoders, and the
10,000-operator rung on 64 devices.

    .venv/bin/python benchmarks/llm_scale.py                 # 5 decoders on 4 and 8 devices, then the rung
    .venv/bin/python benchmarks/llm_scale.py --models llama-7b --clusters hetero-a100-t4 --no-rung --markdown

Each model is built on the meta device (pipeplan.costmodel.zoo.llm: no weights), captured once at the given
granularity (timed), saved as graph JSON, and planned by ``pipeplan.planner.ilp.solve`` in a fresh child
process per cluster, so that the child's peak RSS is the planner's own (Python, OR-Tools and the
graph included; the capture's memory is the parent's).  The table says where the plan's time goes:
building the :class:`pipeplan.planner.problem.Problem` (cost model and memory terms), and the solve, split
into the warm start (the baselines, timed again on their own), CP-SAT's own time, the tie-break
among optimal plans (from its note in the certificate) and the rest (tick tables, the stage
program, building CP-SAT's model; a difference of two timings, so noisy); "solve s, no tie-break" is
a second solve with ``tie_break=False``, and "cold s, no tie-break" a third with no warm start as
well (the stage program then starts from the price bound, :mod:`pipeplan.planner.bound`).  Memory
columns compare the planner's memory figure for the fullest stage with the liveness figure of
:func:`pipeplan.costmodel.memory.stage_memory` for the same stage.

The rung (``benchmarks/scale_graph.py``): a 10,103-operator mixture-of-experts decoder on 64 A100s
in 8 hosts, built and planned in one child process (its peak RSS includes the graph and the
problem); it takes the :mod:`pipeplan.planner.ilp_scale` path.

Targets (issue 19): the decoders proven within 1% in ≤ 2 s on 2 cores; the rung certified within 1%
in ≤ 60 s with peak memory ≤ 4 GB.  This script asserts nothing; it prints.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODELS = ("llama-7b", "llama-13b", "llama-70b", "llama3-8b", "mixtral-8x7b")
CLUSTERS = ("hetero-a100-t4", "8gpu-2hosts")
GIB = 2**30


def _peak_rss() -> int:
    """Bytes: the largest resident set this process has had (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _tie_seconds(passes: list[str]) -> float:
    """Seconds of the tie-break, read from its note ("tie-break: STATUS in 0.42s, …")."""
    found = [re.search(r"tie-break: \S+ in ([0-9.]+)s", note) for note in passes]
    return sum(float(m.group(1)) for m in found if m)


def plan_one(graph_path: str, cluster: str, time_limit: float, gap: float, workers: int,
             microbatches: int) -> dict[str, Any]:
    """Plan one saved graph on one cluster (run in a child process); a JSON-able row."""
    from pipeplan.costmodel.cluster import load_cluster
    from pipeplan.costmodel.graph import ModelGraph
    from pipeplan.costmodel.memory import stage_memory
    from pipeplan.planner.baselines import best_baseline
    from pipeplan.planner.ilp import SolverOptions, solve
    from pipeplan.planner.problem import PlanOptions, Problem

    graph = ModelGraph.load(graph_path)
    rss_before = _peak_rss()
    t0 = time.perf_counter()
    problem = Problem(graph, load_cluster(cluster), options=PlanOptions(microbatches=microbatches))
    t1 = time.perf_counter()
    options = SolverOptions(time_limit=time_limit, workers=workers, seed=0, gap_limit=gap)
    plan = solve(problem, options)
    t2 = time.perf_counter()
    rss_solve = _peak_rss()
    best_baseline(problem)
    t3 = time.perf_counter()
    solve(problem, replace(options, tie_break=False))
    t4 = time.perf_counter()
    cold = solve(problem, replace(options, tie_break=False, warm_start=False))
    t5 = time.perf_counter()
    cert = plan.certificate
    details = cert.solver
    fullest = max(plan.stages, key=lambda s: s.memory)
    live = stage_memory(graph, fullest.layers, in_flight=problem.options.kept_microbatches,
                        kv_context=graph.meta.get("kv_context"))
    return {
        "layers": problem.n_layers, "devices": problem.n_devices, "stages": len(plan.stages),
        "problem_s": t1 - t0, "solve_s": t2 - t1, "status": cert.status, "gap": cert.gap,
        "objective_ms": 1e3 * plan.bottleneck, "warm_s": t3 - t2, "bare_s": t4 - t3, "cold_s": t5 - t4,
        "cold_status": cold.certificate.status, "cold_gap": cold.certificate.gap,
        "cp_sat_s": getattr(details, "cp_sat_seconds", None), "solution": getattr(details, "solution", None),
        "tie_s": _tie_seconds(details.passes) if details is not None else 0.0,
        "ideals": getattr(details, "ideals", None), "pairs": getattr(details, "stage_pairs", None),
        "rss_gib": rss_solve / GIB, "rss_solve_gib": max(0, rss_solve - rss_before) / GIB,
        "stage_mem_gib": fullest.memory / GIB, "stage_live_gib": live.total / GIB,
        "stage_weights_gib": live.params / GIB,
    }


def plan_rung(time_limit: float, workers: int, microbatches: int) -> dict[str, Any]:
    """Build and plan the 10,000-operator rung (run in a child process); a JSON-able row."""
    from benchmarks.scale_graph import moe_decoder, pod_cluster
    from pipeplan.planner.ilp import SolverOptions, solve
    from pipeplan.planner.problem import PlanOptions, Problem

    t0 = time.perf_counter()
    graph = moe_decoder()
    t1 = time.perf_counter()
    problem = Problem(graph, pod_cluster(), options=PlanOptions(microbatches=microbatches))
    t2 = time.perf_counter()
    plan = solve(problem, SolverOptions(time_limit=time_limit, workers=workers, seed=0, gap_limit=0.01))
    t3 = time.perf_counter()
    cert = plan.certificate
    return {"layers": problem.n_layers, "devices": problem.n_devices, "params_gib": graph.total_param_bytes / GIB,
            "graph_s": t1 - t0, "problem_s": t2 - t1, "solve_s": t3 - t2, "status": cert.status, "gap": cert.gap,
            "stages": len(plan.stages), "rss_gib": _peak_rss() / GIB,
            "passes": cert.solver.passes if cert.solver is not None else []}


def capture(name: str, batch: int, seq_len: int, granularity: str, out: Path) -> dict[str, Any]:
    from pipeplan.costmodel.zoo import capture_model

    t0 = time.perf_counter()
    graph = capture_model(name, batch, granularity=granularity, seq_len=seq_len)
    seconds = time.perf_counter() - t0
    graph.save(out)
    return {"model": name, "capture_s": seconds, "params_gib": graph.total_param_bytes / GIB,
            "capture_rss_gib": _peak_rss() / GIB}


def _fmt(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in rows:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(h), *(len(line[i]) if i < len(line) else 0 for line in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for line in rows:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=False)))


def _child(args: list[str]) -> dict[str, Any] | str:
    """Run this script's child mode; its JSON row, or the last line of its error."""
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1]
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--clusters", default=",".join(CLUSTERS))
    p.add_argument("--batch", type=int, default=4, help="microbatch size (4)")
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--granularity", default="leaf")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--time-limit", type=float, default=10.0)
    p.add_argument("--gap", type=float, default=0.01)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--no-rung", action="store_true", help="skip the 10,000-operator rung")
    p.add_argument("--child", nargs=2, metavar=("GRAPH", "CLUSTER"), help=argparse.SUPPRESS)
    p.add_argument("--rung-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(plan_one(args.child[0], args.child[1], args.time_limit, args.gap, args.workers,
                                  args.microbatches)))
        return 0
    if args.rung_child:
        print(json.dumps(plan_rung(60.0, args.workers, args.microbatches)))
        return 0

    common = ["--time-limit", str(args.time_limit), "--gap", str(args.gap), "--workers", str(args.workers),
              "--microbatches", str(args.microbatches)]
    header = ["model", "params GiB", "capture s", "cluster", "layers", "problem s", "solve s", "warm start s",
              "CP-SAT s", "tie-break s", "rest s", "solve s, no tie-break", "cold s, no tie-break", "status", "gap",
              "stage pairs", "stages",
              "peak RSS GiB", "stage mem GiB (planner / liveness / weights)"]
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in [m for m in args.models.split(",") if m]:
            path = Path(tmp) / f"{name}.json"
            cap = capture(name, args.batch, args.seq_len, args.granularity, path)
            for cluster in args.clusters.split(","):
                r = _child(["--child", str(path), cluster, *common])
                if isinstance(r, str):
                    rows.append([name, "", "", cluster, r])
                    continue
                rest = max(0.0, r["solve_s"] - r["warm_s"] - (r["cp_sat_s"] or 0.0) - r["tie_s"])
                cold = f"{r['cold_s']:.2f} ({r['cold_status']}, {r['cold_gap']:.2%})"
                rows.append([name, f"{cap['params_gib']:.1f}", f"{cap['capture_s']:.1f}", cluster, str(r["layers"]),
                             f"{r['problem_s']:.2f}", f"{r['solve_s']:.2f}", f"{r['warm_s']:.2f}",
                             _fmt(r["cp_sat_s"], ".2f"), f"{r['tie_s']:.2f}", f"{rest:.2f}", f"{r['bare_s']:.2f}", cold,
                             r["status"], f"{r['gap']:.2%}", _fmt(r["pairs"], ","), str(r["stages"]),
                             f"{r['rss_gib']:.2f}",
                             f"{r['stage_mem_gib']:.1f} / {r['stage_live_gib']:.1f} / {r['stage_weights_gib']:.1f}"])
                print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    _table(header, rows, args.markdown)
    if not args.no_rung:
        r = _child(["--rung-child", *common])
        print()
        if isinstance(r, str):
            print(f"rung: {r}")
            return 0
        _table(["graph", "layers", "devices", "params GiB", "graph s", "problem s", "solve s", "status", "gap",
                "stages", "peak RSS GiB", "where the solve went"],
               [["moe-decoder (scale_graph.py)", str(r["layers"]), str(r["devices"]), f"{r['params_gib']:.0f}",
                 f"{r['graph_s']:.2f}", f"{r['problem_s']:.2f}", f"{r['solve_s']:.2f}", r["status"],
                 f"{r['gap']:.2%}", str(r["stages"]), f"{r['rss_gib']:.2f}", "; ".join(r["passes"])]], args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
