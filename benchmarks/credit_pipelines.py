"""Reference pipelines with a load on one stage, recorded: the data behind a wake model's ``pipeline_credit``.

The wake probe (``pipeplan costmodel wake``) runs eight of these per load and keeps only the share
of the credit it fits; this script runs a wider set, as often as asked, and writes every run as one
JSON line (``CreditSample``'s fields, plus the cut and the rows) for ``replay_as_run.py``:

    python benchmarks/credit_pipelines.py --levels 2xcompute,1xcompute --repeats 2 --out runs.jsonl
    python benchmarks/replay_as_run.py runs.jsonl

Each run: the probe's reference workload of 8 blocks cut in two, both stage modules timed back to
back on their cores (the loaded one also beside the load's co-runners), then run by the executor
(gloo, gpipe, 4 microbatches) with the co-runners on the loaded stage's core.
``benchmarks/results-credit-share/reference-pipelines.jsonl`` holds 48 such runs on the Zen 4 VM
(2026-11-24 14:01, made by an earlier draft of this script with 10 batches a run).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict

from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.wake import find_wake_model
from pipeplan.costmodel.wake_pipeline import measure_pipeline_credit

# (blocks before the cut, after it, rows, loaded stage): the probe's eight and four more
PIPELINES = ((1, 7, 32, 0), (2, 6, 32, 0), (4, 4, 32, 0), (2, 6, 128, 0), (4, 4, 128, 0), (6, 2, 64, 0),
             (7, 1, 32, 1), (6, 2, 32, 1), (4, 4, 32, 1), (6, 2, 128, 1), (4, 4, 128, 1), (2, 6, 64, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="2xcompute,1xcompute", help="loads on the loaded stage's core")
    parser.add_argument("--repeats", type=int, default=1, help="times through every pipeline (1)")
    parser.add_argument("--batches", type=int, default=10, help="measured batches per run (10)")
    parser.add_argument("--out", required=True, help="JSON-lines file to append the runs to")
    args = parser.parse_args()
    wake = find_wake_model()
    if wake is None:
        parser.error("this CPU has no wake model to fit a share against: run `pipeplan costmodel wake` first")
    cores = sorted(os.sched_getaffinity(0))[:2]
    levels = [Contention.parse(text) for text in args.levels.split(",")]
    for repeat in range(args.repeats):
        shares, samples = measure_pipeline_credit(wake, levels, cores, pipelines=PIPELINES, batches=args.batches,
                                                  progress=print)
        with open(args.out, "a") as sink:
            for (before, after, rows, _), sample in zip(PIPELINES * len(levels), samples, strict=True):
                sink.write(json.dumps({**asdict(sample), "blocks": [before, after], "rows": rows}) + "\n")
        print(f"repeat {repeat + 1}: shares fitted to its runs {shares}; appended to {args.out}")


if __name__ == "__main__":
    main()
