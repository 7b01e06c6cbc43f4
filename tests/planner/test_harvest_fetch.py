"""Fetching borrowed weights once per batch (``HarvestOptions.fetch="batch"``) against once per
microbatch, with the real CP-SAT, on hand-built problems whose optimum is worked out by hand.

As in ``test_harvest.py``: every layer has 1 GB of weights, a device at 1 GFLOP/s runs a layer of
10⁷ FLOPs in 10 ms, a borrower keeps two staging buffers of its largest loan (2 GB), so d0 (3.5 GB)
running four layers alone must lend three to d1.  Four microbatches a batch.
"""

from __future__ import annotations

import pytest

from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.planner.builder import GraphBuilder
from pipeplan.planner.harvest import HarvestOptions
from pipeplan.planner.harvest_score import Lending, batch_latency, score
from pipeplan.planner.harvest_solve import solve_harvest
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import PlanError, PlanOptions, Problem
from tests.planner.test_harvest import EXACT, GB, MS, ROOFLINE, chain, cluster


def problem(graph: ModelGraph, where: Cluster, **options: object) -> Problem:
    return Problem(graph, where, ROOFLINE, PlanOptions(microbatches=4, memory_margin=0.0, **options))  # type: ignore[arg-type]


def chain_with_workspace(n: int, workspace: int) -> GraphBuilder:
    b = GraphBuilder("chain")
    for i in range(n):
        b.layer(f"l{i}", flops=10**7, param_bytes=GB, workspace_bytes=workspace, inputs={f"l{i - 1}": 0} if i else {})
    return b


def test_fetching_once_per_batch_divides_a_fetch_bound_stage_by_the_microbatches() -> None:
    # d0 runs all four layers (40 ms) and fetches three from d1 over a 10 GB/s link: 300 ms a round.
    # Per microbatch that round is the bottleneck; once per batch it serves 4 microbatches: 75 ms.
    p = problem(chain(4, flops=10**7), cluster({"d0": (1.0, 3.5 * GB), "d1": (1.0, 4 * GB)}, default=10e9),
                forbid_devices=["d1"])
    each = solve_harvest(p, HarvestOptions(), EXACT)
    once = solve_harvest(p, HarvestOptions.of(fetch="batch"), EXACT)
    assert each.bottleneck == pytest.approx(300 * MS) and once.bottleneck == pytest.approx(75 * MS)
    assert once.certificate.status == "OPTIMAL" and each.certificate.status == "OPTIMAL"
    assert once.certificate.solver is not None and once.certificate.solver.solution == "cp-sat"
    assert once.harvest is not None and each.harvest is not None
    assert len(once.harvest.loans) == 3 and {loan.lender for loan in once.harvest.loans} == {"d1"}
    # A channel's round is the same 3 GB and 300 ms either way; the stage pays it once per batch.
    (channel,) = once.harvest.channels
    assert (channel.bytes, channel.seconds) == (3 * GB, pytest.approx(300 * MS))
    assert once.harvest.stages[0].fetch == pytest.approx(75 * MS)
    assert each.harvest.stages[0].fetch == pytest.approx(300 * MS)
    # One stage that takes the whole batch: 4 × 75 ms.
    assert once.latency == pytest.approx(300 * MS)
    doc = once.to_dict()
    assert doc["harvest"]["options"]["fetch"] == "batch"
    assert Plan.from_dict(doc).harvest == once.harvest


def test_a_batch_of_live_activations_can_leave_no_room() -> None:
    # Each layer needs 0.25 GB of workspace per microbatch (in_flight=1: one microbatch in flight).
    # Per microbatch d0 holds 1 GB of weights + 2 GB staging + 0.25 GB = 3.25 ≤ 3.75 GB.  Once per
    # batch it holds the four microbatches' 1 GB of live sets: 4 GB, so it must lend all four layers,
    # but d1 (3 GB) can hold only three.
    graph = chain_with_workspace(4, GB // 4).build()
    p = problem(graph, cluster({"d0": (1.0, 3.75 * GB), "d1": (1.0, 3 * GB)}), forbid_devices=["d1"],
                in_flight=1)
    each = solve_harvest(p, HarvestOptions(), EXACT)
    assert each.harvest is not None and len(each.harvest.loans) == 3
    assert {row.device: row.own for row in each.harvest.memory}["d0"] == 3 * GB + GB // 4
    with pytest.raises(PlanError, match=r"even with harvesting.*fetch='batch' a borrowing stage holds the live "
                                        r"activations of all 4 microbatches at once"):
        solve_harvest(p, HarvestOptions.of(fetch="batch"), EXACT)
    # The same loans, scored once per batch: d0 is 0.5 GB short, and the scorer says why.
    batch = Lending(p, HarvestOptions.of(fetch="batch"))
    assert batch.batch_workspace == [GB] * 4
    found = score(batch, ["d0"] * 4, {name: "d1" for name in ("l1", "l2", "l3")})
    assert found.violation == (f"'d0' needs {4 * GB} bytes for its stage (with fetch='batch' it holds the live "
                               f"activations of all 4 microbatches at once) and lends 0 but offers {int(3.75 * GB)} "
                               f"after the margin and reservations: {GB // 4} bytes short")


def test_a_stage_that_takes_the_whole_batch_cuts_the_flow_shop() -> None:
    assert batch_latency([1.0, 2.0, 1.0], [False, False, False], 3) == pytest.approx(1 + 2 + 1 + 2 * 2)
    assert batch_latency([1.0, 2.0, 1.0], [False, True, False], 3) == pytest.approx(3 + 6 + 3)
    assert batch_latency([2.0], [True], 4) == pytest.approx(8.0)


@pytest.mark.parametrize("fetch", ["layer", "", 2])
def test_a_bad_fetch_mode_is_refused_naming_it(fetch: object) -> None:
    with pytest.raises(PlanError, match=rf"harvest fetch must be one of microbatch, batch, got {fetch!r}"):
        HarvestOptions(fetch=fetch)  # type: ignore[arg-type]
    assert HarvestOptions.of(fetch=" Batch ").fetch == "batch"
