"""The worker pool's bounds on one job, with real worker processes: memory, wall time (preprocessing
included), recycling, cancelling."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from pipeplan.api.payloads import PlanPayload, SolverLimits
from pipeplan.api.pool import Limits, Outcome, Task, WorkerPool, resident_bytes
from pipeplan.costmodel.cluster import Cluster
from pipeplan.planner.problem import PlanOptions
from tests.api.api_factories import chain_graph, cluster_spec, wide_graph


def _payload(graph: dict[str, Any], devices: int, time_limit: float = 5.0) -> PlanPayload:
    cluster = Cluster.from_dict(cluster_spec(devices, name=f"c{devices}"))
    return PlanPayload(cluster=cluster, costmodel="analytic", costmodel_name="analytic", options=PlanOptions(),
                       solver=SolverLimits(time_limit=time_limit, workers=1, seed=0, gap_limit=0.0),
                       graph_text=json.dumps(graph))


def _run(pool: WorkerPool, kind: str, payload: PlanPayload, timeout: float = 60.0,
         note: str = "") -> tuple[Outcome, int, float]:
    """``payload``'s outcome, the pid of the worker that ran it, and the seconds it took."""
    done: Future[Outcome] = Future()
    pids: list[int] = []
    started = time.monotonic()
    pool.submit(Task(f"t{time.monotonic_ns()}", kind, payload, timeout, note,
                     on_start=lambda _t, pid: pids.append(pid), on_done=lambda _t, o: done.set_result(o)))
    outcome = done.result(timeout + 30)
    return outcome, pids[0], time.monotonic() - started


def _wait_ready(pool: WorkerPool, n: int) -> None:
    deadline = time.monotonic() + 60
    while pool.stats().ready < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.stats().ready == n


@pytest.fixture
def pool(request: pytest.FixtureRequest) -> Iterator[WorkerPool]:
    pool = WorkerPool(1, 4, request.param)
    pool.start()
    _wait_ready(pool, 1)
    yield pool
    pool.close()


# 1,500 layers on 32 devices: about 800 MB and 16 s to plan without limits (the problem's dense
# per-device tables come before the solver starts).
# Too wide for the stage program to prove (its ideals number 41 ** 40): CP-SAT's model of it on 32
# devices takes seconds and over a GB to build.  (A 1,500-layer chain no longer does: the stage
# program proves it and the tie-break that used to build a model of it is skipped as too costly.)
_BIG = (wide_graph(40, 40, name="big"), 32)


@pytest.mark.parametrize("pool", [Limits(memory=350 * 2**20)], indirect=True)
def test_a_job_over_its_memory_limit_fails_as_memory_limit_and_the_worker_is_replaced(pool: WorkerPool) -> None:
    outcome, pid, seconds = _run(pool, "plan", _payload(*_BIG, time_limit=10))
    assert not outcome.ok and outcome.error_type == "MemoryLimit" and outcome.user_error
    assert f"{350 * 2**20} bytes" in (outcome.error or "") and "PIPEPLAN_JOB_MEMORY" in (outcome.error or "")
    assert seconds < 10  # stopped while building the problem, long before the solver's limit
    _wait_ready(pool, 1)
    assert pool.stats().recycled == 1 and pool.worker_pids() != [pid]
    small, new_pid, _ = _run(pool, "plan", _payload(chain_graph(6), 2))
    assert small.ok and new_pid != pid  # the fresh worker has the same limit and plans small problems


@pytest.mark.parametrize("pool", [Limits()], indirect=True)
def test_the_time_limit_covers_preprocessing(pool: WorkerPool) -> None:
    # The solver may use 0.5 s, but building this problem alone takes seconds: the job's limit (1.5 s)
    # counts from the moment a worker takes it, so the worker is stopped before the solver starts.
    outcome, pid, seconds = _run(pool, "plan", _payload(*_BIG, time_limit=0.5), timeout=1.5,
                                 note="the solver's 0.5 s + 1 s for the rest")
    assert not outcome.ok and outcome.error_type == "Timeout"
    assert outcome.error == (f"the worker process (pid {pid}) ran past its time limit of 1.5 s (the solver's 0.5 s "
                             "+ 1 s for the rest) and was stopped while running this plan job")
    assert 1.5 <= seconds < 5
    _wait_ready(pool, 1)
    assert pool.stats().restarts == 1 and _run(pool, "plan", _payload(chain_graph(6), 2))[0].ok


@pytest.mark.parametrize("pool", [Limits(max_jobs=2)], indirect=True)
def test_workers_are_recycled_after_max_jobs(pool: WorkerPool) -> None:
    pids = [_run(pool, "plan", _payload(chain_graph(6, f"r{i}"), 2))[1] for i in range(5)]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
    assert pool.stats().recycled == 2 and pool.stats().restarts == 0


@pytest.mark.parametrize("pool", [Limits(max_rss=1)], indirect=True)
def test_workers_are_recycled_over_max_rss(pool: WorkerPool) -> None:
    first = _run(pool, "plan", _payload(chain_graph(6), 2))[1]
    assert (resident_bytes(first) or 0) > 1  # (read before the worker's exit completes)
    second = _run(pool, "plan", _payload(chain_graph(6), 2))[1]
    assert first != second and pool.stats().recycled >= 1


@pytest.mark.parametrize("pool", [Limits()], indirect=True)
def test_cancel_a_queued_and_a_running_task(pool: WorkerPool) -> None:
    running: Future[Outcome] = Future()
    queued: Future[Outcome] = Future()
    pool.submit(Task("slow", "plan", _payload(wide_graph(name="slow"), 8, time_limit=30), 60,
                     on_done=lambda _t, o: running.set_result(o)))
    pool.submit(Task("next", "plan", _payload(chain_graph(4), 2), 60, on_done=lambda _t, o: queued.set_result(o)))
    deadline = time.monotonic() + 10
    while pool.stats().busy == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pool.cancel("next", "no longer wanted")
    assert queued.result(5) == Outcome(False, error="no longer wanted", error_type="Cancelled")
    started = time.monotonic()
    assert pool.cancel("slow", "stop it")
    assert running.result(10) == Outcome(False, error="stop it", error_type="Cancelled")
    assert time.monotonic() - started < 5  # the worker was killed, not left to its 30 s
    assert not pool.cancel("slow") and not pool.cancel("never-submitted")
    _wait_ready(pool, 1)
    assert _run(pool, "plan", _payload(chain_graph(6), 2))[0].ok
