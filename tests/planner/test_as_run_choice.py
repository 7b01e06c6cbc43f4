"""The as-run choice between the ILP's plan over every core and the plan without the loaded ones:
real CP-SAT plans of a real captured model, each replayed with a wake model written for the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import load_cluster
from pipeplan.costmodel.cluster_detect import write_core_cluster
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.wake import WakeModel
from pipeplan.costmodel.zoo import capture_model
from pipeplan.executor.as_run import plan_as_run
from pipeplan.planner.as_run_choice import choose_as_run, loaded_devices
from pipeplan.planner.ilp import SolverOptions
from pipeplan.planner.problem import PlanOptions, Problem

MS = 1e-3
SOLVER = SolverOptions(time_limit=10, seed=0)


@pytest.fixture
def wake_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def write(recv_delay: float) -> None:
        wake = WakeModel(cpu="test cpu", measured_at="2026-11-24", sleeps=[1 * MS, 16 * MS],
                         penalty_fixed=[0.0, 0.0], penalty_rate=[0.0, 0.0], credit={"2xcompute": [0.0, 0.0]},
                         recv_delay={"2xcompute": recv_delay})
        monkeypatch.setenv("PIPEPLAN_WAKE", str(wake.save(tmp_path / f"wake-{recv_delay}.json")))
    return write


def _cores(tmp_path: Path, n: int = 3, load: str = "2xcompute", loaded: tuple[str, ...] = ("cpu0",)) -> Problem:
    spec = write_core_cluster(tmp_path / "cores.yaml", n, name="cores", cores=list(range(n)))
    cluster = load_cluster(str(spec))
    for device in loaded:
        cluster = cluster.with_load(device, Contention.parse(load))
    return Problem(capture_model("tinygpt", 8), cluster, RooflineModel(), PlanOptions(microbatches=4))


def _samples(problem: Problem, plan) -> float:  # type: ignore[no-untyped-def]
    found = plan_as_run(problem, plan)
    assert found is not None
    return plan.options.microbatches * plan.batch_size / found[0].batch_seconds


def test_each_candidate_is_scored_by_its_replay_and_the_faster_is_chosen(tmp_path: Path, wake_file) -> None:  # type: ignore[no-untyped-def]
    wake_file(0.0)
    problem = _cores(tmp_path)
    choice = choose_as_run(problem, SOLVER)
    assert choice is not None and choice.wake_cpu == "test cpu"
    first, second = choice.candidates
    assert first.label == "all devices" and first.problem is problem
    assert second.label == "without the loaded cpu0" and second.problem.options.forbid_devices == ("cpu0",)
    assert "cpu0" not in second.plan.device_order()
    for candidate in choice.candidates:
        assert candidate.throughput_as_run == pytest.approx(_samples(candidate.problem, candidate.plan), rel=1e-12)
    assert choice.chosen.throughput_as_run == max(c.throughput_as_run for c in choice.candidates)
    assert "→ chose" in choice.summary() and "about" in choice.summary()


def test_a_late_receive_on_the_loaded_core_makes_the_idle_cores_win(tmp_path: Path, wake_file) -> None:  # type: ignore[no-untyped-def]
    """With no receive delay the ILP's plan over the three cores (it uses the loaded one) is the
    faster as run; with 50 ms per message to the loaded core, the plan on the two idle cores is."""
    problem = _cores(tmp_path)
    wake_file(0.0)
    quick = choose_as_run(problem, SOLVER)
    assert quick is not None and "cpu0" in quick.candidates[0].plan.device_order()
    assert quick.chosen is quick.candidates[0]
    wake_file(50 * MS)
    slow = choose_as_run(problem, SOLVER)
    assert slow is not None and slow.chosen.label == "without the loaded cpu0"
    assert slow.plan.assignment() == quick.candidates[1].plan.assignment()  # the same ILP plan, scored anew
    assert slow.candidates[0].throughput_as_run < quick.candidates[0].throughput_as_run


def test_no_alternative_when_every_core_is_loaded(tmp_path: Path, wake_file) -> None:  # type: ignore[no-untyped-def]
    wake_file(50 * MS)
    problem = _cores(tmp_path, n=2, loaded=("cpu0", "cpu1"))
    assert loaded_devices(problem) == ["cpu0", "cpu1"]
    choice = choose_as_run(problem, SOLVER)
    assert choice is not None and [c.label for c in choice.candidates] == ["all devices"]


def test_no_choice_without_a_wake_model_or_on_gpus(tmp_path: Path, wake_file) -> None:  # type: ignore[no-untyped-def]
    assert choose_as_run(_cores(tmp_path), SOLVER) is None  # the suite's PIPEPLAN_WAKE=none
    wake_file(50 * MS)
    gpus = load_cluster("hetero-a100-t4")
    gpus = gpus.with_load(gpus.devices[0].id, Contention.parse("2xcompute"))
    assert choose_as_run(Problem(capture_model("tinygpt", 8), gpus, RooflineModel()), SOLVER) is None


def test_a_plan_without_the_loaded_core_keeps_the_options_as_asked(tmp_path: Path, wake_file) -> None:  # type: ignore[no-untyped-def]
    wake_file(50 * MS)
    problem = _cores(tmp_path)
    choice = choose_as_run(problem, SOLVER)
    assert choice is not None and choice.chosen is choice.candidates[1]
    first, plan = choice.candidates[0].plan, choice.plan
    assert plan.assignment() == choice.chosen.plan.assignment() and plan.options == problem.options
    assert plan.certificate.status == "FEASIBLE" and plan.certificate.best_bound == first.certificate.best_bound
    assert plan.bottleneck >= first.bottleneck  # the ILP's optimum over every core, back to back
    assert plan.certificate.details["as_run"]["chosen"] == "without the loaded cpu0"
    assert set(plan.certificate.details["as_run"]["samples_per_second"]) == {"all devices", "without the loaded cpu0"}


def test_only_the_throughput_objective_is_chosen_as_run(tmp_path: Path, wake_file) -> None:  # type: ignore[no-untyped-def]
    wake_file(50 * MS)
    problem = _cores(tmp_path)
    latency = Problem(problem.graph, problem.cluster, problem.costmodel,
                      PlanOptions(microbatches=4, objective="latency"))
    assert choose_as_run(latency, SOLVER) is None


def test_a_pin_on_the_loaded_core_leaves_one_candidate_and_says_why(tmp_path: Path, wake_file) -> None:  # type: ignore[no-untyped-def]
    wake_file(50 * MS)
    problem = _cores(tmp_path)
    pinned = Problem(problem.graph, problem.cluster, problem.costmodel,
                     PlanOptions(microbatches=4, pins=((problem.layers[0], "cpu0"),)))
    choice = choose_as_run(pinned, SOLVER)
    assert choice is not None and len(choice.candidates) == 1 and choice.plan is choice.candidates[0].plan
    assert choice.skipped is not None and choice.skipped.startswith("without the loaded cpu0: no plan (")
    assert choice.skipped in choice.summary()


def test_devices_forbidden_twice_or_already_left_out_are_not_counted_again(tmp_path: Path, wake_file) -> None:  # type: ignore[no-untyped-def]
    wake_file(50 * MS)
    problem = _cores(tmp_path)
    twice = Problem(problem.graph, problem.cluster, problem.costmodel,
                    PlanOptions(microbatches=4, forbid_devices=("cpu2", "cpu2")))
    assert loaded_devices(twice) == ["cpu0"]
    choice = choose_as_run(twice, SOLVER)
    assert choice is not None and [c.label for c in choice.candidates] == ["all devices", "without the loaded cpu0"]
    assert choice.candidates[1].plan.device_order() == ["cpu1"]
    gone = Problem(problem.graph, problem.cluster, problem.costmodel, PlanOptions(microbatches=4,
                                                                                  forbid_devices=("cpu0",)))
    assert loaded_devices(gone) == []
    left = choose_as_run(gone, SOLVER)
    assert left is not None and len(left.candidates) == 1 and left.skipped is None


def test_cores_on_two_hosts_are_not_replayed(tmp_path: Path, wake_file) -> None:  # type: ignore[no-untyped-def]
    """This CPU's wake model says nothing of another host's cores or of the network between."""
    wake_file(50 * MS)
    spec = write_core_cluster(tmp_path / "cores.yaml", 3, name="cores", cores=[0, 1, 2])
    lines = [line.replace("host: localhost", "host: other") if "id: cpu2" in line else line
             for line in spec.read_text().splitlines()]
    spec.write_text("\n".join([*lines, "  inter_host: {bandwidth: 1GB/s, latency: 100us}", ""]))
    cluster = load_cluster(str(spec)).with_load("cpu0", Contention.parse("2xcompute"))
    assert {d.host for d in cluster.devices} == {"localhost", "other"}
    assert choose_as_run(Problem(capture_model("tinygpt", 8), cluster, RooflineModel(),
                                 PlanOptions(microbatches=4)), SOLVER) is None
