"""One placement decision, as a worker process makes it: place, re-plan where it pays, record why.

The cluster's **total throughput** is the sum over its serving deployments of each one's predicted
throughput in samples per second (``batch_size / bottleneck``, the planner's own ``throughput``), each
deployment's bottleneck taken by the simulator on the loads everything else puts on its devices: the
cluster's fixed load (base loads and plain reserved plans) plus one co-runner per stage of every
other deployment (:func:`pipeplan.api.reservations.with_reserved`, as the registry counts them).

A decision, for a trigger (a deployment placed or stopped, base loads changed):

1. **Before**: each deployment's figures on the loads before the trigger.
2. **Place** (a new deployment): :func:`pipeplan.planner.ilp.solve` on the loads the others put on the
   devices.  If it fails, the decision fails and nothing else changes.
3. **Candidates** for a re-plan: the serving deployments with a stage on a device whose load the
   trigger changed, or every serving deployment when the trigger freed capacity (a stop, a base load
   that went down), since any of them may gain by moving there; the most slowed first.
4. **Re-plan** each candidate once, on the loads of all the others as they stand (moves applied so
   far included): :func:`pipeplan.planner.replan.replan` minimises its bottleneck plus its migration
   amortised over its horizon.  When that keeps the current plan, the re-plan is *declined* (the
   reason: no faster plan, or the move does not pay within the horizon).  When it moves, the move is
   applied only if the cluster's total throughput rises (the others' bottlenecks re-evaluated under
   the mover's new loads); otherwise it is *declined* with both totals.
5. **After**: every deployment's figures on the final loads, and the totals before and after.

Bounded: one solve for the new deployment, at most one re-plan per other deployment, each under
its own solver limits; the evaluations are simulator calls on cached problems.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeplan.api.keys import canonical, digest_of, finite
from pipeplan.api.placement.payload import PlacePayload, Tenant
from pipeplan.api.reservations import stage_kind, with_reserved
from pipeplan.costmodel.cluster import Cluster

if TYPE_CHECKING:
    from pipeplan.costmodel.graph import ModelGraph
    from pipeplan.planner.plan import Plan
    from pipeplan.planner.problem import Problem

__all__ = ["decide", "total_throughput"]

log = logging.getLogger(__name__)

_GAIN = 1e-9  # a move must raise the total by more than this share (float noise is no gain)

Loads = Mapping[str, Mapping[str, str]]  # deployment -> device -> kind


@dataclass
class _Held:
    """A deployment's plan during the decision, and the load kinds its stages put on devices."""

    plan: Plan
    loads: dict[str, str]


def total_throughput(throughputs: Iterable[float | None]) -> float:
    """The cluster's total: the sum of its deployments' samples per second (a missing figure counts 0).

    >>> total_throughput([100.0, 50.0, None])
    150.0
    """
    return float(sum(t for t in throughputs if t is not None))


def loaded(cluster: Cluster, fixed: Mapping[str, tuple[str, ...]], loads: Iterable[Mapping[str, str]]) -> Cluster:
    """``cluster`` with each device's base load plus the ``fixed`` kinds and one co-runner per entry of
    each of ``loads`` (device -> kind) on it."""
    kinds: dict[str, list[str]] = {d: list(k) for d, k in fixed.items()}
    for held in loads:
        for device, kind in held.items():
            kinds.setdefault(device, []).append(kind)
    return with_reserved(cluster, kinds)


def _lighter(before: Cluster, after: Cluster) -> bool:
    """Whether some device's base load went down."""
    return any(sum(a.load.shares()) < sum(b.load.shares()) for b, a in zip(before.devices, after.devices, strict=True))


