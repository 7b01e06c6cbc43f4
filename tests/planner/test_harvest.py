"""Harvesting spare memory, on hand-built problems whose optimum is worked out by hand, with the real
CP-SAT: a model that cannot fit without borrowing gets a plan with it, borrowing saves a stage, a
lender's own memory and reservations limit what it lends, borrowers on one host link contend, the
host tier loses to a neighbour, the plan JSON carries the memory map, and bad options are refused.

Every layer has 1 GB of weights and nothing else (no activations, free transfers); a device at
1 GFLOP/s runs a layer of 10⁸ FLOPs in 100 ms.  A borrower keeps two staging buffers of its largest
loan (2 GB here), so a device of 3.5 GB holding four layers must lend out three: 1 + 2 ≤ 3.5.
"""

from __future__ import annotations

import itertools

import pytest

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.graph import ModelGraph
from pipeplan.planner.builder import GraphBuilder
from pipeplan.planner.harvest import HarvestOptions
from pipeplan.planner.harvest_score import Lending, score
from pipeplan.planner.harvest_solve import solve_harvest
from pipeplan.planner.ilp import SolverOptions, solve
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import PlanError, PlanOptions, Problem

EXACT = SolverOptions(time_limit=20.0, workers=2, seed=0)
ROOFLINE = RooflineModel(overhead=0.0)
GB = 10**9
MS = 1e-3


def cluster(devices: dict[str, tuple[float, float]], links: dict[tuple[str, str], float] | None = None,
            default: float = 100e9) -> Cluster:
    """Devices as id → (GFLOP/s, memory bytes), one host; links at the given bytes/s (else
    ``default``), no latency."""
    links = links or {}
    return Cluster.from_dict({
        "name": "hand",
        "devices": [{"id": d, "memory": m, "peak_flops": s * 1e9, "mem_bandwidth": 1e15}
                    for d, (s, m) in devices.items()],
        "links": [{"a": a, "b": b, "bandwidth": links.get((a, b), links.get((b, a), default)), "latency": 0.0}
                  for a, b in itertools.combinations(devices, 2)]})


def chain(n: int, flops: int = 10**8) -> ModelGraph:
    """l0 → l1 → … → l(n−1), each with 1 GB of weights, handing nothing on."""
    b = GraphBuilder("chain")
    for i in range(n):
        b.layer(f"l{i}", flops=flops, param_bytes=GB, inputs={f"l{i - 1}": 0} if i else {})
    return b.build()


def problem(graph: ModelGraph, where: Cluster, **options: object) -> Problem:
    return Problem(graph, where, ROOFLINE, PlanOptions(microbatches=1, memory_margin=0.0, **options))  # type: ignore[arg-type]


def lenders_of(plan: Plan) -> dict[str, str]:
    assert plan.harvest is not None
    return {loan.layer: loan.lender for loan in plan.harvest.loans}


