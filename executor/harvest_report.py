"""The run report's loans: per borrowing stage, what it fetched against the plan, and the weights held.

For a stage whose plan borrows (``plan.harvest``), from what its streamer measured during the
measured batches (:mod:`pipeplan.executor.harvest_stream`), per microbatch:

- ``fetch.bytes`` and ``fetch.seconds``: bytes fetched and the time the fetches took (request to the
  last byte, summed over the stage's borrowed layers), beside ``fetch.predicted`` (the plan's
  ``StageFetch.fetch``: latency + bytes / bandwidth over the channels it reads) and the error;
- ``fetch.bandwidth``: bytes over fetch seconds, the bandwidth achieved, per lender beside the
  link's (``lenders``);
- ``fetch.waited``: how long the forward waited for weights, the part of the fetches that prefetch
  did not hide (it is inside the stage's measured compute);
- ``fetch.fetches``: layers fetched per microbatch, and ``fetch.mode``, the plan's fetch mode: with
  ``fetch="batch"`` one round of fetches serves the batch's M microbatches, so a borrowed layer
  counts 1/M per microbatch, and every per-microbatch prediction (bytes, seconds, per lender) is a
  round's ÷ M.

``memory``, for every stage of a run with loans or caps, measured from the tensors the process
held (:class:`pipeplan.executor.memory_cap.WeightLedger`): ``home`` (its own weights, and what it lends),
``peak`` (with fetched buffers), ``without_loans`` (home plus what it borrows), ``cap``, and the
process's peak resident set (``rss_peak``, torch itself included).  Lenders with processes of their
own report what they held and served (``RunReport.lenders``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeplan.costmodel.units import format_bytes
from pipeplan.planner.plan import Plan

if TYPE_CHECKING:
    from rich.table import Table

    from pipeplan.executor.report import RunReport

__all__ = ["loans_table", "stage_loans"]


def _error(measured: float, predicted: float | None) -> float | None:
    return None if not predicted else (measured - predicted) / predicted


def stage_loans(plan: Plan, k: int, result: dict[str, Any], microbatches: int) -> dict[str, Any] | None:
    """Stage k's loans section of the report (None for a run without loans or caps)."""
    harvest = result.get("harvest")
    if harvest is None:
        return None
    out: dict[str, Any] = {"layers": harvest["layers"], "memory": harvest["memory"], "served": harvest["served"]}
    if harvest.get("stash") is not None:
        out["stash"] = _stash(plan, k, harvest["stash"], microbatches)
    fetched = harvest["fetched"]
    if not fetched or not microbatches:
        return out
    device = plan.stages[k].device
    loans = plan.harvest
    planned = next((s for s in loans.stages if s.device == device), None) if loans is not None else None
    rounds = loans.options.rounds(plan.options.microbatches) if loans is not None else 1
    seconds = fetched["seconds"] / microbatches
    out["fetch"] = {"mode": loans.options.fetch if loans is not None else None,
                    "fetches": fetched["fetches"] / microbatches, "bytes": fetched["bytes"] / microbatches,
                    "seconds": seconds, "waited": fetched["waited"] / microbatches,
                    "bandwidth": fetched["bytes"] / fetched["seconds"] if fetched["seconds"] > 0 else None,
                    "predicted": planned.fetch if planned is not None else None,
                    "predicted_bytes": planned.borrowed / rounds if planned is not None else None,
                    "error": _error(seconds, planned.fetch if planned is not None else None)}
    lenders: dict[str, Any] = {}
    for name, row in fetched["lenders"].items():
        channel = next((c for c in (loans.channels if loans is not None else [])
                        if c.source == name and c.target in (device, "*")), None)
        lenders[name] = {"bytes": row["bytes"] / microbatches, "seconds": row["seconds"] / microbatches,
                         "bandwidth": row["bytes"] / row["seconds"] if row["seconds"] > 0 else None,
                         "predicted": channel.seconds / rounds if channel is not None else None,
                         "link_bandwidth": channel.bandwidth if channel is not None else None}
    out["fetch"]["lenders"] = lenders
    return out


def _stash(plan: Plan, k: int, stats: dict[str, Any], microbatches: int) -> dict[str, Any]:
    """Stage k's stash, per microbatch, beside the plan's (a batch's traffic ÷ M)."""
    device = plan.stages[k].device
    planned = next((s for s in plan.harvest.stashes if s.borrower == device), None) if plan.harvest else None
    m = max(microbatches, 1)
    moved = stats["bytes_out"] + stats["bytes_in"]
    predicted = planned.traffic / plan.options.microbatches if planned is not None else None
    return {"lender": stats["lender"], "puts": stats["puts"] / m, "gets": stats["gets"] / m,
            "bytes": moved / m, "seconds": stats["seconds"] / m, "waited": stats["waited"] / m,
            "bandwidth": moved / stats["seconds"] if stats["seconds"] > 0 else None,
            "predicted_bytes": predicted, "held_by_lender": planned.bytes if planned is not None else None}


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{format_bytes(value)}/s"


def _served_stash(stash: dict[str, Any] | None) -> str:
    if not stash:
        return ""
    return (f"; held stashed activations ({stash['puts']} in, {stash['gets']} out, "
            f"{format_bytes(stash['peak'])} at most)")


def loans_table(report: RunReport) -> Table | None:
    """One row per stage of a run with loans or caps: fetches against the plan, and the weights held."""
    from rich.table import Table

    rows = [s for s in report.stages if s.loans is not None]
    if not rows:
        return None
    table = Table(title="borrowed weights (per microbatch) and weights held", title_justify="left")
    for col in ("stage", "device", "borrowed layers", "from", "fetched", "fetch pred ms", "fetch meas ms", "err",
                "bandwidth", "link", "waited ms", "held peak", "without loans", "cap"):
        table.add_column(col, justify="left" if col in ("device", "from") else "right")
    for s in rows:
        loans = s.loans or {}
        fetch, memory = loans.get("fetch") or {}, loans["memory"]
        lenders = fetch.get("lenders", {})
        links = [x["link_bandwidth"] for x in lenders.values() if x.get("link_bandwidth")]
        error = fetch.get("error")
        table.add_row(str(s.index), s.device, str(len(loans["layers"])), ", ".join(lenders) or "-",
                      format_bytes(fetch["bytes"]) if fetch else "-", _ms(fetch.get("predicted")),
                      _ms(fetch.get("seconds")), "-" if error is None else f"{error * 100:+.1f}%",
                      _rate(fetch.get("bandwidth")), _rate(min(links)) if links else "-", _ms(fetch.get("waited")),
                      format_bytes(memory["peak"]), format_bytes(memory["without_loans"]),
                      format_bytes(memory["cap"]) if memory["cap"] is not None else "-")
    served = [f"{x['lender']} held {format_bytes(x['memory']['home'])}"
              + (f" (cap {format_bytes(x['memory']['cap'])})" if x["memory"]["cap"] is not None else "")
              + f", served {x['served']['requests']} fetches, {format_bytes(x['served']['bytes'])}"
              + _served_stash(x["served"].get("stash"))
              for x in report.lenders]
    stashes = [f"stage {s.index} stashed {format_bytes((s.loans or {})['stash']['bytes'])} a microbatch with "
               f"{(s.loans or {})['stash']['lender']}" for s in rows if (s.loans or {}).get("stash")]

    parts = (["lenders with a process of their own: " + "; ".join(served)] if served else []) + stashes
    table.caption = "; ".join(parts) if parts else None
    table.caption_justify = "left"
    return table
