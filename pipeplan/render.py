"""Rich tables for the CLI: a graph's layers, a cluster's devices, analytic times per device."""

from __future__ import annotations

from rich.table import Table

from pipeplan.costmodel.analytic import compute_bound
from pipeplan.costmodel.base import CostModel
from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.units import format_bytes, format_flops, format_seconds
from pipeplan.planner.plan import Plan

__all__ = ["cluster_table", "device_times_table", "graph_table", "layer_times_table", "links_table", "loans_table",
           "memory_map_table", "plan_table"]


def graph_table(graph: ModelGraph, top: int | None = None) -> Table:
    """One row per layer (topological order), or the ``top`` layers with the most FLOPs."""
    layers: list[Layer] = graph.layers
    title = (f"{graph.model} · batch {graph.batch_size} · {graph.granularity} granularity · "
             f"{len(graph)} layers, {graph.nx.number_of_edges()} edges")
    if top is not None and top < len(layers):
        layers = sorted(layers, key=lambda lay: -lay.flops)[:top]
        title += f" · top {top} by FLOPs"
    table = Table(title=title, title_justify="left", show_footer=True)
    table.add_column("#", justify="right", footer="")
    table.add_column("layer", footer="total", overflow="fold")
    table.add_column("kind")
    table.add_column("output", overflow="fold")
    table.add_column("FLOPs", justify="right", footer=format_flops(graph.total_flops))
    traffic = sum(lay.bytes_read + lay.bytes_written for lay in graph.layers)
    table.add_column("bytes moved", justify="right", footer=format_bytes(traffic))
    table.add_column("FLOP/B", justify="right",
                     footer=f"{graph.total_flops / traffic:.1f}" if traffic else "0")
    table.add_column("params", justify="right", footer=format_bytes(graph.total_param_bytes))
    table.add_column("activations", justify="right")
    for lay in layers:
        shape = "×".join(map(str, lay.output_shapes[0])) if lay.output_shapes else ""
        if len(lay.output_shapes) > 1:
            shape += f" (+{len(lay.output_shapes) - 1})"
        table.add_row(str(lay.order), lay.name, lay.kind, shape, format_flops(lay.flops),
                      format_bytes(lay.bytes_read + lay.bytes_written), f"{lay.intensity:.1f}",
                      format_bytes(lay.param_bytes), format_bytes(lay.activation_bytes))
    return table


def cluster_table(cluster: Cluster) -> Table:
    table = Table(title=f"cluster {cluster.name}: {cluster.description}", title_justify="left")
    for col in ("device", "type", "host", "memory", "peak", "bandwidth", "load"):
        table.add_column(col, justify="right" if col in ("memory", "peak", "bandwidth") else "left")
    for d in cluster.devices:
        table.add_row(d.id, d.type, d.host, format_bytes(d.memory),
                      format_flops(d.peak_flops) + "/s", format_bytes(d.mem_bandwidth) + "/s",
                      d.load.describe())
    return table


def links_table(cluster: Cluster) -> Table:
    ids = [d.id for d in cluster.devices]
    table = Table(title="links: bandwidth / latency", title_justify="left")
    table.add_column("")
    for i in ids:
        table.add_column(i, justify="right")
    for a in ids:
        row = []
        for b in ids:
            link = cluster.link(a, b)
            row.append("—" if a == b else
                       f"{format_bytes(link.bandwidth)}/s / {format_seconds(link.latency)}")
        table.add_row(a, *row)
    return table


def device_times_table(graph: ModelGraph, cluster: Cluster, model: CostModel) -> Table:
    """The whole model on each device alone: time under its current load, idle, and memory."""
    table = Table(title=f"{graph.model} on each device of {cluster.name} ({model.name} cost model)",
                  title_justify="left")
    for col in ("device", "type", "load", "time (idle)", "time (now)", "slowdown",
                "compute-bound", "memory", "fits"):
        table.add_column(col, justify="left" if col in ("device", "type", "load") else "right")
    # the whole model on one device: each distinct weight once (tied weights are shared)
    need = graph.total_param_bytes + sum(model.layer_memory(lay).activations for lay in graph.layers)
    for d in cluster.devices:
        idle = model.stage_time(graph.layers, d, Contention())
        now = model.stage_time(graph.layers, d)
        bound = sum(1 for lay in graph.layers
                    if lay.flops > 0 and compute_bound(lay.flops, lay.bytes_read + lay.bytes_written, d))
        table.add_row(d.id, d.type, d.load.describe(), format_seconds(idle), format_seconds(now),
                      f"{now / idle:.2f}×" if idle else "—", f"{bound}/{len(graph)} layers",
                      format_bytes(need), "yes" if need <= d.memory else "[red]no[/red]")
    return table