class _Decision:
    def __init__(self, payload: PlacePayload) -> None:
        self.payload = payload
        self.tenants = {t.id: t for t in payload.tenants}
        self.graphs: dict[str, ModelGraph] = {}
        self.captured: dict[str, Any] | None = None
        self._problems: dict[tuple[str, str], Problem] = {}
        self._models: dict[str, Any] = {}

    # -- problems and figures ----------------------------------------------------------------------

    def graph(self, tenant: Tenant) -> ModelGraph:
        if tenant.id not in self.graphs:
            from pipeplan.costmodel.graph import ModelGraph

            if tenant.graph_text is not None:
                self.graphs[tenant.id] = ModelGraph.from_json(tenant.graph_text)
            else:
                from pipeplan.costmodel.zoo import capture_model

                zoo = tenant.zoo
                assert zoo is not None, "a tenant has a graph or a zoo model"
                graph = capture_model(zoo.name, zoo.batch, granularity=zoo.granularity, seq_len=zoo.seq_len,
                                      image_size=zoo.image_size, kv_context=zoo.kv_context)
                doc = graph.to_dict()
                self.captured = {"digest": digest_of(doc), "doc": canonical(doc), "model": graph.model,
                                 "layers": len(graph), "edges": graph.nx.number_of_edges()}
                self.graphs[tenant.id] = graph
        return self.graphs[tenant.id]

    def costmodel(self, tenant: Tenant) -> Any:
        if tenant.costmodel not in self._models:
            from pipeplan.costmodel.registry import load_cost_model

            self._models[tenant.costmodel] = load_cost_model(tenant.costmodel)
        return self._models[tenant.costmodel]

    def problem(self, tenant: Tenant, cluster: Cluster) -> Problem:
        """``tenant``'s problem on ``cluster`` (loads included), built once per distinct state."""
        from pipeplan.planner.problem import Problem

        key = (tenant.id, canonical([d.load.model_dump(mode="json") for d in cluster.devices]))
        if key not in self._problems:
            self._problems[key] = Problem(self.graph(tenant), cluster, self.costmodel(tenant), tenant.options)
        return self._problems[key]

    def view(self, cluster: Cluster, held: Mapping[str, _Held], without: str) -> Cluster:
        """``cluster`` as deployment ``without`` sees it: the fixed load and every other one's stages."""
        return loaded(cluster, self.payload.fixed, (h.loads for d, h in sorted(held.items()) if d != without))

    def bottleneck(self, tenant: Tenant, plan: Plan, cluster: Cluster, held: Mapping[str, _Held]) -> float:
        from pipeplan.planner.simulate import evaluate

        problem = self.problem(tenant, self.view(cluster, held, tenant.id))
        return evaluate(problem, plan.assignment(), plan.device_order()).bottleneck

    def figures(self, cluster: Cluster, held: Mapping[str, _Held]) -> dict[str, tuple[float, float]]:
        """Each held deployment's (bottleneck, throughput) on ``cluster`` with all of ``held``."""
        out = {}
        for d, h in held.items():
            b = self.bottleneck(self.tenants[d], h.plan, cluster, held)
            out[d] = (b, h.plan.batch_size / b if b > 0 else float("inf"))
        return out

    def loads_of(self, tenant: Tenant, plan: Plan, cluster: Cluster) -> dict[str, str]:
        graph = self.graph(tenant)
        return {s.device: stage_kind((graph[name] for name in s.layers), cluster.device(s.device))
                for s in plan.stages}

    # -- the decision ------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        from pipeplan.planner.ilp import solve
        from pipeplan.planner.plan import Plan

        p = self.payload
        trigger = p.trigger
        before: dict[str, _Held] = {}
        for t in p.tenants:
            if t.role in ("serving", "leaving"):
                assert t.plan is not None, f"deployment {t.id} serves without a plan"
                before[t.id] = _Held(Plan.from_dict(t.plan), dict(t.loads))
        figures_before = self.figures(p.before, before)
        held = {d: h for d, h in before.items() if self.tenants[d].role == "serving"}
        entries: dict[str, dict[str, Any]] = {}
        new_plans: dict[str, Plan] = {}

        changed: set[str] = set(trigger.devices)
        for t in p.tenants:
            if t.role == "new":
                plan = solve(self.problem(t, self.view(p.after, held, t.id)), t.solver.options())
                plan.costmodel = t.costmodel_name
                held[t.id] = _Held(plan, self.loads_of(t, plan, p.after))
                new_plans[t.id] = plan
                changed |= set(held[t.id].loads)
                entries[t.id] = {"action": "placed", "reason": f"planned against the loads on {p.after.name!r}: "
                                 f"{_describe_loads(self.view(p.after, held, t.id), held[t.id].loads)}"}
            elif t.role == "leaving":
                changed |= set(t.loads)
                entries[t.id] = {"action": "stopped", "reason": "stopped: its reservation was released"}
        freed = trigger.kind == "stop" or (trigger.kind == "load" and _lighter(p.before, p.after))

        # -- candidates, the most slowed first ------------------------------------------------------
        now = self.figures(p.after, held)
        serving = [d for d in held if self.tenants[d].role == "serving"]
        candidates = [d for d in serving if freed or changed & set(held[d].loads)]
        candidates.sort(key=lambda d: (-now[d][0] / figures_before[d][0] if figures_before[d][0] > 0 else 0.0, d))
        for d in serving:
            if d not in candidates:
                entries[d] = {"action": "kept", "reason": "no device it uses changed load"}
        for d in candidates:
            entries[d] = self._replan(d, held, new_plans)

        figures_after = self.figures(p.after, held)
        rows = []
        for t in p.tenants:
            entry = entries[t.id]
            b0, r0 = figures_before.get(t.id, (None, None))
            b1, r1 = figures_after.get(t.id, (None, None))
            rows.append({"deployment": t.id, **entry, "bottleneck_before": b0, "bottleneck_after": b1,
                         "throughput_before": r0, "throughput_after": r1})
        record = {"trigger": {"kind": trigger.kind, "deployment": trigger.deployment, "devices": list(trigger.devices),
                              "what": trigger.describe()},
                  "considered": candidates, "entries": rows,
                  "total_before": total_throughput(r for _, r in figures_before.values()),
                  "total_after": total_throughput(r for _, r in figures_after.values())}
        plans = {d: {"plan": finite(plan.to_dict()), "loads": held[d].loads} for d, plan in new_plans.items()}
        return {"graph": self.captured, "plans": plans,
                "figures": {d: list(f) for d, f in figures_after.items()}, "record": finite(record)}

    def _replan(self, d: str, held: dict[str, _Held], new_plans: dict[str, Plan]) -> dict[str, Any]:
        """Re-plan deployment ``d`` (serving) on the others' loads; apply it to ``held`` when it pays."""
        from pipeplan.planner.migration import Horizon
        from pipeplan.planner.replan import replan

        p, t = self.payload, self.tenants[d]
        if t.options.objective != "throughput":
            return {"action": "declined", "reason": "its objective is latency: re-planning minimises the bottleneck "
                                                     "plus the migration, so it is not re-planned"}
        current = held[d].plan
        problem = self.problem(t, self.view(p.after, held, d))
        found = replan(problem, current, Horizon.parse(t.horizon), options=t.solver.options())
        found.costmodel = t.costmodel_name
        m = found.migration
        assert m is not None
        migration = {"decision": m.decision, "bytes": m.bytes, "seconds": m.seconds, "moves": len(m.moves),
                     "model_bytes": m.model_bytes, "horizon_microbatches": m.horizon_microbatches,
                     "break_even_microbatches": m.break_even_microbatches,
                     "stay_bottleneck": m.stay.bottleneck if m.stay is not None else None,
                     "fresh_bottleneck": m.fresh.bottleneck if m.fresh is not None else None,
                     "plan_bottleneck": found.bottleneck}
        if m.decision == "stay":
            return {"action": "declined", "migration": migration, "reason": _why_stay(m)}
        trial = {**held, d: _Held(found, self.loads_of(t, found, p.after))}
        total_now = total_throughput(r for _, r in self.figures(p.after, held).values())
        total_then = total_throughput(r for _, r in self.figures(p.after, trial).values())
        migration.update(total_without=total_now, total_with=total_then)
        if m.stay is not None and total_then <= total_now * (1 + _GAIN):
            return {"action": "declined", "migration": migration,
                    "reason": f"moving it would not raise the cluster's total throughput: {total_now:.6g} → "
                              f"{total_then:.6g} samples/s (its own bottleneck {m.stay.bottleneck:.4g} → "
                              f"{found.bottleneck:.4g} s, the others slowed by its new loads)"}
        held[d] = trial[d]
        new_plans[d] = found
        why = (f"its current plan cannot stay ({m.stay_invalid})" if m.stay is None else
               f"bottleneck {m.stay.bottleneck:.4g} → {found.bottleneck:.4g} s for {m.seconds:.3g} s of migration "
               f"({m.bytes} bytes) over a horizon of {m.horizon_microbatches:.4g} microbatches; cluster total "
               f"{total_now:.6g} → {total_then:.6g} samples/s")
        return {"action": "replanned", "migration": migration, "reason": why}


