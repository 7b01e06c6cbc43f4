"""Stashed activations (``HarvestOptions.stash``): sizes, traffic and the CP-SAT terms.

With ``fetch="batch"`` a borrowing stage runs its M microbatches layer-major and so holds all of
their live activations between its layers (``max(workspace_v, M·live_v)``,
:attr:`pipeplan.planner.harvest_score.Lending.batch_workspace`).  With ``stash=True`` it may instead
keep the microbatches it is not computing with a lender (a device or its host, the same sources as
weights): after a layer, each microbatch's state is sent out, and it is fetched back before the
next layer runs it, the next one prefetched while the current one computes.  The executor visits
the microbatches in alternating order (0…M−1, then M−1…0), so the one it finished last stays, and
M − 1 travel at each boundary.  In the model's terms, for a stage holding layers ``V_d``:

- **per microbatch**: ``C_d = max_{v ∈ V_d} cut_v`` (``cut_v``: what one microbatch holds after
  layer v, :func:`pipeplan.costmodel.memory.liveness`, a bound on what the stage holds there);
- **lender**: holds ``(M − 1)·C_d`` (at most M − 1 microbatches are away at once), under its
  capacity after the margin, as lent weights are;
- **borrower**: its workspace term is ``max(workspace_v, live_v)`` (one microbatch's working set)
  plus ``STASH_BUFFERS·C_d`` (the next microbatch's state arriving, the last one's leaving),
  instead of ``max(workspace_v, M·live_v)``;
- **traffic** per batch: ``2·(M − 1)·Σ_{v ∈ V_d, v not the stage's last} cut_v`` over the channel
  lender → d (a host's shared link for the host), beside the weights it carries: the channel's
  round grows by ``traffic / bandwidth`` and every stage reading it waits for it (contention as
  for weights).  Its latency is the channel's, paid once a round as for weights.

CP-SAT (:func:`add_stash`), per device d that may borrow and lender l it may borrow from:
``st[d,l]`` with ``Σ_l st[d,l] ≤ borrows[d]``; ``C[d] ≥ cut_v·(x[v][d] + Σ_l st[d,l] − 1)``;
``Z[d,l] ≥ (M−1)·C[d] − (M−1)·max cut·(1 − st[d,l])`` on l's memory row; the traffic in ticks
``H[d,l] ≥ Σ_v t_v·(x[v][d] − y[v][d]) − (Σ t)·(1 − st[d,l])`` on the channel, where ``y[v][d] ≤
x[v][d]`` and ``y[v][d] ≤ 1 − later[v][d]``, ``later[v][d] ≥ x[v+1][d]``, ``later[v][d] ≥
later[v+1][d]``: y may be 1 on d's last layer only (in layer order), whose cut is not sent.  The
traffic ticks are rounded down like every term, so the bound holds in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

from pipeplan.planner.harvest import STASH_BUFFERS

if TYPE_CHECKING:
    from pipeplan.planner.harvest_score import ChannelKey, Lending
    from pipeplan.planner.ilp_constraints import ConstrainedModel
    from pipeplan.planner.ilp_ticks import Ticks

__all__ = ["StashTerms", "add_stash", "stash_sizes", "worst_stash"]

IntVar = cp_model.IntVar


def stash_sizes(lending: Lending, layers: Sequence[int]) -> tuple[int, int]:
    """(bytes one microbatch holds between the stage's layers at most, bytes sent out and fetched
    back per batch) for a stage holding ``layers`` (indices, any order; the last is the largest)."""
    if not layers:
        return 0, 0
    cut, m = lending.cut, lending.problem.options.microbatches
    last = max(layers)
    return max(cut[v] for v in layers), 2 * (m - 1) * sum(cut[v] for v in layers if v != last)


def worst_stash(lending: Lending) -> int:
    """Bytes no stage's stash traffic can pass in a batch (for the ticks' scale)."""
    if not lending.options.stash:
        return 0
    return 2 * (lending.problem.options.microbatches - 1) * sum(lending.cut)


@dataclass
class StashTerms:
    """The stash variables added to a model."""

    stash: dict[tuple[int, int], IntVar] = field(default_factory=dict)  # (device, lender) → st
    stashes: dict[int, cp_model.LinearExpr] = field(default_factory=dict)  # device → Σ_l st[d,l]
    channel: dict[ChannelKey, list[tuple[IntVar, IntVar]]] = field(default_factory=dict)  # → [(H, st)]
    lent: dict[int, list[IntVar]] = field(default_factory=dict)  # lender → [Z]
    buffers: dict[int, IntVar] = field(default_factory=dict)  # device → STASH_BUFFERS·C[d] on its row

    def read(self, solver: cp_model.CpSolver, k: int) -> list[int | None]:
        """The stash lender of each device (None: no stash) in the solver's plan."""
        out: list[int | None] = [None] * k
        for (d, lender), st in self.stash.items():
            if solver.boolean_value(st):
                out[d] = lender
        return out


