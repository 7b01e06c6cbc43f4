"""LLM-scale planning: capture time, plan time, gap and peak memory for 7B / 13B / 70B decoders.

    .venv/bin/python benchmarks/llm_scale.py                 # llama-7b, -13b, -70b on 4 and 8 devices
    .venv/bin/python benchmarks/llm_scale.py --models llama-7b --clusters hetero-a100-t4 --markdown

Each model is built on the meta device (costmodel.zoo.llm: no weights), captured once at the given
granularity (timed), saved as graph JSON, and planned by ``planner.ilp.solve`` in a fresh child
process per cluster, so that the child's peak RSS is the planner's own (Python, OR-Tools and the
graph included; the capture's memory is the parent's).  The table says where the plan's time goes:
building the :class:`planner.problem.Problem` (cost model and memory terms), and the solve, split
into CP-SAT's own time and the rest (warm start, stage program, exact passes), from the plan's
certificate.  Memory columns compare the planner's memory figure for the fullest stage with the
liveness figure of :func:`costmodel.memory.stage_memory` for the same stage.

Targets (issue 19): proven within 1% in ≤ 2 s on 2 cores.  This script asserts nothing; it prints.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODELS = ("llama-7b", "llama-13b", "llama-70b")
CLUSTERS = ("hetero-a100-t4", "8gpu-2hosts")
GIB = 2**30


def _peak_rss() -> int:
    """Bytes: the largest resident set this process has had (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def plan_one(graph_path: str, cluster: str, time_limit: float, gap: float, workers: int,
             microbatches: int) -> dict[str, Any]:
    """Plan one saved graph on one cluster (run in a child process); a JSON-able row."""
    from costmodel.graph import ModelGraph
    from costmodel.memory import stage_memory
    from planner.cluster import load_cluster
    from planner.ilp import SolverOptions, solve
    from planner.problem import PlanOptions, Problem

    graph = ModelGraph.load(graph_path)
    rss_before = _peak_rss()
    t0 = time.perf_counter()
    problem = Problem(graph, load_cluster(cluster), options=PlanOptions(microbatches=microbatches))
    t1 = time.perf_counter()
    plan = solve(problem, SolverOptions(time_limit=time_limit, workers=workers, seed=0, gap_limit=gap))
    t2 = time.perf_counter()
    cert = plan.certificate
    details = getattr(cert, "solver", None)
    fullest = max(plan.stages, key=lambda s: s.memory)
    live = stage_memory(graph, fullest.layers, in_flight=problem.options.kept_microbatches,
                        kv_context=graph.meta.get("kv_context"))
    return {
        "layers": problem.n_layers, "devices": problem.n_devices, "stages": len(plan.stages),
        "problem_s": t1 - t0, "solve_s": t2 - t1, "status": cert.status, "gap": cert.gap,
        "objective_ms": 1e3 * plan.bottleneck,
        "cp_sat_s": getattr(details, "cp_sat_seconds", None), "solution": getattr(details, "solution", None),
        "ideals": getattr(details, "ideals", None), "variables": getattr(details, "variables", None),
        "rss_gib": _peak_rss() / GIB, "rss_solve_gib": max(0, _peak_rss() - rss_before) / GIB,
        "stage_mem_gib": fullest.memory / GIB, "stage_live_gib": live.total / GIB,
        "stage_weights_gib": live.params / GIB,
    }


def capture(name: str, batch: int, seq_len: int, granularity: str, out: Path) -> dict[str, Any]:
    from costmodel.zoo import capture_model

    t0 = time.perf_counter()
    graph = capture_model(name, batch, granularity=granularity, seq_len=seq_len)
    seconds = time.perf_counter() - t0
    graph.save(out)
    return {"model": name, "capture_s": seconds, "params_gib": graph.total_param_bytes / GIB,
            "capture_rss_gib": _peak_rss() / GIB}


def _fmt(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


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
    p.add_argument("--child", nargs=2, metavar=("GRAPH", "CLUSTER"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        row = plan_one(args.child[0], args.child[1], args.time_limit, args.gap, args.workers, args.microbatches)
        print(json.dumps(row))
        return 0

    header = ["model", "params GiB", "capture s", "cluster", "layers", "problem s", "solve s", "CP-SAT s",
              "status", "gap", "stages", "peak RSS GiB", "stage mem GiB (planner / liveness / weights)"]
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = Path(tmp) / f"{name}.json"
            cap = capture(name, args.batch, args.seq_len, args.granularity, path)
            for cluster in args.clusters.split(","):
                cmd = [sys.executable, __file__, "--child", str(path), cluster, "--time-limit", str(args.time_limit),
                       "--gap", str(args.gap), "--workers", str(args.workers),
                       "--microbatches", str(args.microbatches)]
                done = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    rows.append([name, "", "", cluster, "failed: " + done.stderr.strip().splitlines()[-1]])
                    continue
                r = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append([name, f"{cap['params_gib']:.1f}", f"{cap['capture_s']:.1f}", cluster, str(r["layers"]),
                             f"{r['problem_s']:.2f}", f"{r['solve_s']:.2f}", _fmt(r["cp_sat_s"], ".2f"),
                             r["status"], f"{r['gap']:.2%}", str(r["stages"]), f"{r['rss_gib']:.2f}",
                             f"{r['stage_mem_gib']:.1f} / {r['stage_live_gib']:.1f} / {r['stage_weights_gib']:.1f}"])
                print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in rows:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(h), *(len(line[i]) if i < len(line) else 0 for line in rows)) for i, h in enumerate(header)]
        print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
        for line in rows:
            print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=False)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
