"""An elastic deployment under a steady request rate while its cluster changes (issue 17, item 5).

    .venv/bin/python benchmarks/elastic_experiment.py                       # rescnn, batch 4, 8 s phases
    .venv/bin/python benchmarks/elastic_experiment.py --model tinygpt --phase-seconds 6 --modes elastic

Two one-core devices, ``cpu0`` and ``cpu1`` on the first two cores this process may use.  The
model is profiled inside real forward passes on ``cpu0``'s core, idle and beside one compute
co-runner (``pipeplan profile MODEL --levels idle,1xcompute``), and planned by the ILP on that
profile.  A client thread then offers requests at a steady rate (by default 1.3× the plan's
predicted throughput, so that each phase's answered rate is the layout's capacity) through four
phases:

1. steady: both cores idle;
2. a compute co-runner starts on ``cpu1``'s core;
3. ``cpu1`` is taken away (the co-runner's owner keeps the core): announced;
4. ``cpu1`` comes back, idle.

Two modes serve the same stream:

- ``elastic``: the deployment re-plans by itself: a drift watcher
  (``ServeOptions(drift=0.3)``) notices the co-runner from the stages' measured compute and
  re-plans with the migration cost counted; ``remove_device``/``add_device`` re-plan live.
  Layers move between the stage processes over the process group.
- ``static``: re-planning disabled.  The co-runner is endured; a device taken away ends the
  deployment, which restarts from the model's source on a plan for the device left (what a
  one-shot planner offers: every byte reloaded); the device given back stays unused.

Printed: each trigger's time to serving a new layout (from the trigger to the first request
answered by it), the bytes sent over the process group against reloading the whole model, the
requests replayed; each phase's answered rate against the predicted throughput of the layout
that served it (the profile's times under the phase's load); and, per mode, the requests lost
(submitted but never answered) and answered more than once (0 and 0), with every answer
checked against the unsplit model's output for its sample.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeplan.costmodel.cluster import Cluster, load_cluster
from pipeplan.costmodel.cluster_detect import write_core_cluster
from pipeplan.costmodel.corunners import CoRunners
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.registry import load_cost_model
from pipeplan.costmodel.units import format_bytes
from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor import RunOptions
from pipeplan.executor.deploy import Deployment, ServeOptions, deploy_plan
from pipeplan.executor.deploy_triggers import cluster_without
from pipeplan.executor.errors import DeploymentClosed
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.plan import Certificate, Plan
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.simulate import make_plan

CO_RUNNER = Contention(corunners=1, kind="compute")
PHASES = ("steady", "co-runner on cpu1", "cpu1 taken away", "cpu1 back")


def _profile(model: str, batch: int, core: int, out: Path) -> Path:
    """``pipeplan profile MODEL`` idle and beside one compute co-runner, on ``core``."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipeplan", "profile", model, "--batch", str(batch), "--cores", str(core),
                    "--levels", f"idle,{CO_RUNNER.describe()}", "--out", str(out)], check=True,
                   capture_output=True, text=True)
    print(f"# profiled {model} at batch {batch} on core {core} in {time.perf_counter() - started:.0f} s: {out}")
    return out


@dataclass
class Stream:
    """The client's requests: when each was sent and answered, and its future."""

    sent: list[tuple[float, int, Future[Any]]] = field(default_factory=list)  # (time, sample index, future)
    answered_at: dict[int, float] = field(default_factory=dict)  # request number → time answered
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answered_between(self, start: float, end: float) -> int:
        with self.lock:
            return sum(1 for t in self.answered_at.values() if start <= t < end)


class Holder:
    """The deployment the client sends to; a static restart swaps it while the client waits."""

    def __init__(self, d: Deployment) -> None:
        self.d: Deployment | None = d
        self.ready = threading.Condition()

    def swap(self, d: Deployment | None) -> None:
        with self.ready:
            self.d = d
            self.ready.notify_all()

    def get(self) -> Deployment:
        with self.ready:
            while self.d is None:
                self.ready.wait()
            return self.d


def _client(holder: Holder, stream: Stream, samples: list[tuple[tuple[Any, ...], dict[str, Any]]],
            rate: float) -> None:
    """Open loop at ``rate`` requests per second; a request that cannot be sent yet waits its turn."""
    start = time.monotonic()
    n = 0
    while not stream.stop.is_set():
        due = start + n / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        args, kwargs = samples[n % len(samples)]
        while True:
            try:
                future = holder.get().submit(*args, kwargs=kwargs, timeout=120.0)
                break
            except DeploymentClosed:  # a static restart closed it under us: send to the next one
                time.sleep(0.001)
        number = n

        def done(_: Future[Any], number: int = number) -> None:
            with stream.lock:
                stream.answered_at.setdefault(number, time.monotonic())

        future.add_done_callback(done)
        with stream.lock:
            stream.sent.append((time.monotonic(), n % len(samples), future))
        n += 1


