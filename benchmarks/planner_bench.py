"""The ILP planner against the baselines and the targets of the planner issue.

Targets: a proven optimum (gap ≤ 1%) in ≤ 2 s for graphs up to 350 layers, and in ≤ 10 s for 1,000
layers on 8 devices; never worse than any baseline.  Graphs: captured zoo models (leaf and block
granularity), an Inception-style branchy CNN, and seeded random layered DAGs of 50–1,000 layers.
Clusters: 4 heterogeneous devices (``hetero-a100-t4``) and 8 devices on 2 hosts (``8gpu-2hosts``),
each with one compute-bound co-runner on ``gpu2``.

Prints a table; not a test.  Run: ``.venv/bin/python benchmarks/planner_bench.py [--quick]``
(the full run, 60 cases, takes about a minute on 2 cores, most of it graph capture and the few cases
where CP-SAT runs; ``--quick`` a few seconds).

``time s`` is the wall time of :func:`pipeplan.planner.ilp.solve`: the baselines of the warm start, the stage
program of :mod:`pipeplan.planner.bound`, model building and CP-SAT; ``CP-SAT s`` is CP-SAT's own, of
which ``presolve s`` passed before the search began ("-": CP-SAT did not run because the stage
program's bound already proved the plan, or the time limit struck during presolve).  ``sol s`` is
when CP-SAT found its last improving solution ("hint": none but its hint), read from its search
log: with the gap it shows whether the time goes into finding the plan or into closing the bound.
``gap`` is recomputed from the certificate's objective and best bound.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

from ortools.sat.python import cp_model
from rich.console import Console
from rich.table import Table

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import Cluster, load_cluster
from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.costmodel.hardware import Contention
from pipeplan.planner.baselines import BASELINES
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.problem import CommMode, PlanError, PlanOptions, Problem

RANDOM_SIZES = (50, 100, 200, 350, 500, 1000)
ZOO_MODELS = ("gpt2", "bert-base", "vit-base", "resnet-50")
LOADED_DEVICE = "gpu2"
SMALL_LIMIT = 350  # layers: the 2 s target applies up to here
SMALL_SECONDS, LARGE_SECONDS = 2.0, 10.0
LARGE_LAYERS, LARGE_DEVICES = 1000, 8


# -- graphs -----------------------------------------------------------------------------------------


def _log_uniform(rng: random.Random, low: float, high: float) -> int:
    return int(math.exp(rng.uniform(math.log(low), math.log(high))))


def random_dag(n: int, seed: int = 0) -> ModelGraph:
    """A layered DAG that looks like a network: a backbone chain, residual skips spanning 2–6 layers,
    and short parallel branches (2–3 branches of 1–3 layers, joined by a concat).

    Costs are drawn log-uniform: FLOPs 1e7–1e10, bytes read/written 1e5–1e8, activations 1e5–1e7;
    40% of the layers (glue: adds, activations) hold no parameters, the others 1e4–5e7 bytes.  An
    edge carries its producer's activation bytes.
    """
    rng = random.Random(seed)
    graph = ModelGraph(f"random-{n}", batch_size=1, meta={"seed": seed})
    acts: list[int] = []

    def add(kind: str, preds: list[int]) -> int:
        v = len(acts)
        act = _log_uniform(rng, 1e5, 1e7)
        params = 0 if kind in ("add", "concat") or rng.random() < 0.4 else _log_uniform(rng, 1e4, 5e7)
        written = max(act, _log_uniform(rng, 1e5, 1e8))  # a layer writes at least its output
        graph.add_layer(Layer(f"l{v}", kind, "Random", v, _log_uniform(rng, 1e7, 1e10),
                              _log_uniform(rng, 1e5, 1e8), written, params, act, rng.randint(1, 4)))
        acts.append(act)
        for u in preds:
            graph.add_edge(f"l{u}", f"l{v}", acts[u])
        return v

    last = add("linear", [])
    while len(acts) < n:
        left = n - len(acts)
        roll = rng.random()
        if roll < 0.15 and left >= 4:  # parallel branches joined by a concat
            width = rng.randint(2, 3)
            depth = max(1, min(rng.randint(1, 3), (left - 1) // width))
            ends = []
            for _ in range(width):
                tip = last
                for _ in range(depth):
                    tip = add("conv", [tip])
                ends.append(tip)
            last = add("concat", ends)
        elif roll < 0.40 and len(acts) >= 2:  # a residual add reaching back 2–6 layers
            span = min(rng.randint(2, 6), len(acts))
            last = add("add", sorted({last, len(acts) - span}))
        else:
            last = add("linear", [last])
    graph.validate()
    return graph


@dataclass(frozen=True)
class GraphCase:
    name: str
    build: Callable[[], ModelGraph]


def graph_cases(quick: bool) -> list[GraphCase]:
    from pipeplan.costmodel.zoo import capture_model  # torch and transformers: only when a zoo graph is wanted

    def zoo(model: str, batch: int, granularity: str) -> Callable[[], ModelGraph]:
        return lambda: capture_model(model, batch, granularity=granularity)

    if quick:
        return [GraphCase("random-50", partial(random_dag, 50)), GraphCase("random-200", partial(random_dag, 200)),
                GraphCase("resnet-50/block", zoo("resnet-50", 1, "block"))]
    cases = [GraphCase(f"{m}/{g}", zoo(m, 1, g)) for g in ("block", "leaf") for m in ZOO_MODELS]
    cases.append(GraphCase("inception/leaf", zoo("inception", 8, "leaf")))
    cases += [GraphCase(f"random-{n}", partial(random_dag, n)) for n in RANDOM_SIZES]
    return cases


def clusters() -> list[tuple[str, Cluster]]:
    loaded = Contention(corunners=1, kind="compute")
    return [(f"{name}+{LOADED_DEVICE}:1xcompute", load_cluster(name).with_load(LOADED_DEVICE, loaded))
            for name in ("hetero-a100-t4", "8gpu-2hosts")]


# -- the solver's search log ------------------------------------------------------------------------

_SOLUTION = re.compile(r"^#(\d+)\s+([\d.]+)s\s+best:([-\d.e+]+)")
_SEARCH = re.compile(r"^Starting search at ([\d.]+)s")
_WALLTIME = re.compile(r"^walltime: ([\d.]+)")


@dataclass
class SearchTrace:
    """What CP-SAT's search log says about one solve: when each improving solution came."""

    solutions: list[tuple[float, float]] = field(default_factory=list)  # (seconds, objective in ticks)
    first_hinted: bool = False  # the first solution logged came from the warm-start hint
    search_start: float | None = None  # seconds of presolve before the search began
    walltime: float | None = None  # seconds CP-SAT ran, presolve included
    lines: list[str] = field(default_factory=list)

    def line(self, message: str) -> None:
        for text in message.splitlines():  # one message may hold several lines (the final summary)
            self._read(text)

    def _read(self, text: str) -> None:
        self.lines.append(text)
        if match := _SOLUTION.match(text):
            self.solutions.append((float(match[2]), float(match[3])))
            if len(self.solutions) == 1:
                self.first_hinted = "[hint]" in text
        elif match := _SEARCH.match(text):
            self.search_start = float(match[1])
        elif match := _WALLTIME.match(text):
            self.walltime = float(match[1])

    @property
    def last_solution(self) -> float | None:
        """Seconds into the solve of the last improvement; None when CP-SAT only had the warm start.

        CP-SAT tags with ``[hint]`` every solution a hint-guided heuristic finds, improvements too, so
        only a lone first solution so tagged counts as the warm start itself.
        """
        if not self.solutions or (len(self.solutions) == 1 and self.first_hinted):
            return None
        return self.solutions[-1][0]