def layer_times_table(graph: ModelGraph, cluster: Cluster, model: CostModel) -> Table:
    """Predicted time of every layer on every device under its current load."""
    table = Table(title=f"per-layer time under current load ({model.name})", title_justify="left",
                  show_footer=True)
    table.add_column("layer", footer="total", overflow="fold")
    totals = {d.id: 0.0 for d in cluster.devices}
    rows = []
    per_device = [model.layer_times(graph.layers, d) for d in cluster.devices]
    for lay, times in zip(graph.layers, zip(*per_device, strict=True), strict=True):
        for d, t in zip(cluster.devices, times, strict=True):
            totals[d.id] += t
        rows.append([lay.name, *map(format_seconds, times)])
    for d in cluster.devices:
        table.add_column(f"{d.id}\n{d.load.describe()}", justify="right",
                         footer=format_seconds(totals[d.id]))
    for row in rows:
        table.add_row(*row)
    return table


def plan_table(plan: Plan) -> Table:
    """The stages of a plan and its certificate."""
    cert = plan.certificate
    gap = "—" if cert.gap is None else f"{cert.gap:.2%}"
    bound = "—" if cert.best_bound is None else format_seconds(cert.best_bound)
    title = (f"plan for {plan.model} on {plan.cluster} by {cert.method}: {cert.status}, objective "
             f"{format_seconds(cert.objective)}, bound {bound}, gap {gap}, {cert.solve_time:.2f}s\n"
             f"bottleneck {format_seconds(plan.bottleneck)} → {plan.throughput:,.1f} samples/s; latency of "
             f"{plan.options.microbatches} microbatches {format_seconds(plan.latency)}; comm {plan.options.comm}")
    table = Table(title=title, title_justify="left")
    for col in ("stage", "device", "layers", "compute", "recv", "send", "stage time", "memory", "of capacity"):
        table.add_column(col, justify="left" if col in ("device", "layers") else "right")
    for s in plan.stages:
        span = s.layers[0] if len(s.layers) == 1 else f"{s.layers[0]} … {s.layers[-1]}"
        table.add_row(str(s.index), s.device, f"{len(s.layers)}: {span}", format_seconds(s.compute),
                      format_seconds(s.recv), format_seconds(s.send), format_seconds(s.time),
                      format_bytes(s.memory), f"{s.memory / s.capacity:.1%}" if s.capacity else "—")
    return table


def memory_map_table(plan: Plan) -> Table:
    """Per device (and host that lends) of a plan that may borrow: own, lent, borrowed, reserved, free."""
    harvest = plan.harvest
    if harvest is None:
        raise ValueError("the plan has no harvest section: make it with harvesting on (--harvest)")
    table = Table(title=f"memory map: {format_bytes(harvest.borrowed_bytes)} borrowed in {len(harvest.loans)} "
                  "loans (after the margin)", title_justify="left")
    stash = bool(harvest.stashes)  # lent and borrowed include stashed activations, shown apart
    for col in ("device", "capacity", "own", "lent", "borrowed", "reserved", "free",
                *(("lent stash", "borrowed stash") if stash else ())):
        table.add_column(col, justify="left" if col == "device" else "right")
    for row in harvest.memory:
        table.add_row(row.device, format_bytes(row.capacity), format_bytes(row.own), format_bytes(row.lent),
                      format_bytes(row.borrowed), format_bytes(row.reserved), format_bytes(row.free),
                      *((format_bytes(row.lent_stash), format_bytes(row.borrowed_stash)) if stash else ()))
    return table


def loans_table(plan: Plan) -> Table:
    """Who lends what to whom: one row per channel, with its layers, bytes and fetch time per round (each
    microbatch, or each batch with ``fetch="batch"``)."""
    harvest = plan.harvest
    if harvest is None:
        raise ValueError("the plan has no harvest section: make it with harvesting on (--harvest)")
    without = "none fits" if harvest.without is None else format_seconds(harvest.without)
    table = Table(title=f"loans, fetched each {harvest.options.fetch} (best without borrowing: {without})",
                  title_justify="left")
    stash = bool(harvest.stashes)
    for col in ("lender", "borrower", "layers", "bytes", "bandwidth", "fetch", *(("of which stash",) if stash else ())):
        table.add_column(col, justify="left" if col in ("lender", "borrower", "layers") else "right")
    for channel in harvest.channels:
        loans = [loan for loan in harvest.loans if loan.lender == channel.source
                 and (channel.target == "*" or loan.borrower == channel.target)]
        borrowers = ", ".join(sorted({loan.borrower for loan in loans} | {
            x.borrower for x in harvest.stashes if x.lender == channel.source
            and (channel.target == "*" or x.borrower == channel.target)}))
        names = [loan.layer for loan in loans]
        span = "-" if not names else names[0] if len(names) == 1 else f"{names[0]} … {names[-1]}"
        table.add_row(channel.source, borrowers + (" (shared link)" if channel.target == "*" else ""),
                      f"{len(names)}: {span}", format_bytes(channel.bytes), format_bytes(channel.bandwidth) + "/s",
                      format_seconds(channel.seconds), *((format_bytes(channel.stash),) if stash else ()))
    return table
