"""Stashing a layer-major stage's activations with a lender (``HarvestOptions.stash``), with the real
CP-SAT, on a hand-built problem whose optimum is worked out by hand.

A chain l0 → l1 → l2 → l3: each layer has 1 GB of weights, 10⁷ FLOPs (10 ms at 1 GFLOP/s) and hands
on 0.125 GB (its output, read by the next).  Per microbatch (liveness): l0 holds 0.125 GB while it
runs, l1…l3 0.25 GB (input and output); after l0, l1 and l2 one microbatch holds 0.125 GB (the
cut), after l3 nothing (the model's output).  M = 4 microbatches, one in flight.  d0 must run all
four layers (d1 and d2 are forbidden stages) and can hold 3.75 GB; a borrower keeps two staging
buffers of its largest loan (2 GB).  With ``fetch="batch"`` d0 runs its batch layer-major:

- without a stash it holds all four microbatches' live sets, 4 × 0.25 = 1 GB: keeping k layers'
  weights, k + 2 + 1 ≤ 3.75 leaves k = 0, so all four (4 GB) must be lent, but d1 (the one lender)
  holds 3.5 GB: infeasible;
- with a stash it holds one microbatch's 0.25 GB and two stash buffers of 0.125 GB: k + 2 + 0.5 ≤
  3.75, so k = 1 and three layers are lent to d1, which also holds (M − 1) × 0.125 = 0.375 GB of
  stashed activations: 3.375 ≤ 3.5.  A round over the 10 GB/s link carries 3 GB of weights and
  2 (M − 1) × (3 × 0.125) = 2.25 GB of stash out and back (l3's cut is not sent: it is the last):
  525 ms a batch, 131.25 ms a microbatch, the bottleneck (compute is 40 ms);
- a lender of 3.25 GB cannot take the 3 GB and the 0.375 GB stash: infeasible again.
"""

from __future__ import annotations

import pytest

from pipeplan.costmodel.cluster import Cluster
from pipeplan.planner.builder import GraphBuilder
from pipeplan.planner.harvest import HarvestOptions
from pipeplan.planner.harvest_score import Lending, score
from pipeplan.planner.harvest_solve import solve_harvest
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import PlanError, PlanOptions, Problem
from tests.planner.test_harvest import EXACT, GB, MS, ROOFLINE, cluster

CUT = GB // 8
BATCH = HarvestOptions.of(fetch="batch")
STASH = HarvestOptions.of(fetch="batch", stash=True)


def stash_problem(lender_memory: float = 3.5 * GB) -> Problem:
    b = GraphBuilder("chain")
    for i in range(4):
        b.layer(f"l{i}", flops=10**7, param_bytes=GB, activation_bytes=CUT, inputs={f"l{i - 1}": CUT} if i else {})
    where: Cluster = cluster({"d0": (1.0, 3.75 * GB), "d1": (1.0, lender_memory)}, default=10e9)
    return Problem(b.build(), where, ROOFLINE, PlanOptions(microbatches=4, memory_margin=0.0, in_flight=1,
                                                          forbid_devices=["d1"]))


def test_the_terms_as_worked_out_by_hand() -> None:
    lending = Lending(stash_problem(), STASH)
    assert lending.cut == [CUT, CUT, CUT, 0]
    assert lending.batch_workspace == [4 * CUT, 8 * CUT, 8 * CUT, 8 * CUT]
    assert lending.stash_workspace == [CUT, 2 * CUT, 2 * CUT, 2 * CUT]


