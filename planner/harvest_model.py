"""Borrowed memory in the CP-SAT model: loans, channels, fetches and memory on both sides.

On top of :func:`pipeplan.planner.ilp_constraints.build_constrained`, built on the problem with memory
unconstrained (:meth:`pipeplan.planner.harvest_score.Lending.relaxed`, so the model's own memory row never
binds), for the rules of :mod:`pipeplan.planner.harvest_score` (costs in ticks, :mod:`pipeplan.planner.ilp_ticks`):

- ``w[v,d,l]`` — layer v runs on device d and keeps its weights with lender l (a device other than
  d that may lend, or d's host): ``Σ_l w[v,d,l] ≤ x[v][d]``.  Only layers with weights get them.
- ``F[c] ≥ lat[c]·open[c] + Σ ticks(bytes_v / bandwidth_c)·w`` for each channel c (lender → device,
  or a host's shared link), ``open[c] ≥ w`` for its loans: a channel's time per microbatch.
- ``fetch[d] ≥ Σ_l F[l→d] + G[d]`` with ``G[d] ≥ F[host] − F̄·(1 − use[d])`` and ``use[d] ≥
  w[v,d,host]``: a stage waits for every channel it reads, a shared host link whole (F̄ bounds it).
- ``T[d] ≥ fetch[d]`` (``overlap``), or ``T[d] ≥ compute + receive + send + fetch`` (``serial``),
  beside the model's own rows, which these dominate.
- ``S[d] ≥ STAGING_BUFFERS · bytes_v · Σ_l w[v,d,l]``: the staging buffers.
- memory of device d: ``Σ_v (param_v + kept·act_v)·x[v][d] + W[d] + E[d] − Σ borrowed + S[d] + Σ lent
  to d ≤`` its capacity after the margin and ``reserved``; of a host: ``Σ lent ≤ host_memory``.
  ``E[d]`` is 0 but with ``fetch="batch"``:

With ``fetch="batch"`` (M microbatches, one fetch round per batch, the stage run layer-major):

- ``M·T[d] + M − 1 ≥ fetch[d]`` (``overlap``), or ``M·T[d] + M − 1 ≥ M·(compute + receive + send) +
  fetch[d]`` (``serial``): ``T[d] ≥ ⌊fetch[d] / M⌋``, the fetch per microbatch rounded down like
  every term, so the bound stays one in seconds;
- ``borrows[d] ≥ w[v,d,l]`` for every loan of d, and ``E[d] + W[d] ≥ B_v·(x[v][d] + borrows[d] − 1)``
  where ``B_v`` (:attr:`Lending.batch_workspace`, M microbatches' live sets) passes the layer's
  workspace: a borrowing stage holds its whole batch's live activations.  ``borrows`` may be 1
  without loans; that only costs memory, so no plan is cut off.

With ``stash=True`` too, a borrowing stage may keep its other microbatches' activations with a
lender instead (:func:`pipeplan.planner.harvest_stash.add_stash`: ``st[d,l]``, its memory on both
sides, its traffic on the channel, which :func:`add_harvest` adds beside the weights' terms); the
``B_v`` row above then applies only when d does not stash.

Each fetch term is rounded down to ticks like every other term, so a plan costs at most its seconds
in ticks and a bound proven in ticks is a bound in seconds.  The ticks' scale leaves room for the
fetches: the largest stage time plus the largest possible fetch span about 2³⁰ ticks
(:func:`harvest_ticks`), and the model's horizon is raised by that fetch, so no stage-time variable
cuts off a plan that borrows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from pipeplan.planner.harvest import STAGING_BUFFERS
from pipeplan.planner.harvest_score import ChannelKey, Lending
from pipeplan.planner.harvest_stash import StashTerms, add_stash, worst_stash
from pipeplan.planner.ilp_constraints import ConstrainedModel
from pipeplan.planner.ilp_ticks import Ticks, resolution_for

__all__ = ["HarvestTerms", "add_harvest", "harvest_classes", "harvest_ticks"]

IntVar = cp_model.IntVar


def _worst_fetch(lending: Lending) -> float:
    """Seconds no stage's fetches can pass: every channel's latency and every weight over the
    slowest link a loan may cross."""
    problem = lending.problem
    links = [lending.link(lender, d) for d in range(problem.n_devices) for lender in lending.sources(d)]
    if not links:
        return 0.0
    slowest = min(bandwidth for bandwidth, _ in links)
    return sum(latency for _, latency in links) + (sum(problem.param_bytes) + worst_stash(lending)) / slowest


def _top(var: IntVar) -> int:
    """The largest value of ``var``'s domain (the proto's repeated field takes no negative index:
    ``domain[-1]`` reads 0)."""
    domain = var.proto.domain
    return int(domain[len(domain) - 1])


def harvest_ticks(lending: Lending) -> Ticks:
    """Ticks whose scale puts the largest stage time plus the largest fetch at about
    :func:`pipeplan.planner.ilp_ticks.resolution_for` ticks, with the horizon raised by that fetch."""
    problem = lending.problem
    resolution = resolution_for(problem)
    base = Ticks.of(problem, resolution)
    stage, worst = resolution / base.scale, _worst_fetch(lending)
    costs = Ticks.of(problem, resolution * stage / (stage + worst)) if stage > 0 and worst > 0 else base
    return replace(costs, horizon=costs.horizon + costs.ceiling(worst) + 1)


def harvest_classes(lending: Lending, classes: list[list[int]]) -> list[list[int]]:
    """``classes`` of interchangeable devices split where lending tells them apart: one may lend and
    the other not, or they share different host links."""
    out: list[list[int]] = []
    for cls in classes:
        by_rule: dict[tuple[bool, int | None], list[int]] = {}
        for d in cls:
            by_rule.setdefault((lending.lends[d], lending.host_of[d]), []).append(d)
        out.extend(by_rule.values())
    return out


@dataclass
class HarvestTerms:
    """The loan variables of a built model, to read a plan back and to hint one."""

    loans: dict[tuple[int, int, int], IntVar]  # (layer, device, lender) → w
    extra: list[IntVar]  # every other variable added (channels, fetches, staging): 0 for no loans
    stash: StashTerms

    def read(self, solver: cp_model.CpSolver, dev_of: list[int]) -> list[int | None]:
        """The lender of each layer's weights (None: kept at home) in the solver's plan."""
        home: list[int | None] = [None] * len(dev_of)
        for (v, d, lender), w in self.loans.items():
            if d == dev_of[v] and solver.boolean_value(w):
                home[v] = lender
        return home

    def hint_no_loans(self, model: cp_model.CpModel) -> None:
        """Complete a hint of a plan that borrows nothing (its other variables hinted already)."""
        for w in self.loans.values():
            model.add_hint(w, False)
        for var in self.extra:
            model.add_hint(var, 0)


def _batch_workspace(built: ConstrainedModel, lending: Lending, costs: Ticks, loans: dict[tuple[int, int, int], IntVar],
                     extra: list[IntVar], stash: StashTerms) -> list[IntVar | int]:
    """Per device, the memory a layer-major batch adds beyond the model's workspace ``W[d]`` (``E[d]``
    of the module; 0 unless ``fetch="batch"``), and with ``stash=True`` the stash terms in ``stash``."""
    problem, model, x = lending.problem, built.model, built.x
    k = problem.n_devices
    if not lending.options.batched:
        return [0] * k
    work = problem.workspace
    more = [(v, b) for v, (b, w) in enumerate(zip(lending.batch_workspace, work, strict=True)) if b > w]
    one = [(v, b) for v, (b, w) in enumerate(zip(lending.stash_workspace, work, strict=True)) if b > w]
    out: list[IntVar | int] = [0] * k
    for d in range(k):
        mine = [w for (_, dev, _), w in loans.items() if dev == d]
        rows = [(v, b) for v, b in more if d in problem.placement.allowed[v]]
        if not mine or not (rows or lending.options.stash):
            continue
        borrows = model.new_bool_var(f"borrows[{d}]")
        extra.append(borrows)
        for w in mine:
            model.add_implication(w, borrows)
        stashes: cp_model.LinearExpr | int = 0
        if lending.options.stash:
            stashes = add_stash(built, lending, costs, d, borrows, stash, extra)
        singles = [(v, b) for v, b in one if d in problem.placement.allowed[v]]
        if not rows and not singles:
            continue
        added = model.new_int_var(0, max(b for _, b in rows + singles), f"E[{d}]")
        extra.append(added)
        for v, b in rows:  # all M microbatches' live sets, unless it stashes
            model.add(added + built.workspace[d] >= b * (x[v][d] + borrows - stashes - 1))
        for v, b in singles if lending.options.stash else []:  # one microbatch's, when it stashes
            model.add(added + built.workspace[d] >= b * (x[v][d] + stashes - 1))
        out[d] = added
    return out


def add_harvest(built: ConstrainedModel, lending: Lending, costs: Ticks) -> HarvestTerms:
    """Add the loans, channels, fetches and both sides' memory rows to ``built`` (see the module)."""
    problem, model, x = lending.problem, built.model, built.x
    n, k = problem.n_layers, problem.n_devices
    allowed = problem.placement.allowed
    loans: dict[tuple[int, int, int], IntVar] = {}
    extra: list[IntVar] = []
    terms: dict[ChannelKey, list[tuple[int, IntVar]]] = {}
    lent: list[list[tuple[int, IntVar]]] = [[] for _ in range(lending.n_lenders)]
    staging_top = STAGING_BUFFERS * max(problem.param_bytes, default=0)
    staging = [model.new_int_var(0, staging_top, f"S[{d}]") for d in range(k)]
    extra += staging
    borrowed: list[list[tuple[int, IntVar]]] = [[] for _ in range(k)]
    rounds = lending.rounds
    stash = StashTerms()
    for v in range(n):
        nbytes = problem.param_bytes[v]
        if nbytes == 0:
            continue  # nothing to lend
        for d in sorted(allowed[v]):
            held: list[IntVar] = []
            for lender in lending.sources(d):
                w = model.new_bool_var(f"w[{v},{d},{lender}]")
                loans[v, d, lender] = w
                held.append(w)
                bandwidth, _ = lending.link(lender, d)
                terms.setdefault(lending.channel(lender, d), []).append((costs.ticks(nbytes / bandwidth), w))
                lent[lender].append((nbytes, w))
                borrowed[d].append((nbytes, w))
            if held:
                model.add(sum(held) <= x[v][d])
                model.add(staging[d] >= STAGING_BUFFERS * nbytes * sum(held))

    batch = _batch_workspace(built, lending, costs, loans, extra, stash)

    # -- channels (weights and stashes), and what each stage waits for -------------------------------
    channel: dict[ChannelKey, IntVar] = {}
    for key in [*terms, *(c for c in stash.channel if c not in terms)]:
        row, stashed = terms.get(key, []), stash.channel.get(key, [])
        lender, target = key
        latency = costs.ticks(lending.link(lender, target or 0)[1])
        top = latency + sum(c for c, _ in row) + sum(_top(h) for h, _ in stashed)
        f = channel[key] = model.new_int_var(0, top, f"F[{lender},{target}]")
        extra.append(f)
        paid: list[cp_model.LinearExprT] = [c * w for c, w in row if c]
        paid += [h for h, _ in stashed]
        if latency:
            opened = model.new_bool_var(f"open[{lender},{target}]")
            extra.append(opened)
            for w in [w for _, w in row] + [st for _, st in stashed]:
                model.add_implication(w, opened)
            paid.append(latency * opened)
        model.add(f >= sum(paid))
    fetch = [model.new_int_var(0, costs.horizon, f"fetch[{d}]") for d in range(k)]
    extra += fetch
    for d in range(k):
        reads = [channel[key] for key in channel if key[1] == d]
        host = lending.host_of[d]
        if host is not None and (host, None) in channel:
            shared = channel[host, None]
            use = model.new_bool_var(f"use[{d}]")
            waits = model.new_int_var(0, costs.horizon, f"G[{d}]")
            extra += [use, waits]
            for (_, dev, lender), w in loans.items():
                if dev == d and lender == host:
                    model.add_implication(w, use)
            if (d, host) in stash.stash:
                model.add_implication(stash.stash[d, host], use)
            top = _top(shared)
            model.add(waits >= shared - top * (1 - use))
            reads.append(waits)
        model.add(fetch[d] >= sum(reads))
        # rounds·T + rounds − 1 ≥ …: T at least the fetch per microbatch, rounded down (see the module)
        if problem.options.comm == "serial":
            model.add(rounds * built.stage[d] + rounds - 1
                      >= rounds * (built.compute[d] + built.recv[d] + built.send[d]) + fetch[d])
        else:
            model.add(rounds * built.stage[d] + rounds - 1 >= fetch[d])

    # -- memory on both sides -------------------------------------------------------------------------
    kept = problem.options.kept_microbatches
    for d in range(k):
        own = sum((problem.param_bytes[v] + kept * problem.act_bytes[v]) * x[v][d] for v in range(n))
        model.add(own + built.workspace[d] + batch[d] - sum(b * w for b, w in borrowed[d]) + staging[d]
                  + stash.buffers.get(d, 0) + sum(b * w for b, w in lent[d]) + sum(stash.lent.get(d, []))
                  <= lending.capacity[d])
    for lender in range(k, lending.n_lenders):
        model.add(sum(b * w for b, w in lent[lender]) + sum(stash.lent.get(lender, [])) <= lending.capacity[lender])
    return HarvestTerms(loans, extra, stash)
