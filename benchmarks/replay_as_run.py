"""Replay recorded pipeline runs with a wake model, offline: how well it predicts them, and what it would choose.

Two kinds of records (JSON lines), both written by real runs on this project's VMs:

- contention experiments (``contention_experiment.py --json FILE``): each plan's stages as the replay
  takes them, its measured throughput per round and each stage's measured compute;
- reference pipelines under a load on one stage (``CreditSample`` fields of
  ``costmodel/wake_pipeline.py``, as ``benchmarks/results-credit-share/reference-pipelines.jsonl``).

For the first, the table shows each plan's replayed and measured samples/s, whether the replay
picks the faster of the aware plan and the plan without the loaded core (within 3% counts), and
each stage's error; for the second, the loaded stage's error and the share of the credit that fits
them (``fit_pipeline_credit``).  ``--whole-credit`` replays as before the share was measured.

    python benchmarks/replay_as_run.py benchmarks/results-credit-share/heldout-third.jsonl
    python benchmarks/replay_as_run.py benchmarks/results-credit-share/*.jsonl --whole-credit
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.wake import WakeModel, find_wake_model, log_rms
from pipeplan.costmodel.wake_pipeline import CreditSample, fit_pipeline_credit, replay_loaded_stage
from pipeplan.executor.as_run import StageLoad, simulate_as_run

_TIE = 0.97  # a choice within 3% of the better plan's measured throughput counts as right


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", nargs="+", help="JSON-lines files of recorded runs")
    parser.add_argument("--wake", metavar="FILE", help="the wake model to replay with (default: this CPU's)")
    parser.add_argument("--whole-credit", action="store_true", help="ignore the model's pipeline_credit shares")
    args = parser.parse_args()
    console = Console(width=150)
    wake = WakeModel.load(args.wake) if args.wake else find_wake_model()
    if wake is None:
        parser.error("this CPU has no wake model: name one with --wake")
    if args.whole_credit:
        wake = replace(wake, pipeline_credit={})
    console.print(f"wake model of {wake.cpu} ({wake.source}); shares of the credit in a pipeline: "
                  f"{wake.pipeline_credit or 'none (the whole credit)'}")
    experiments: list[dict[str, Any]] = []
    samples: list[CreditSample] = []
    for path in args.records:
        for line in Path(path).read_text().splitlines():
            record = json.loads(line)
            if "plans" in record:
                experiments.append(record)
            else:
                samples.append(CreditSample(record["level"], record["loaded_stage"], tuple(record["idle"]),
                                            tuple(record["loaded"]), tuple(record["recv"]),
                                            tuple(record["measured"]), record["batches"]))
    if experiments:
        _experiments(console, wake, experiments)
    if samples:
        _samples(console, wake, samples)


def _replay(wake: WakeModel, record: dict[str, Any], plan: dict[str, Any]) -> tuple[float, list[float]]:
    stages = [StageLoad(s["idle"], s["loaded"], s["recv"], Contention.parse(s["load"]) if s["load"] else None)
              for s in plan["stages"]]
    run = simulate_as_run(wake, stages, record["microbatches"], "gpipe", batches=record["batches"], warmup=1)
    return record["microbatches"] * record["batch"] / run.batch_seconds, run.computes


def _experiments(console: Console, wake: WakeModel, experiments: list[dict[str, Any]]) -> None:
    table = Table(title="contention experiments replayed: samples/s replayed / measured (median of rounds)",
                  title_justify="left")
    for col in ("model @ batch", "aware", "without the loaded core", "blind", "replay picks", "right?",
                "stage errors (aware, without)"):
        table.add_column(col, justify="left" if col in ("model @ batch", "replay picks", "right?") else "right")
    rights, throughput_errors, stage_errors = 0, [], []
    for record in experiments:
        plans = record["plans"]
        replayed = {name: _replay(wake, record, plan) for name, plan in plans.items()
                    if name != "blind" and plan["stages"]}
        measured = {name: statistics.median(plan["throughput"]) for name, plan in plans.items()}
        errors = []
        for name, (samples_per_s, computes) in replayed.items():
            throughput_errors.append(samples_per_s / measured[name] - 1)
            errors += [c / statistics.median(m) - 1 for c, m in zip(computes, plans[name]["computes"], strict=True)]
        stage_errors += errors
        picked = max(replayed, key=lambda n: replayed[n][0])
        right = measured[picked] >= _TIE * max(measured[n] for n in replayed)
        rights += right
        without = next((n for n in plans if n.startswith("without")), "")
        cells = [_cell(replayed, measured, name) for name in ("aware", without, "blind")]
        table.add_row(f"{record['model'].split(':')[-1]} @ {record['batch']}", *cells, picked,
                      "yes" if right else "no", ", ".join(f"{e:+.0%}" for e in errors))
    console.print(table)
    console.print(f"replay picks the faster plan in {rights} of {len(experiments)}; throughput median |error| "
                  f"{_median_abs(throughput_errors):.0%}; per-stage compute median |error| "
                  f"{_median_abs(stage_errors):.0%} over {len(stage_errors)} stages")


def _cell(replayed: dict[str, tuple[float, list[float]]], measured: dict[str, float], name: str) -> str:
    """``replayed / measured`` samples/s of one plan ('-' where a figure is missing)."""
    if name not in measured:
        return "-"
    return f"{replayed[name][0]:.0f} / {measured[name]:.0f}" if name in replayed else f"- / {measured[name]:.0f}"


def _samples(console: Console, wake: WakeModel, samples: list[CreditSample]) -> None:
    pairs = [(replay_loaded_stage(wake, s), s.measured[s.loaded_stage]) for s in samples]
    errors = [p / m - 1 for p, m in pairs]
    rms = log_rms(pairs)
    console.print(f"{len(samples)} reference pipelines: the loaded stage's compute replayed {_median_abs(errors):.0%} "
                  f"off in the median (log RMS {rms:.3f}); the shares that fit them best: "
                  f"{fit_pipeline_credit(wake, samples)}")


def _median_abs(values: list[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else float("nan")


if __name__ == "__main__":
    main()
