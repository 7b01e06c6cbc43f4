"""The run report: measured stage times beside the plan's predictions, as JSON and as a table.

Per stage and microbatch, from the timings the schedule recorded on the shared clock:

- ``compute``: the stage's forward of the microbatch;
- ``recv``: the transfer of its input — from the moment both the stage was waiting and the previous
  stage had posted the data (the end of its compute), to the data's arrival;
- ``idle``: the rest of the wait for the input, when the previous stage was not done yet;
- ``send``: posting the outputs, plus any wait for sends to complete (at the end of a batch);
- ``time``: ``max(compute, recv, send)`` or their sum, by the plan's comm mode, as ``Stage.time``.

Throughput is samples over the measured wall time (first stage's start to the last stage's end);
a batch's latency runs from the first stage starting its first microbatch to the last stage
finishing its last.  Relative errors are ``(measured − predicted) / predicted``.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeplan.executor.harvest_report import stage_loans
from pipeplan.executor.options import RunSetup
from pipeplan.planner.plan import Plan

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["REPORT_FORMAT", "REPORT_VERSION", "RunReport", "StageReport", "build_report", "report_table",
           "verdict"]

REPORT_FORMAT = "pipeplan.run"
REPORT_VERSION = 1

# Columns of a MicrobatchTiming row (see pipeplan.executor.schedule.MicrobatchTiming.as_row).
_BATCH, _MB, _RECV_START, _RECV_END, _COMP_START, _COMP_END, _SEND_END, _SEND_WAIT = range(8)


def relative_error(measured: float, predicted: float | None) -> float | None:
    """``(measured − predicted) / predicted``; None without a positive prediction."""
    if predicted is None or predicted <= 0:
        return None
    return (measured - predicted) / predicted


@dataclass
class StageReport:
    index: int
    device: str
    layers: int
    host: str
    cores: list[int]
    threads: int
    load: str | None
    corunners: int  # co-running processes the stage started on its cores for the run
    predicted: dict[str, float]  # the plan's compute, recv, send, time (s per microbatch)
    measured: dict[str, float]  # means per microbatch: compute, recv, send, idle, time; utilization
    error: dict[str, float | None]  # relative error of compute and time against the plan
    # compute and time predicted again by the cost model under the load of this run (None: no cost model)
    predicted_at_load: dict[str, float] | None = None
    error_at_load: dict[str, float | None] | None = None
    microbatches: list[dict[str, float]] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)  # seconds the process spent on each step
    # borrowed weights fetched against the plan, weights held (pipeplan.executor.harvest_report); None: no loans
    loans: dict[str, Any] | None = None


@dataclass
class RunReport:
    model: str
    cluster: str
    method: str
    schedule: str
    backend: str
    batch_size: int  # samples per microbatch
    microbatches: int
    batches: int
    warmup: int
    loads: dict[str, str]
    stages: list[StageReport]
    wall: float  # seconds for the measured batches
    throughput: float  # samples per second, measured
    predicted_throughput: float
    latency: float  # mean seconds per batch, measured
    predicted_latency: float  # Σ stage time + (M − 1) · bottleneck, from the plan, at this run's M
    microbatch_latency: float  # mean seconds from a microbatch's first compute to its last
    check: dict[str, Any] | None
    costmodel: str | None = None  # the cost model that re-predicted stages under the run's load
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    lenders: list[dict[str, Any]] = field(default_factory=list)  # lenders with processes of their own
    # samples per second as run: the run's loads, waits and schedule replayed (None: no wake model)
    predicted_throughput_as_run: float | None = None

    @property
    def throughput_error(self) -> float | None:
        return relative_error(self.throughput, self.predicted_throughput)

    @property
    def throughput_error_as_run(self) -> float | None:
        return relative_error(self.throughput, self.predicted_throughput_as_run)

    def to_dict(self) -> dict[str, Any]:
        return {"format": REPORT_FORMAT, "version": REPORT_VERSION, **asdict(self),
                "throughput_error": self.throughput_error, "throughput_error_as_run": self.throughput_error_as_run}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())


def _combine(compute: float, recv: float, send: float, serial: bool) -> float:
    return compute + recv + send if serial else max(compute, recv, send)


def _microbatches(rows: list[list[float]], upstream: dict[tuple[int, int], float] | None) -> list[dict[str, float]]:
    out = []
    for row in rows:
        key = (int(row[_BATCH]), int(row[_MB]))
        waited = row[_RECV_END] - row[_RECV_START]
        ready = upstream.get(key, row[_RECV_START]) if upstream is not None else row[_RECV_START]
        recv = max(0.0, row[_RECV_END] - max(row[_RECV_START], ready))
        out.append({"batch": key[0], "microbatch": key[1], "start": row[_COMP_START],
                    "compute": row[_COMP_END] - row[_COMP_START], "recv": min(recv, waited),
                    "idle": max(0.0, waited - recv), "send": row[_SEND_END] - row[_COMP_END],
                    "send_wait": row[_SEND_WAIT]})
    return out


def build_report(plan: Plan, setup: RunSetup, results: list[dict[str, Any]],
                 at_load: list[float] | None = None, costmodel: str | None = None,
                 notes: list[str] | None = None, back_to_back: list[float] | None = None,
                 batch_seconds: float | None = None) -> RunReport:
    """Assemble the report from every stage's measurements (rank 0's gathered ``results``, with the
    reports of lenders that run no stage).

    ``at_load`` are the stages' compute times re-predicted under the run's load, if any, waits
    included; ``back_to_back`` the same without the waits (kept as ``predicted_at_load["back_to_back"]``
    where they differ); ``batch_seconds`` a batch's wall time as run, from the same replay (its
    throughput is ``predicted_throughput_as_run``).
    """
    lenders = [r for r in results if "lender" in r]
    results = sorted((r for r in results if "stage" in r), key=lambda r: r["stage"])
    serial = plan.options.comm == "serial"
    m, n = setup.microbatches, setup.options.batches
    stages: list[StageReport] = []
    upstream: dict[tuple[int, int], float] | None = None
    for k, (planned, result) in enumerate(zip(plan.stages, results, strict=True)):
        rows = result["timings"]
        mbs = _microbatches(rows, upstream)
        upstream = {(int(r[_BATCH]), int(r[_MB])): r[_COMP_END] for r in rows}
        mean = {key: statistics.fmean(mb[key] for mb in mbs) if mbs else 0.0
                for key in ("compute", "recv", "send", "idle")}
        mean["time"] = statistics.fmean(_combine(mb["compute"], mb["recv"], mb["send"], serial) for mb in mbs)
        wall = max(result["end"] - result["start"], 1e-12)
        mean["utilization"] = sum(mb["compute"] for mb in mbs) / wall
        mean["cpu"] = float(result.get("cpu", 0.0)) / max(len(mbs), 1)  # process CPU time, all its threads
        predicted = {"compute": planned.compute, "recv": planned.recv, "send": planned.send, "time": planned.time}
        report = StageReport(
            index=k, device=planned.device, layers=len(planned.layers), host=result["host"],
            cores=result["cores"], threads=result["threads"], load=setup.stages[k].load,
            corunners=int(result.get("corunners", 0)),
            predicted=predicted, measured=mean,
            error={"compute": relative_error(mean["compute"], planned.compute),
                   "time": relative_error(mean["time"], planned.time)},
            microbatches=mbs, phases=dict(result.get("phases", {})), loans=stage_loans(plan, k, result, len(mbs)))
        if at_load is not None:
            time_at_load = _combine(at_load[k], planned.recv, planned.send, serial)
            report.predicted_at_load = {"compute": at_load[k], "time": time_at_load}
            if back_to_back is not None and back_to_back[k] != at_load[k]:
                report.predicted_at_load["back_to_back"] = back_to_back[k]
            report.error_at_load = {"compute": relative_error(mean["compute"], at_load[k]),
                                    "time": relative_error(mean["time"], time_at_load)}
        stages.append(report)

    first, last = results[0]["timings"], results[-1]["timings"]
    start = min(r["start"] for r in results)
    wall = max(results[-1]["end"] - start, 1e-12)
    samples = n * m * plan.batch_size
    begin = {(int(r[_BATCH]), int(r[_MB])): r[_COMP_START] for r in first}
    finish = {(int(r[_BATCH]), int(r[_MB])): r[_COMP_END] for r in last}
    batch_latency = [max(finish[(b, i)] for i in range(m)) - min(begin[(b, i)] for i in range(m)) for b in range(n)]
    times = [s.time for s in plan.stages]
    check = next((r["check"] for r in reversed(results) if r.get("check") is not None), None)
    return RunReport(
        model=plan.model, cluster=plan.cluster, method=plan.method, schedule=setup.options.schedule,
        backend=setup.backend, batch_size=plan.batch_size, microbatches=m, batches=n,
        warmup=setup.options.warmup, loads=dict(setup.options.loads), stages=stages, wall=wall,
        throughput=samples / wall, predicted_throughput=plan.throughput,
        latency=statistics.fmean(batch_latency), predicted_latency=sum(times) + (m - 1) * max(times),
        microbatch_latency=statistics.fmean(finish[key] - begin[key] for key in finish),
        check=check, costmodel=costmodel, notes=list(notes or []),
        environment={"hosts": sorted({r["host"] for r in results}), "device_type": setup.device_type},
        lenders=lenders,
        predicted_throughput_as_run=m * plan.batch_size / batch_seconds if batch_seconds else None)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _pct(error: float | None) -> str:
    return "-" if error is None else f"{error * 100:+.1f}%"


def report_table(report: RunReport) -> Table:
    """Measured beside predicted, one row per stage (ms per microbatch)."""
    from rich.table import Table

    table = Table(title=f"{report.model} on {report.cluster} ({report.method} plan, {report.schedule}, "
                  f"{report.batches}×{report.microbatches} microbatches of {report.batch_size})",
                  title_justify="left")
    columns = ["stage", "device", "layers", "load", "compute pred", "compute meas", "err", "time pred",
               "time meas", "err", "recv", "send", "idle"]
    at_load = any(s.predicted_at_load and abs(s.predicted_at_load["compute"] - s.predicted["compute"])
                  > 1e-3 * s.predicted["compute"] for s in report.stages)
    if at_load:
        columns += ["compute @load", "err @load"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("device", "load") else "right")
    for s in report.stages:
        row = [str(s.index), s.device, str(s.layers), s.load or "idle", _ms(s.predicted["compute"]),
               _ms(s.measured["compute"]), _pct(s.error["compute"]), _ms(s.predicted["time"]),
               _ms(s.measured["time"]), _pct(s.error["time"]), _ms(s.measured["recv"]), _ms(s.measured["send"]),
               _ms(s.measured["idle"])]
        if at_load:
            pal, eal = s.predicted_at_load or {}, s.error_at_load or {}
            row += [_ms(pal.get("compute")), _pct(eal.get("compute"))]
        table.add_row(*row)
    as_run = (f"; as run {report.predicted_throughput_as_run:.1f}, {_pct(report.throughput_error_as_run)}"
              if report.predicted_throughput_as_run else "")
    table.caption = (f"throughput {report.throughput:.1f} samples/s (predicted {report.predicted_throughput:.1f}, "
                     f"{_pct(report.throughput_error)}{as_run}); batch latency {_ms(report.latency)} ms (predicted "
                     f"{_ms(report.predicted_latency)})")
    table.caption_justify = "left"
    return table


def verdict(report: RunReport) -> str:
    """The output check in one line (printed on its own: a table caption wraps at the table's width)."""
    check = report.check
    if check is None:
        return "outputs not checked"
    return str(check["message"]) if check["ok"] else f"OUTPUTS DIFFER: {check['message']}"
