"""A live switch's pause and bytes moved, under a steady request stream, on this machine's CPU cores.

    taskset -c 1 .venv/bin/python benchmarks/elastic_switch.py                  # mlp, 2 one-core devices
    taskset -c 1 .venv/bin/python benchmarks/elastic_switch.py --model tinygpt --requests 400

A deployment of ``--model`` on two one-core devices (cut after its first third of layers) serves a
stream of requests from two client threads; after a quarter of them it switches live to the cut
after two thirds (a planned switch: layers move from cpu1 to cpu0 over the process group); after
half, cpu1 is removed (announced: its process sends its layers on, then ends); after three
quarters, cpu1 is added back.  Printed per switch: the pause (queue held to serving again), of
which draining, the bytes sent over the process group against the whole model's, the bytes
reloaded, and the requests replayed; then that every request was answered once.

Figures are indicative only: the stage processes share the cores (the devices take the cores this process
may use, cycled), so on a machine whose core 0 is busy they measure a loaded host.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import torch

from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.cluster_detect import write_core_cluster
from pipeplan.costmodel.units import format_bytes
from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import RunOptions
from pipeplan.executor.deploy import ServeOptions, deploy_plan
from pipeplan.executor.deploy_stats import SwitchRecord
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.simulate import make_plan


def _cut(graph: object, spec: Path, at: int) -> Plan:
    """The plan that puts the first ``at`` layers on cpu0, the rest on cpu1."""
    names = [layer.name for layer in graph.layers]  # type: ignore[attr-defined]
    assignment = {name: "cpu0" if k < at else "cpu1" for k, name in enumerate(names)}
    problem = Problem(graph, load_cluster(str(spec)), options=PlanOptions(microbatches=2))  # type: ignore[arg-type]
    return make_plan(problem, assignment, Certificate("elastic-switch", "HEURISTIC", 0.0), order=["cpu0", "cpu1"])


def _row(record: SwitchRecord) -> str:
    return (f"{record.why:<36} {record.pause * 1e3:8.1f} {record.drain * 1e3:8.1f}  "
            f"{format_bytes(record.bytes_sent):>10} / {format_bytes(record.model_bytes):<10} "
            f"{format_bytes(record.bytes_reloaded):>10} {record.replayed:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp", help="zoo model (mlp)")
    parser.add_argument("--batch", type=int, default=4, help="microbatch size (4)")
    parser.add_argument("--requests", type=int, default=400, help="requests in the stream (400)")
    args = parser.parse_args()

    # Two one-core devices on the cores this process may use (the same core twice on one core).
    spec = write_core_cluster(Path(tempfile.mkdtemp()) / "cpu2.yaml", 2, name="elastic-cpu-2")
    graph = capture_model(args.model, args.batch)
    first, second = _cut(graph, spec, len(graph.layers) // 3), _cut(graph, spec, 2 * len(graph.layers) // 3)
    options = RunOptions(cluster=str(spec), timeout=30.0, calibrate=False)
    with deploy_plan(first, options=options, serving=ServeOptions(max_wait_ms=1)) as d:
        samples = d.samples(args.requests)
        futures = []
        sent = threading.Event()

        def client() -> None:
            for k, (a, kw) in enumerate(samples):
                futures.append(d.submit(*a, kwargs=kw, timeout=60.0))
                if k % 4 == 3:
                    time.sleep(0.002)
            sent.set()

        thread = threading.Thread(target=client)
        thread.start()
        records = []
        for fraction, action in ((0.25, lambda: d.switch(second, why="planned switch")),
                                 (0.5, lambda: d.remove_device("cpu1")),
                                 (0.75, lambda: d.add_device(load_cluster(str(spec))))):
            while len(futures) < fraction * args.requests and not sent.is_set():
                time.sleep(0.005)
            record = action()
            if record is not None:
                records.append(record)
        thread.join()
        answers = [f.result(timeout=120) for f in futures]
        stats = d.stats()
    print(f"{args.model}, microbatches of {args.batch}, {args.requests} requests; 2 one-core devices "
          "(indicative: shared, busy cores)")
    print(f"{'switch':<36} {'pause ms':>8} {'drain ms':>8}  {'sent over the group / model':>23} "
          f"{'reloaded':>10} {'replayed':>8}")
    for record in records:
        print(_row(record))
    print(f"answered {stats.answered} of {stats.submitted} submitted ({len(answers)} futures), failed "
          f"{stats.failed}, replayed {stats.replayed}; {torch.get_num_threads()} threads here")


if __name__ == "__main__":
    main()