def test_a_model_that_cannot_fit_without_borrowing_gets_a_plan_with_it() -> None:
    # d0 alone may run layers (d1 is forbidden: a lender outside the pipeline).  Four layers need
    # 4 GB, d0 offers 3.5; lending three to d1 leaves 1 GB of weights and 2 GB of staging.  The
    # fetches (3 GB at 100 GB/s: 30 ms) hide under the 400 ms of compute: 400 ms, which the
    # memory-relaxed bound proves.
    p = problem(chain(4), cluster({"d0": (1.0, 3.5 * GB), "d1": (1.0, 4 * GB)}), forbid_devices=["d1"])
    with pytest.raises(PlanError, match="short"):
        solve(p, EXACT)
    plan = solve_harvest(p, HarvestOptions(), EXACT)
    assert plan.device_order() == ["d0"]
    assert plan.bottleneck == pytest.approx(400 * MS)
    assert plan.certificate.status == "OPTIMAL"
    assert sorted(lenders_of(plan).values()) == ["d1"] * 3  # exactly the three loans memory needs
    assert plan.harvest is not None and plan.harvest.without is None
    memory = {row.device: row for row in plan.harvest.memory}
    assert (memory["d0"].own, memory["d0"].borrowed, memory["d0"].free) == (3 * GB, 3 * GB, GB // 2)
    assert (memory["d1"].own, memory["d1"].lent, memory["d1"].free) == (0, 3 * GB, GB)
    assert plan.harvest.channels[0].source == "d1" and plan.harvest.channels[0].bytes == 3 * GB
    assert plan.harvest.stages[0].fetch == pytest.approx(30 * MS)


def test_borrowing_saves_a_stage() -> None:
    # d1 runs at 0.2 GFLOP/s (500 ms a layer).  Without borrowing d0 holds three layers and d1 the
    # fourth: 500 ms.  Borrowing, d0 runs all four (400 ms) with three held by d1: one stage fewer.
    p = problem(chain(4), cluster({"d0": (1.0, 3.5 * GB), "d1": (0.2, 4 * GB)}))
    assert solve(p, EXACT).bottleneck == pytest.approx(500 * MS)
    plan = solve_harvest(p, HarvestOptions(), EXACT)
    assert plan.device_order() == ["d0"]
    assert plan.bottleneck == pytest.approx(400 * MS)
    assert plan.certificate.status == "OPTIMAL"
    assert plan.harvest is not None and plan.harvest.without == pytest.approx(500 * MS)


def test_a_model_that_fits_keeps_its_weights_at_home() -> None:
    # Room for everything: the memory-relaxed plan fits, nothing is borrowed, CP-SAT is not needed.
    p = problem(chain(2), cluster({"d0": (1.0, 4 * GB), "d1": (1.0, 4 * GB)}))
    plan = solve_harvest(p, HarvestOptions(), EXACT)
    assert plan.bottleneck == pytest.approx(100 * MS) and plan.certificate.status == "OPTIMAL"
    assert lenders_of(plan) == {}
    assert plan.certificate.solver is not None and plan.certificate.solver.solution == "memory relaxed"


def test_a_lenders_own_memory_and_reservations_limit_what_it_lends() -> None:
    # As in the first test, but other work holds memory on the lender d1.  1 GB reserved leaves
    # 3 GB: the three loans fit.  1.5 GB reserved leaves 2.5 GB: only two loans fit, so no plan.
    where = cluster({"d0": (1.0, 3.5 * GB), "d1": (1.0, 4 * GB)})
    p = problem(chain(4), where, forbid_devices=["d1"])
    plan = solve_harvest(p, HarvestOptions.of(reserved={"d1": "1GB"}), EXACT)
    memory = {row.device: row for row in plan.harvest.memory} if plan.harvest else {}
    assert (memory["d1"].reserved, memory["d1"].lent, memory["d1"].free) == (GB, 3 * GB, 0)
    with pytest.raises(PlanError, match="even with harvesting"):
        solve_harvest(p, HarvestOptions.of(reserved={"d1": "1.5GB"}), EXACT)
    # A lender that runs a stage lends only what its own stage leaves: two devices of 4 GB cannot
    # hold nine layers (9 GB of weights, plus staging on whoever borrows).
    with pytest.raises(PlanError, match="even with harvesting"):
        solve_harvest(problem(chain(9), cluster({"d0": (1.0, 4 * GB), "d1": (1.0, 4 * GB)})), HarvestOptions(),
                      EXACT)


def test_two_borrowers_over_one_host_link_contend() -> None:
    # Eight layers on d0 and d1 (3.5 GB each, 7 GB < 8 GB), no neighbour lends, the host lends over
    # one 10 GB/s link the two share (100 ms per GB).  4 + 4 would cost 400 ms of compute but needs
    # three loans each: 6 GB over the shared link, 600 ms.  5 + 3 keeps d1 at home (3 GB) and lends
    # four of d0's: 400 ms of fetch under 500 ms of compute.  6 + 2: 600 ms.  So 500 ms.
    p = problem(chain(8), cluster({"d0": (1.0, 3.5 * GB), "d1": (1.0, 3.5 * GB)}))
    host = HarvestOptions.of(lenders=(), host_memory="8GB", host_bandwidth="10GB/s", host_latency=0)
    plan = solve_harvest(p, host, EXACT)
    assert plan.bottleneck == pytest.approx(500 * MS)
    assert plan.certificate.status == "OPTIMAL"
    assert sorted(len(s.layers) for s in plan.stages) == [3, 5]
    assert set(lenders_of(plan).values()) == {"host:host0"} and len(lenders_of(plan)) == 4
    assert plan.harvest is not None and plan.harvest.channels[0].target == "*"
    # The same loans, priced as if each device had its own link, would allow 4 + 4 at 400 ms: the
    # scorer charges the shared link's whole time to every stage reading it.
    lending = Lending(p, host)
    even = score(lending, ["d0"] * 4 + ["d1"] * 4, {"l1": "host:host0", "l2": "host:host0", "l3": "host:host0",
                                                   "l5": "host:host0", "l6": "host:host0", "l7": "host:host0"})
    assert even.violation is None and even.bottleneck == pytest.approx(600 * MS)


def test_the_host_tier_is_slower_than_a_neighbour() -> None:
    # Compute is small (10 ms a layer), so fetches set the bottleneck.  d0 needs three loans: from
    # the neighbour d1 at 100 GB/s, 30 ms; from the host at 10 GB/s, 300 ms.  The plan takes the
    # neighbour.  With 2 GB reserved on d1 it lends two (20 ms) and the host one (100 ms): a stage
    # waits for both channels, 120 ms.
    p = problem(chain(4, flops=10**7), cluster({"d0": (1.0, 3.5 * GB), "d1": (1.0, 4 * GB)}), forbid_devices=["d1"])
    both = HarvestOptions.of(host_memory="8GB", host_bandwidth="10GB/s", host_latency=0)
    plan = solve_harvest(p, both, EXACT)
    assert sorted(lenders_of(plan).values()) == ["d1"] * 3
    assert plan.bottleneck == pytest.approx(40 * MS) and plan.certificate.status == "OPTIMAL"
    mixed = solve_harvest(p, HarvestOptions.of(host_memory="8GB", host_bandwidth="10GB/s", host_latency=0,
                                            reserved={"d1": "2GB"}), EXACT)
    assert sorted(lenders_of(mixed).values()) == ["d1", "d1", "host:host0"]
    assert mixed.bottleneck == pytest.approx(120 * MS) and mixed.certificate.status == "OPTIMAL"


def test_serial_comm_adds_the_fetch() -> None:
    # comm="serial": the 30 ms of fetch add to the 400 ms of compute.
    p = problem(chain(4), cluster({"d0": (1.0, 3.5 * GB), "d1": (1.0, 4 * GB)}), forbid_devices=["d1"],
                comm="serial")
    plan = solve_harvest(p, HarvestOptions(), EXACT)
    assert plan.bottleneck == pytest.approx(430 * MS) and plan.certificate.status == "OPTIMAL"


def test_the_plan_json_carries_the_memory_map_and_old_plans_still_load(tmp_path: object) -> None:
    p = problem(chain(4), cluster({"d0": (1.0, 3.5 * GB), "d1": (1.0, 4 * GB)}), forbid_devices=["d1"])
    plan = solve_harvest(p, HarvestOptions(), EXACT)
    doc = plan.to_dict()
    assert [row["device"] for row in doc["harvest"]["memory"]] == ["d0", "d1"]
    again = Plan.from_dict(doc)
    assert again.harvest == plan.harvest
    del doc["harvest"]
    assert Plan.from_dict(doc).harvest is None


@pytest.mark.parametrize(("options", "message"), [
    ({"lenders": ("gpu9",)}, "harvest names device 'gpu9'"),
    ({"reserved": {"d1": "9GB"}}, "more than the"),
    ({"reserved": ["d1"]}, "write DEVICE=SIZE"),
    ({"host_bandwidth": 0}, "host_bandwidth must be positive"),
    ({"host_memory": "lots"}, "harvest: cannot read quantity"),
    ({"lenders": 3}, "must be a list of device ids"),
])
def test_bad_options_are_refused_naming_what_is_wrong(options: dict[str, object], message: str) -> None:
    p = problem(chain(2), cluster({"d0": (1.0, 4 * GB), "d1": (1.0, 4 * GB)}))
    with pytest.raises(PlanError, match=message):
        solve_harvest(p, HarvestOptions.of(**options), EXACT)  # type: ignore[arg-type]


def test_a_loan_the_rules_forbid_is_named() -> None:
    p = problem(chain(2), cluster({"d0": (1.0, 4 * GB), "d1": (1.0, 4 * GB)}))
    found = score(Lending(p, HarvestOptions(lenders=("d0",))), ["d0", "d0"], {"l1": "d1"})
    assert found.violation is not None and "not among the harvest lenders" in found.violation
    with pytest.raises(PlanError, match="unknown lender 'host:host0'"):
        score(Lending(p, HarvestOptions()), ["d0", "d0"], {"l1": "host:host0"})