def _predicted(graph: ModelGraph, cluster: Cluster, cost: Any, plan: Plan) -> float:
    """Requests per second of ``plan``'s layout on ``cluster`` (its devices' loads as they are)."""
    problem = Problem(graph, cluster, cost, plan.options)
    order = [s.device for s in plan.stages]
    return make_plan(problem, plan.assignment(), Certificate("layout", "HEURISTIC", 0.0), order=order).throughput


@dataclass
class Trigger:
    phase: str
    at: float
    serving_after: float | None = None  # seconds from the trigger to the first answer by the new layout
    bytes_sent: int = 0
    bytes_reloaded: int = 0
    replayed: int = 0
    switches: int = 0
    layout: str = ""
    note: str = ""


def _layout(plan: Plan) -> str:
    return " → ".join(f"{s.device} ({len(s.layers)} layers)" for s in plan.stages)


def run_mode(mode: str, graph: ModelGraph, spec: Path, cost: Any, plan: Plan, args: argparse.Namespace) -> None:
    cluster = load_cluster(str(spec))
    serving = ServeOptions(max_wait_ms=2.0, drift=0.3 if mode == "elastic" else None, drift_after=10,
                           drift_interval=0.25, horizon="10m")
    options = RunOptions(cluster=str(spec), timeout=60.0, calibrate=False)
    phase_s = args.phase_seconds
    d = deploy_plan(plan, options=options, serving=serving)
    reference = d.reference
    samples = d.samples(64)
    holder, stream = Holder(d), Stream()
    rate = args.rate or 1.3 * plan.throughput
    client = threading.Thread(target=_client, args=(holder, stream, samples, rate), daemon=True)
    t0 = time.monotonic()
    client.start()
    triggers: list[Trigger] = []
    rows: list[tuple[str, float, float, str]] = []  # phase, answered rate, predicted rate, layout
    phase_cluster = cluster
    corunner: CoRunners | None = None
    deployments = [d]
    reloaded_bytes = sum(p.numel() * p.element_size() for p in reference.parameters()) if reference else 0
    try:
        for k, phase in enumerate(PHASES):
            start = t0 + k * phase_s
            time.sleep(max(0.0, start - time.monotonic()))
            switches_before = len(holder.get().stats().switches)
            trigger = Trigger(phase, time.monotonic()) if k else None
            if k == 1:
                corunner = CoRunners(CO_RUNNER, cores=[args.cores[1]]).start()
                phase_cluster = cluster.with_load("cpu1", CO_RUNNER)
            elif k == 2:
                assert corunner is not None
                corunner.stop()
                phase_cluster = cluster_without(cluster, {"cpu1"})
                if mode == "elastic":
                    holder.get().remove_device("cpu1", why="cpu1 taken away")
                else:  # restart from the source on a plan for the device left
                    old = holder.get()
                    holder.swap(None)
                    old.close(drain=True)
                    one = solve(Problem(graph, phase_cluster, cost, plan.options), SolverOptions(time_limit=10))
                    left = phase_cluster.save(spec.with_name("cpu0-only.yaml"))
                    new = deploy_plan(one, options=RunOptions(cluster=str(left), timeout=60.0, calibrate=False),
                                      serving=serving)
                    deployments.append(new)
                    holder.swap(new)
                    assert trigger is not None
                    trigger.bytes_reloaded = reloaded_bytes
                    trigger.note = "restarted from the source"
            elif k == 3:
                phase_cluster = cluster
                if mode == "elastic":
                    holder.get().add_device(cluster, why="cpu1 back")
                elif trigger is not None:
                    trigger.note = "re-planning disabled: cpu1 unused"
            if trigger is not None and trigger.note == "restarted from the source":
                trigger.serving_after = time.monotonic() - trigger.at  # the new deployment serves
            elif trigger is not None and k in (2, 3) and mode == "elastic":
                trigger.serving_after = time.monotonic() - trigger.at  # the call returns once the new layout serves
            # Wait out the phase (noting when a drift switch lands), then judge its second half.
            while time.monotonic() < start + phase_s:
                if trigger is not None and trigger.serving_after is None and mode == "elastic" and \
                        len(holder.get().stats().switches) > switches_before:
                    trigger.serving_after = time.monotonic() - trigger.at
                time.sleep(0.02)
            current = holder.get()
            measured = stream.answered_between(start + phase_s / 2, start + phase_s) / (phase_s / 2)
            predicted = _predicted(graph, phase_cluster, cost, current.plan)
            rows.append((phase, measured, predicted, _layout(current.plan)))
            if trigger is not None:
                records = current.stats().switches[switches_before:] if mode == "elastic" else []
                trigger.switches = len(records)
                for record in records:
                    trigger.bytes_sent += record.bytes_sent
                    trigger.bytes_reloaded += record.bytes_reloaded
                    trigger.replayed += record.replayed
                    trigger.note = trigger.note or record.why
                if not records and not trigger.note:
                    trigger.note = "no switch"
                    trigger.serving_after = None
                trigger.layout = _layout(current.plan)
                triggers.append(trigger)
    finally:
        stream.stop.set()
        client.join(timeout=30)
        if corunner is not None:
            corunner.stop()
        for dep in deployments:
            dep.close(drain=True)
    _report(mode, stream, samples, reference, rows, triggers, reloaded_bytes, rate)