def test_stashing_is_what_makes_the_batch_fit_and_the_optimum_is_exact() -> None:
    p = stash_problem()
    with pytest.raises(PlanError, match=r"even with harvesting.*holds the live activations of all 4 microbatches "
                                        r"at once \(fetch='microbatch' holds one, stash=True lets a lender hold all"):
        solve_harvest(p, BATCH, EXACT)
    # The shortfall, named by the scorer for the best loans without a stash: 1 + 2 + 1 GB on 3.75.
    loans = {"l1": "d1", "l2": "d1", "l3": "d1"}
    found = score(Lending(p, BATCH), ["d0"] * 4, loans)
    assert found.violation is not None and found.violation.endswith(f": {GB // 4} bytes short")
    plan = solve_harvest(p, STASH, EXACT)
    assert plan.certificate.status == "OPTIMAL", plan.certificate
    assert plan.certificate.solver is not None and plan.certificate.solver.solution == "cp-sat"
    assert plan.bottleneck == pytest.approx(131.25 * MS)
    assert plan.harvest is not None
    assert len(plan.harvest.loans) == 3 and {loan.lender for loan in plan.harvest.loans} == {"d1"}
    (stash,) = plan.harvest.stashes
    assert (stash.borrower, stash.lender) == ("d0", "d1")
    assert (stash.per_microbatch, stash.bytes, stash.traffic) == (CUT, 3 * CUT, 2 * 3 * 3 * CUT)
    assert stash.seconds == pytest.approx(225 * MS)
    (channel,) = plan.harvest.channels
    assert (channel.bytes, channel.stash, channel.seconds) == (3 * GB + 18 * CUT, 18 * CUT, pytest.approx(525 * MS))
    # The memory map: d1 holds 3 GB of weights and 0.375 GB of d0's activations; d0 one microbatch's
    # working set (0.25 GB) and two stash buffers (0.25 GB) beside 1 GB of weights and 2 GB of staging.
    memory = {row.device: row for row in plan.harvest.memory}
    assert (memory["d1"].lent, memory["d1"].lent_stash, memory["d1"].free) == (3 * GB + 3 * CUT, 3 * CUT, GB // 8)
    assert (memory["d0"].own, memory["d0"].borrowed, memory["d0"].borrowed_stash) == (
        GB + 2 * GB + 2 * CUT + 2 * CUT, 3 * GB + 3 * CUT, 3 * CUT)
    (stage,) = plan.harvest.stages
    assert (stage.stashed, stage.stash_staging) == (3 * CUT, 2 * CUT)
    assert Plan.from_dict(plan.to_dict()).harvest == plan.harvest
    assert plan.to_dict()["harvest"]["options"]["stash"] is True


def test_a_lender_too_small_for_the_stash_is_refused() -> None:
    p = stash_problem(lender_memory=3.25 * GB)
    with pytest.raises(PlanError, match=r"even with harvesting.*with stash=True the lenders hold all but one, "
                                        r"within their own spare memory"):
        solve_harvest(p, STASH, EXACT)
    found = score(Lending(p, STASH), ["d0"] * 4, {"l1": "d1", "l2": "d1", "l3": "d1"}, stashes={"d0": "d1"})
    assert found.violation == (f"'d1' needs 0 bytes for its stage and lends {3 * GB + 3 * CUT} (of which {3 * CUT} "
                               f"bytes are other stages' stashed activations) but offers {int(3.25 * GB)} after the "
                               f"margin and reservations: {3 * CUT - GB // 4} bytes short")


def test_a_stash_is_refused_where_it_cannot_be() -> None:
    with pytest.raises(PlanError, match=r"harvest stash needs fetch='batch'"):
        HarvestOptions.of(stash=True)
    with pytest.raises(PlanError, match=r"harvest stash must be true or false, got 'yes'"):
        HarvestOptions(fetch="batch", stash="yes")  # type: ignore[arg-type]
    p = stash_problem()
    found = score(Lending(p, STASH), ["d0"] * 4, {}, stashes={"d0": "d1"})
    assert found.violation is not None and "only a stage that borrows weights runs its batch layer-major" in \
        found.violation
    found = score(Lending(p, BATCH), ["d0"] * 4, {"l1": "d1"}, stashes={"d0": "d1"})
    assert found.violation == "'d0' stashes its activations with 'd1', but the harvest options say stash=False"


def test_the_tables_show_the_stash() -> None:
    from rich.console import Console

    from pipeplan.render import loans_table, memory_map_table

    plan = solve_harvest(stash_problem(), STASH, EXACT)
    console = Console(width=200, record=True)
    console.print(memory_map_table(plan))
    console.print(loans_table(plan))
    text = console.export_text()
    assert "lent stash" in text and "borrowed stash" in text and "of which stash" in text
    assert "358 MiB" in text, text  # d1 holds 0.375 GB of d0's activations
