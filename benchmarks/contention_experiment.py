"""The experiment that proves the point: plan knowing the load, or blind to it, and run both for real.

On this machine's ``local-cpu`` cluster (one pipeline stage per CPU core), co-runner processes load
one core. The same model is planned twice with the ILP and the learned cost model: once knowing the
load (contention-aware) and once assuming idle cores (contention-blind). Where this CPU has a wake
model, a third plan is the one ``pipeplan plan`` chooses *as run* (:mod:`pipeplan.planner.as_run_choice`:
the aware plan, or the plan without the loaded core where its replay predicts that one faster); the
plan without the loaded core is then run too, whichever was chosen, to show whether the choice was
right.
The plans are then run for real by the executor with the co-runners started on the loaded core
(used by the plan or not), taking turns so that all see the same machine; the table shows each
plan's split, predicted and measured throughput, their ratio, and each stage's compute predicted
under the load against what was measured.

    python benchmarks/contention_experiment.py                     # tinygpt, batch 8, cpu0 = 2×compute
    python benchmarks/contention_experiment.py --model mlp --batch 64 --load 1xcompute --rounds 5

Targets: aware ≥ 1.3× the blind plan's measured throughput; per-stage prediction error ≤ 15%.
``--no-choice`` leaves the plan without the loaded core out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from dataclasses import replace

from rich.console import Console
from rich.table import Table

from pipeplan.costmodel.cluster import Cluster, load_cluster
from pipeplan.costmodel.corunners import CoRunners
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.registry import load_cost_model
from pipeplan.costmodel.source import capture_source
from pipeplan.costmodel.steadiness import measure_steadiness
from pipeplan.executor import RunOptions, RunReport, run_plan
from pipeplan.executor.as_run import plan_stage_loads
from pipeplan.planner.as_run_choice import choose_as_run
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.simulate import evaluate, make_plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tinygpt", help="a zoo name or a factory (module:function)")
    parser.add_argument("--batch", type=int, default=8, help="samples per microbatch (8)")
    parser.add_argument("--device", default="cpu0", help="the core to load (cpu0)")
    parser.add_argument("--load", default="2xcompute", help="its load (2xcompute)")
    parser.add_argument("--costmodel", default="learned", help="learned (default), analytic or a model file")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--batches", type=int, default=10, help="measured batches per run (10)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of runs, each plan once per round (3)")
    parser.add_argument("--no-choice", action="store_true", help="leave out the plan chosen as run")
    parser.add_argument("--calibrate", action="store_true",
                        help="record each run's stage times in the calibration store ($PIPEPLAN_CALIBRATION), as "
                             "`pipeplan run` does; off by default, so that an experiment leaves the user's store alone")
    parser.add_argument("--json", metavar="FILE", help="append this experiment's figures to FILE as one JSON "
                        "line: each plan's stages as the replay takes them, measured throughput and computes")
    args = parser.parse_args()
    console = Console(width=150)

    graph = capture_source(args.model, args.batch)
    idle = load_cluster("local-cpu")
    loaded = idle.with_load(args.device, Contention.parse(args.load))
    model = load_cost_model(args.costmodel)
    options = PlanOptions(microbatches=args.microbatches)
    solver = SolverOptions(time_limit=20, seed=0)
    aware_problem = Problem(graph, loaded, model, options)
    plans: dict[str, Plan] = {
        "aware": solve(aware_problem, solver),
        "blind": solve(Problem(graph, idle, model, options), solver),
    }
    choice = None if args.no_choice else choose_as_run(aware_problem, solver, first=plans["aware"])
    chosen = "aware"
    if choice is not None and len(choice.candidates) > 1:  # run both, to see whether the choice was right
        plans[f"without {args.device}"] = choice.candidates[1].plan
        chosen = "aware" if choice.chosen is choice.candidates[0] else f"without {args.device}"
    # What each plan is predicted to do on the loaded cluster (the blind plan's own figures assume idle).
    predicted = {name: evaluate(aware_problem, plan.assignment(), plan.device_order()).bottleneck
                 for name, plan in plans.items()}
    console.print(f"{args.model} (batch {args.batch}, {len(graph.layers)}"
                  f" layers) on local-cpu with {args.device} = {args.load}; cost model {model.name}")

    if choice is not None:
        console.print(choice.summary())
    throughput: dict[str, list[float]] = {name: [] for name in plans}
    last = {}
    measured: dict[tuple[str, int], list[float]] = {}  # (plan, stage) → compute per round
    for round_ in range(args.rounds):
        names = list(plans)
        for name in names if round_ % 2 == 0 else names[::-1]:
            report = _run_loaded(plans[name], loaded, args)
            assert report is not None
            throughput[name].append(report.throughput)
            last[name] = report
            for s in report.stages:
                measured.setdefault((name, s.index), []).append(s.measured["compute"])
            console.print(f"round {round_ + 1}: {name:5} {report.throughput:8.1f} samples/s "
                          f"(outputs equal the unsplit model's: {report.check['ok'] if report.check else 'unchecked'})")

    table = Table(title="contention-aware vs contention-blind plan, run for real", title_justify="left")
    for col in ("plan", "layers per stage (device)", "predicted bottleneck under load",
                "predicted samples/s", "as run", "measured samples/s (median)"):
        table.add_column(col, justify="left" if col.startswith(("plan", "layers")) else "right")
    for name, plan in plans.items():
        split = ", ".join(f"{len(s.layers)} ({s.device})" for s in plan.stages)
        as_run = last[name].predicted_throughput_as_run
        table.add_row(name, split, f"{predicted[name] * 1e3:.2f} ms", f"{plan.batch_size / predicted[name]:.0f}",
                      f"{as_run:.0f}" if as_run else "-", f"{statistics.median(throughput[name]):.0f}")
    console.print(table)
    for name in (n for n in plans if n != "blind"):
        ratio = statistics.median(throughput[name]) / statistics.median(throughput["blind"])
        console.print(f"{name} / blind measured throughput: {ratio:.2f}× (target ≥ 1.3×)")
    if choice is not None:
        best = max(plans, key=lambda n: statistics.median(throughput[n]))
        gain = statistics.median(throughput[chosen]) / statistics.median(throughput["blind"])
        verdict = "right" if best == chosen else f"wrong: {best} ran faster"
        console.print(f"chosen as run: {chosen} ({verdict}); chosen / blind {gain:.2f}×")

    stages = Table(title="per stage: compute predicted under the run's load (back to back, and as run: waits "
                   "priced by the wake model) vs measured (median of the rounds)", title_justify="left")
    for col in ("plan", "stage", "device", "load", "back to back ms", "error", "as run ms", "error", "measured ms"):
        stages.add_column(col, justify="right" if col not in ("plan", "device", "load") else "left")
    errors: dict[str, list[float]] = {"back to back": [], "as run": []}
    for name, report in last.items():
        for s in report.stages:
            if not s.predicted_at_load:
                continue
            as_run = s.predicted_at_load["compute"]
            b2b = s.predicted_at_load.get("back_to_back", as_run)
            m = statistics.median(measured[(name, s.index)])
            errors["back to back"].append(abs(b2b - m) / m)
            errors["as run"].append(abs(as_run - m) / m)
            stages.add_row(name, str(s.index), s.device, s.load or "idle", f"{b2b * 1e3:.2f}", f"{(b2b - m) / m:+.0%}",
                           f"{as_run * 1e3:.2f}", f"{(as_run - m) / m:+.0%}", f"{m * 1e3:.2f}")
    console.print(stages)
    for kind, errs in errors.items():
        if errs:
            console.print(f"{kind}: mean |error| of per-stage compute {statistics.mean(errs):.0%}, "
                          f"median {statistics.median(errs):.0%} (target ≤ 15%)")
    notes = sorted({n for report in last.values() for n in report.notes if "wait" in n})
    for note in notes:
        console.print(f"note: {note}")
    console.print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
                  f"{measure_steadiness().describe()}")
    if args.json:
        _append_json(args, aware_problem, plans, chosen, throughput, measured)


def _append_json(args: argparse.Namespace, problem: Problem, plans: dict[str, Plan], chosen: str,
                 throughput: dict[str, list[float]], measured: dict[tuple[str, int], list[float]]) -> None:
    """One line of figures for replaying the experiment offline (``executor.as_run.simulate_as_run``)."""
    record = {"model": args.model, "batch": args.batch, "device": args.device, "load": args.load,
              "microbatches": args.microbatches, "batches": args.batches, "chosen": chosen, "plans": {}}
    for name, plan in plans.items():
        # every plan as it runs on the loaded cluster: the blind plan's own figures assume idle cores
        as_asked = make_plan(problem, plan.assignment(), plan.certificate, order=plan.device_order())
        stages = plan_stage_loads(problem, as_asked)
        if stages is None:  # not a plan the replay covers (another host, borrowed memory)
            continue
        record["plans"][name] = {
            "devices": plan.device_order(),
            "stages": [{"idle": s.idle, "loaded": s.loaded, "recv": s.recv,
                        "load": s.load.describe() if s.load is not None else None} for s in stages],
            "throughput": throughput[name],
            "computes": [measured[(name, k)] for k in range(len(plan.stages))],
        }
    with open(args.json, "a") as sink:
        sink.write(json.dumps(record) + "\n")


def _run_loaded(plan: Plan, cluster: Cluster, args: argparse.Namespace) -> RunReport:
    """Run ``plan`` with the co-runners on the loaded core: through the executor's ``loads`` where a
    stage runs there, else started here for the run (the machine is the same whichever plan runs)."""
    options = RunOptions(batches=args.batches, microbatches=args.microbatches, costmodel=args.costmodel,
                         calibrate=args.calibrate)
    if args.device in plan.device_order():
        report = run_plan(plan, options=replace(options, loads={args.device: args.load}))
    else:
        corunners = CoRunners(Contention.parse(args.load), cores=list(cluster.device(args.device).cores or [])).start()
        try:
            report = run_plan(plan, options=options)
        finally:
            corunners.stop()
    assert report is not None  # run here, not under torchrun
    return report


if __name__ == "__main__":
    main()