@contextmanager
def traced_solver() -> Iterator[SearchTrace]:
    """Record the search log of the CP-SAT solve that :func:`pipeplan.planner.ilp.solve` runs inside this block.

    ``solve`` takes no callback, so the benchmark swaps in a CpSolver that logs to ``trace``; the
    search itself is unchanged (logging costs a few lines of text per improvement).
    """
    trace = SearchTrace()
    original = cp_model.CpSolver

    class Traced(original):  # type: ignore[misc, valid-type]  # a subclass of whichever CpSolver is there
        def solve(self, model: cp_model.CpModel, *args: object, **kwargs: object) -> object:
            self.parameters.log_search_progress = True
            self.parameters.log_to_stdout = False
            self.log_callback = trace.line
            return super().solve(model, *args, **kwargs)

    cp_model.CpSolver = Traced  # type: ignore[misc]
    try:
        yield trace
    finally:
        cp_model.CpSolver = original  # type: ignore[misc]


# -- one case ---------------------------------------------------------------------------------------


@dataclass
class Result:
    case: str
    nodes: int
    edges: int
    devices: int
    comm: str
    status: str = "-"
    seconds: float = math.nan
    cp_sat: float | None = None
    presolve: float | None = None
    last_solution: float | None = None
    gap: float = math.nan  # (objective − best bound) / objective, from the certificate's numbers
    ilp: float = math.nan
    from_warm_start: bool = False
    from_program: bool = False  # the plan is the stage program's (pipeplan.planner.bound)
    cp_sat_run: bool = True  # False: the stage program's bound proved the plan, CP-SAT never ran
    best_name: str = "-"
    best: float = math.nan
    lower_bound: float = math.nan
    beats_all: bool | None = None
    error: str | None = None

    @property
    def met(self) -> bool | None:
        """Whether this case meets its time target (None when no target covers it)."""
        if self.nodes <= SMALL_LIMIT:
            limit = SMALL_SECONDS
        elif self.nodes >= LARGE_LAYERS and self.devices >= LARGE_DEVICES:
            limit = LARGE_SECONDS
        else:
            return None
        return self.gap <= 0.01 + 1e-12 and self.seconds <= limit


