"""Re-planning with migration cost, on hand-built problems whose optimum is worked out by hand, with
the real CP-SAT: a short horizon keeps the current plan, a long one moves, a departed device forces
a reload, the certificate is exact, and bad input is refused naming what is wrong."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from pipeplan.costmodel.cluster import Cluster
from pipeplan.planner.builder import GraphBuilder
from pipeplan.planner.ilp import SolverOptions
from pipeplan.planner.migration import STORAGE, Horizon, MigrationCost, Move, Reload
from pipeplan.planner.plan import Plan
from pipeplan.planner.problem import PlanError, PlanOptions, Problem
from pipeplan.planner.replan import replan, score
from tests.planner_problems import ROOFLINE
from tests.replan_problems import FAST, GB, LOADED, SLOW, cluster, current_plan, two_layers

EXACT = SolverOptions(time_limit=20.0, workers=2, seed=0)
MS = 1e-3
NO_LATENCY = Reload(bandwidth=0.5e9)  # a reload of one layer takes 2 s


# d1 now runs at half speed (l1 takes 2 ms there); d2 joins, idle, with a fast link to d1 only.
# d1 has left; d2 is there, slow to reach from d0.
WITHOUT_D1 = cluster({"d0": 1.0, "d2": 1.0}, {("d0", "d2"): SLOW})


def new_problem(where: Cluster) -> Problem:
    return Problem(two_layers().build(), where, ROOFLINE, PlanOptions(microbatches=1))


def test_a_short_horizon_stays_and_a_long_one_moves() -> None:
    # Staying costs 2 ms (l1 on the loaded d1).  The best move, l1 over the fast link to d2, gives
    # 1 ms after 1 s of migration (1 GB at 1 GB/s): 1 ms + 1 s / N.  Every other move crosses a
    # 100 MB/s link (10 s) for no better bottleneck.  It pays from N = 1 s / (2 − 1) ms = 1000.
    short = replan(new_problem(LOADED), current_plan(), Horizon(microbatches=500), options=EXACT)
    assert short.migration is not None and short.migration.decision == "stay"
    assert short.assignment() == {"l0": "d0", "l1": "d1"} and short.migration.moves == []
    assert short.migration.stay is not None and short.migration.stay.objective == pytest.approx(2 * MS, rel=1e-9)
    assert short.certificate.objective == pytest.approx(2 * MS, rel=1e-9)  # not 1 ms + 2 ms of moving
    assert short.certificate.status == "OPTIMAL"
    assert short.certificate.solver is not None
    assert short.certificate.solver.solver_status == "OPTIMAL"  # CP-SAT proved it: the bound alone is 1 ms

    long = replan(new_problem(LOADED), current_plan(), Horizon(microbatches=5000), options=EXACT)
    assert long.migration is not None and long.migration.decision == "move"
    assert long.assignment() == {"l0": "d0", "l1": "d2"}
    assert long.migration.moves == [Move("l1", "d1", "d2", GB, pytest.approx(1.0))]
    assert long.migration.seconds == pytest.approx(1.0) and long.migration.bytes == GB
    assert long.certificate.objective == pytest.approx(1 * MS + 1.0 / 5000, rel=1e-9)
    assert long.certificate.status == "OPTIMAL"
    assert long.migration.break_even_microbatches == pytest.approx(1000, rel=1e-9)


def test_a_horizon_in_seconds_counts_microbatches_at_the_current_rate() -> None:
    # The current plan served one microbatch per 1 ms: 10 s is 10,000 microbatches.
    plan = replan(new_problem(LOADED), current_plan(), "10s", options=EXACT)
    assert plan.migration is not None and plan.migration.horizon_microbatches == pytest.approx(10_000)
    assert plan.migration.horizon_seconds == 10.0 and plan.migration.decision == "move"
    assert plan.certificate.objective == pytest.approx(1 * MS + 1.0 / 10_000, rel=1e-9)


def test_a_removed_device_forces_a_reload_and_the_bound_proves_it() -> None:
    # l1's device left: it is reloaded from storage (2 s) wherever it goes, so every plan pays 2 s;
    # on d2 the bottleneck is 1 ms: 1 ms + 2 s / 1000 = 3 ms, which is also the bound (the fresh
    # plan's 1 ms plus the forced 2 s), so no CP-SAT search is needed.  Moving l0 instead would
    # cross the slow d0–d2 link (10 s).
    plan = replan(new_problem(WITHOUT_D1), current_plan(), Horizon(microbatches=1000), reload=NO_LATENCY,
                  options=EXACT)
    assert plan.migration is not None and plan.migration.decision == "move"
    assert plan.migration.stay is None and plan.migration.stay_invalid == "its device d1 left the cluster"
    assert plan.assignment() == {"l0": "d0", "l1": "d2"}
    assert plan.migration.moves == [Move("l1", STORAGE, "d2", GB, pytest.approx(2.0))]
    assert plan.certificate.status == "OPTIMAL"
    assert plan.certificate.objective == pytest.approx(3 * MS, rel=1e-9)
    assert plan.certificate.solver is not None and plan.certificate.solver.solver_status.startswith("not run")


def test_the_certificate_is_exact_against_every_plan() -> None:
    # Brute force: every assignment of the two layers to the three devices, scored in seconds.
    problem, current = new_problem(LOADED), current_plan()
    for horizon in (500, 1500):
        plan = replan(problem, current, Horizon(microbatches=horizon), options=EXACT)
        cost = MigrationCost(problem, current.assignment())
        scores = [score(problem, cost, horizon, {"l0": a, "l1": b})
                  for a, b in itertools.product(problem.devices, repeat=2)]
        best = min(s.objective for s in scores if s.violation is None)
        cert = plan.certificate
        assert cert.status == "OPTIMAL" and cert.objective == pytest.approx(best, rel=1e-9)
        assert cert.best_bound is not None and cert.best_bound <= best * (1 + 1e-9)
        assert cert.objective == pytest.approx(score(problem, cost, horizon, plan.assignment()).objective, rel=1e-12)


def test_moves_on_one_link_serialise_and_on_different_links_run_in_parallel() -> None:
    b = GraphBuilder("three")
    for i in range(3):
        b.layer(f"l{i}", flops=10**6, param_bytes=GB, inputs={f"l{i - 1}": 0} if i else {})
    where = cluster({"d0": 1.0, "d1": 1.0, "d2": 1.0}, {("d0", "d1"): FAST, ("d0", "d2"): FAST, ("d1", "d2"): FAST})
    problem = Problem(b.build(), where, ROOFLINE, PlanOptions(microbatches=1))
    cost = MigrationCost(problem, {"l0": "d0", "l1": "d0", "l2": "d1"})
    index = {d: i for i, d in enumerate(problem.devices)}
    # l0 and l1 both d0 → d2: one stream, 2 s.  l1 d0 → d2 and l2 d1 → d2: two links side by side, 1 s.
    assert cost.seconds([index["d2"], index["d2"], index["d1"]]) == pytest.approx(2.0)
    assert cost.seconds([index["d0"], index["d2"], index["d2"]]) == pytest.approx(1.0)
    # A link is full duplex: d0 → d1 and d1 → d0 at once take 1 s.
    assert cost.seconds([index["d1"], index["d0"], index["d0"]]) == pytest.approx(1.0)
    assert cost.model_bytes == 3 * GB


def test_a_shared_reload_source_serialises_every_reload() -> None:
    problem = new_problem(WITHOUT_D1)
    gone = {"l0": "dX", "l1": "d1"}  # both devices left
    index = {d: i for i, d in enumerate(problem.devices)}
    apart = [index["d0"], index["d2"]]
    assert MigrationCost(problem, gone, NO_LATENCY).seconds(apart) == pytest.approx(2.0)
    shared = Reload(bandwidth=0.5e9, shared=True)
    assert MigrationCost(problem, gone, shared).seconds(apart) == pytest.approx(4.0)
    assert MigrationCost(problem, gone, shared).lower_bound() == pytest.approx(4.0)


def test_the_migration_section_survives_plan_json(tmp_path: Path) -> None:
    plan = replan(new_problem(LOADED), current_plan(), Horizon(microbatches=5000), options=EXACT)
    path = tmp_path / "plan.json"
    plan.save(path)
    assert json.loads(path.read_text())["migration"]["moves"][0]["layer"] == "l1"
    again = Plan.load(path)
    assert again.migration == plan.migration
    doc = plan.to_dict()
    del doc["migration"]
    assert Plan.from_dict(doc).migration is None


def test_bad_input_is_refused_naming_what_is_wrong() -> None:
    problem, current = new_problem(LOADED), current_plan()
    with pytest.raises(PlanError, match="horizon must be a positive number of microbatches"):
        Horizon(microbatches=-5)
    with pytest.raises(PlanError, match="horizon must be a positive number of seconds"):
        replan(problem, current, "-10m", options=EXACT)
    with pytest.raises(PlanError, match="cannot read horizon '10 fortnights'"):
        Horizon.parse("10 fortnights")
    with pytest.raises(PlanError, match="places layer 'l9', which model 'two' does not have"):
        MigrationCost(problem, {"l0": "d0", "l1": "d1", "l9": "d1"})
    with pytest.raises(PlanError, match="does not place layer 'l1'"):
        MigrationCost(problem, {"l0": "d0"})
    with pytest.raises(PlanError, match="reload bandwidth must be a positive"):
        Reload(bandwidth=0.0)
    latency = Problem(two_layers().build(), LOADED, ROOFLINE, PlanOptions(objective="latency"))
    with pytest.raises(PlanError, match="objective='throughput'"):
        replan(latency, current, "10m", options=EXACT)