def add_stash(built: ConstrainedModel, lending: Lending, costs: Ticks, d: int, borrows: IntVar,
              terms: StashTerms, extra: list[IntVar]) -> cp_model.LinearExpr | int:
    """Add device d's stash choice (see the module); return Σ_l st[d,l] (1 when d stashes)."""
    problem, model, x = lending.problem, built.model, built.x
    m = problem.options.microbatches
    cut = lending.cut
    rows = [v for v in range(problem.n_layers) if d in problem.placement.allowed[v] and cut[v] > 0]
    chosen: list[IntVar] = []
    for lender in lending.sources(d):
        st = model.new_bool_var(f"st[{d},{lender}]")
        terms.stash[d, lender] = st
        chosen.append(st)
        extra.append(st)
    if not chosen:
        return 0
    stashes: cp_model.LinearExpr = cp_model.LinearExpr.sum(chosen)
    model.add(stashes <= borrows)
    terms.stashes[d] = stashes
    if not rows:
        return stashes
    top = max(cut[v] for v in rows)
    c = model.new_int_var(0, top, f"C[{d}]")
    buffers = model.new_int_var(0, STASH_BUFFERS * top, f"Q[{d}]")
    extra += [c, buffers]
    for v in rows:
        model.add(c >= cut[v] * (x[v][d] + stashes - 1))
    model.add(buffers == STASH_BUFFERS * c)
    terms.buffers[d] = buffers
    # y[v] = 1 only on d's last layer (no later layer on d): its cut is not sent.  later[v] ≥ x[u][d]
    # for every u > v (a chain of ORs); the solver wants y, so later stays at the OR it must be.
    later: dict[int, IntVar] = {}
    for v in range(problem.n_layers - 2, -1, -1):
        later[v] = model.new_bool_var(f"later[{v},{d}]")
        model.add(later[v] >= x[v + 1][d])
        if v + 1 in later:
            model.add(later[v] >= later[v + 1])
    skip = {v: model.new_bool_var(f"y[{v},{d}]") for v in rows}
    extra += [*later.values(), *skip.values()]
    for v, y in skip.items():
        model.add(y <= x[v][d])
        if v in later:
            model.add(y <= 1 - later[v])
    for lender, st in zip(lending.sources(d), chosen, strict=True):
        held = model.new_int_var(0, (m - 1) * top, f"Z[{d},{lender}]")
        model.add(held >= (m - 1) * c - (m - 1) * top * (1 - st))
        terms.lent.setdefault(lender, []).append(held)
        bandwidth, _ = lending.link(lender, d)
        ticks = {v: costs.ticks(2 * (m - 1) * cut[v] / bandwidth) for v in rows}
        big = sum(ticks.values())
        traffic = model.new_int_var(0, big, f"H[{d},{lender}]")
        model.add(traffic >= sum(t * (x[v][d] - skip[v]) for v, t in ticks.items() if t) - big * (1 - st))
        terms.channel.setdefault(lending.channel(lender, d), []).append((traffic, st))
        extra += [held, traffic]
    return stashes