def _why_stay(m: Any) -> str:
    stay, fresh = m.stay, m.fresh
    if fresh is None or stay is None or fresh.bottleneck >= stay.bottleneck * (1 - _GAIN):
        return (f"no faster plan under the new loads: the best found has bottleneck "
                f"{fresh.bottleneck if fresh is not None else float('nan'):.4g} s, the current one "
                f"{stay.bottleneck if stay is not None else float('nan'):.4g} s")
    even = m.break_even_microbatches
    return (f"moving does not pay within its horizon of {m.horizon_microbatches:.4g} microbatches: the fresh "
            f"plan's bottleneck {fresh.bottleneck:.4g} s against {stay.bottleneck:.4g} s costs "
            f"{fresh.migration_seconds:.3g} s of migration"
            + (f", which pays back after {even:.4g} microbatches" if even is not None else ""))


def _describe_loads(cluster: Cluster, devices: Iterable[str]) -> str:
    return ", ".join(f"{d} {cluster.device(d).load.describe()}" for d in sorted(devices)) or "no devices"


def decide(payload: PlacePayload) -> dict[str, Any]:
    """The decision for ``payload`` (see the module docstring): ``plans`` (deployment -> new plan and
    its loads), ``figures`` (deployment -> predicted bottleneck and throughput after), ``record`` (what
    the decision stores), ``graph`` (a zoo model captured on the way, else None)."""
    return _Decision(payload).run()