def run_case(name: str, graph: ModelGraph, cluster: Cluster, comm: CommMode, opts: SolverOptions) -> Result:
    problem = Problem(graph, cluster, RooflineModel(), PlanOptions(comm=comm, microbatches=4))
    result = Result(name, problem.n_layers, len(problem.edges), problem.n_devices, comm,
                    lower_bound=problem.lower_bound())
    scores: dict[str, float] = {}
    for label, baseline in BASELINES.items():
        try:
            scores[label] = baseline(problem).bottleneck
        except PlanError:
            scores[label] = math.inf  # does not fit in memory
    result.best_name = min(scores, key=lambda k: scores[k])
    result.best = scores[result.best_name]
    started = time.perf_counter()
    try:
        with traced_solver() as trace:
            plan = solve(problem, opts)
    except PlanError as exc:
        result.seconds = time.perf_counter() - started
        result.error = str(exc)
        return result
    result.seconds = time.perf_counter() - started
    cert = plan.certificate
    result.status = cert.status
    result.ilp = plan.bottleneck
    # The certificate's own gap field reads 0 whenever CP-SAT says OPTIMAL, which it also says when
    # it stops at the gap limit; recompute it from the objective and the best bound.
    bound = cert.best_bound if cert.best_bound is not None else 0.0
    result.gap = max(0.0, (cert.objective - bound) / cert.objective) if cert.objective > 0 else 0.0
    source = cert.solver.solution if cert.solver else ""
    result.from_warm_start = source.startswith("warm start")
    result.from_program = source.startswith("stage program")
    result.cp_sat_run = cert.solver is not None and not cert.solver.solver_status.startswith("not run")
    result.last_solution = trace.last_solution
    result.presolve = trace.search_start
    result.cp_sat = trace.walltime
    result.beats_all = all(plan.bottleneck <= s * (1 + 1e-9) for s in scores.values())
    return result


# -- report -----------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return "-" if not math.isfinite(seconds) else f"{seconds * 1e3:.3f}"


def _ratio(a: float, b: float) -> str:
    return "-" if not (math.isfinite(a) and math.isfinite(b) and b > 0) else f"{a / b:.3f}"


def _yes(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "NO")


COLUMNS = ("case", "nodes", "edges", "dev", "comm", "status", "time s", "CP-SAT s", "presolve s", "sol s",
           "gap %", "ILP ms", "best baseline", "baseline ms", "base/ILP", "ILP/LB", "ILP ≤ all", "target")


def _secs(seconds: float | None, missing: str = "-") -> str:
    return missing if seconds is None else f"{seconds:.2f}"