def _report(mode: str, stream: Stream, samples: list[tuple[tuple[Any, ...], dict[str, Any]]], reference: Any,
            rows: list[tuple[str, float, float, str]], triggers: list[Trigger], model_bytes: int, rate: float) -> None:
    wrong = lost = 0
    expected: dict[int, torch.Tensor] = {}
    for _, index, future in stream.sent:
        if not future.done() or future.exception() is not None:
            lost += 1
            continue
        if index not in expected:
            args, kwargs = samples[index]
            with torch.no_grad():
                out = reference(*(a.unsqueeze(0) if isinstance(a, torch.Tensor) else a for a in args),
                                **{key: v.unsqueeze(0) for key, v in kwargs.items()})
            expected[index] = (out[0] if isinstance(out, tuple) else out)[0]
        got = future.result()
        got = got[0] if isinstance(got, tuple) else got
        scale = float(expected[index].abs().max()) or 1.0
        if not torch.allclose(got, expected[index], rtol=1e-4, atol=1e-4 * scale):
            wrong += 1
    duplicated = max(0, len(stream.answered_at) - len(stream.sent))
    print(f"\n## {mode}: {len(stream.sent)} requests offered at {rate:.0f}/s; lost {lost}, answered twice "
          f"{duplicated}, answers unlike the unsplit model's {wrong}")
    print("| phase | layout serving | answered /s | predicted /s | error |")
    print("|---|---|---:|---:|---:|")
    for phase, measured, predicted, layout in rows:
        print(f"| {phase} | {layout} | {measured:.0f} | {predicted:.0f} | {measured / predicted - 1:+.0%} |")
    print("\n| trigger | new layout | trigger → serving | switches | sent over the group | reloaded | whole model | "
          "replayed | note |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for t in triggers:
        serving = "—" if t.serving_after is None else f"{t.serving_after * 1e3:.0f} ms"
        print(f"| {t.phase} | {t.layout} | {serving} | {t.switches} | {format_bytes(t.bytes_sent)} | "
              f"{format_bytes(t.bytes_reloaded)} "
              f"| {format_bytes(model_bytes)} | {t.replayed} | {t.note} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="rescnn", help="zoo model (rescnn)")
    parser.add_argument("--batch", type=int, default=4, help="microbatch size (4)")
    parser.add_argument("--phase-seconds", type=float, default=8.0, help="length of each of the four phases (8)")
    parser.add_argument("--rate", type=float, default=None,
                        help="requests per second offered (default: 1.3× the plan's predicted throughput)")
    parser.add_argument("--modes", default="elastic,static", help="elastic, static or both (both)")
    parser.add_argument("--profile", type=Path, default=None, help="a model profile to plan with (default: made now)")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        parser.error(f"needs two cores to take one away; this process may use {cores}")
    args.cores = cores[:2]
    folder = Path(tempfile.mkdtemp(prefix="pipeplan-elastic-"))
    spec = write_core_cluster(folder / "cpu2.yaml", len(args.cores), name="elastic-cpu-2", cores=args.cores,
                              peak_flops="100GFLOPS", mem_bandwidth="15GB/s")
    profile = args.profile or _profile(args.model, args.batch, args.cores[0], folder / "profile.json")
    cost = load_cost_model(f"profile:{profile}")
    graph = capture_model(args.model, args.batch)
    problem = Problem(graph, load_cluster(str(spec)), cost, PlanOptions(microbatches=4))
    plan = solve(problem, SolverOptions(time_limit=10))
    print(f"# {args.model}, microbatches of {args.batch}, phases of {args.phase_seconds:g} s; cores {args.cores}; "
          f"load average {os.getloadavg()[0]:.2f}; plan {_layout(plan)}, predicted {plan.throughput:.0f} req/s")
    for mode in args.modes.split(","):
        run_mode(mode.strip(), graph, spec, cost, plan, args)


if __name__ == "__main__":
    main()