def row(r: Result) -> list[str]:
    head = [r.case, str(r.nodes), str(r.edges), str(r.devices), r.comm]
    if r.error is not None:
        return [*head, "ERROR", _secs(r.seconds), "-", "-", "-", "-", "-", r.best_name, _ms(r.best), "-", "-", "-",
                r.error[:60]]
    ilp = _ms(r.ilp) + ("*" if r.from_warm_start else "†" if r.from_program else "")
    solution = _secs(r.last_solution, "hint") if r.cp_sat_run else "-"
    return [*head, r.status, _secs(r.seconds), _secs(r.cp_sat), _secs(r.presolve), solution,
            f"{100 * r.gap:.2f}", ilp, r.best_name, _ms(r.best), _ratio(r.best, r.ilp),
            _ratio(r.ilp, r.lower_bound), _yes(r.beats_all), _yes(r.met)]


def summary(results: list[Result]) -> list[str]:
    ok = [r for r in results if r.error is None]
    small = [r for r in results if r.nodes <= SMALL_LIMIT]
    large = [r for r in results if r.nodes >= LARGE_LAYERS and r.devices >= LARGE_DEVICES]
    lines = [
        f"gap ≤ 1% within {SMALL_SECONDS:g} s (≤ {SMALL_LIMIT} nodes): {sum(bool(r.met) for r in small)}/{len(small)}",
        f"gap ≤ 1% within {LARGE_SECONDS:g} s ({LARGE_LAYERS} nodes, {LARGE_DEVICES} devices): "
        f"{sum(bool(r.met) for r in large)}/{len(large)}",
        f"proven within 1% at any time: {sum(r.gap <= 0.01 + 1e-12 for r in ok)}"
        f"/{len(results)}",
        f"ILP ≤ every baseline: {sum(bool(r.beats_all) for r in ok)}/{len(results)}; "
        f"ILP strictly better than the best baseline (> 0.1%): {sum(r.best > r.ilp * 1.001 for r in ok)}"
        f"/{len(results)}; ILP plan is the warm start (*): {sum(r.from_warm_start for r in ok)}, "
        f"the stage program's (†): {sum(r.from_program for r in ok)}",
        f"proven by the stage program's bound alone, CP-SAT not run: {sum(not r.cp_sat_run for r in ok)}"
        f"/{len(results)}",
    ]
    if len(ok) < len(results):
        lines.append(f"errors: {len(results) - len(ok)}")
    return lines


def markdown(results: list[Result]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join("---" if c in ("case", "comm", "status", "best baseline") else "---:"
                            for c in COLUMNS) + "|"]
    lines += ["| " + " | ".join(row(r)) + " |" for r in results]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="random-50, random-200 and resnet-50/block, overlap only (a few seconds)")
    parser.add_argument("--only", metavar="PATTERN",
                        help="run cases whose name matches this glob, e.g. 'random-*' or '*gpt2*'")
    parser.add_argument("--time-limit", type=float, default=10.0, help="CP-SAT time limit in seconds")
    parser.add_argument("--gap", type=float, default=0.01, help="stop at this relative gap (0.01 = 1%%)")
    parser.add_argument("--workers", type=int, default=2, help="CP-SAT workers")
    parser.add_argument("--markdown", action="store_true", help="also print the table as markdown")
    args = parser.parse_args()
    opts = SolverOptions(time_limit=args.time_limit, workers=args.workers, seed=0, gap_limit=args.gap)
    comms: tuple[CommMode, ...] = ("overlap",) if args.quick else ("overlap", "serial")
    console = Console(width=200)
    table = Table(title=f"ILP (CP-SAT, {args.workers} workers, limit {args.time_limit:g} s, gap {args.gap:.0%}) "
                        "against baselines; objective throughput, 4 microbatches")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("case", "comm", "status", "best baseline") else "right")
    results: list[Result] = []
    for case in graph_cases(args.quick):
        if args.only and not fnmatch.fnmatch(case.name, args.only):
            continue
        graph = case.build()
        for cluster_name, cluster in clusters():
            for comm in comms:
                result = run_case(case.name, graph, cluster, comm, opts)
                results.append(result)
                table.add_row(*row(result))
                console.print(f"[dim]{case.name} on {cluster_name}, {comm}: {result.status} "
                              f"{result.seconds:.2f}s gap {100 * result.gap:.2f}%[/dim]")
    console.print(table)
    console.print("* the ILP returned its warm start (the best baseline), † the stage program's plan: "
                  "CP-SAT found nothing better in time, or was not needed")
    for line in summary(results):
        console.print(line)
    if args.markdown:
        console.print(markdown(results), soft_wrap=True, markup=False)


if __name__ == "__main__":
    main()
