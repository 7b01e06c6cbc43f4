"""Rate limits shared by replicas: two services on one PostgreSQL take from one bucket per token."""

from __future__ import annotations

import threading

import pytest

from pipeplan.api.database import Database
from pipeplan.api.ratelimit import SharedBuckets


@pytest.fixture
def replicas(pg_schema_url: str) -> list[SharedBuckets]:
    """Two replicas' views of the buckets: separate connection pools on one database."""
    dbs = [Database(pg_schema_url) for _ in range(2)]
    dbs[0].migrate()
    return [SharedBuckets(db, rate=1.0, burst=2) for db in dbs]


def test_a_token_has_one_limit_across_replicas(replicas: list[SharedBuckets]) -> None:
    a, b = replicas
    t = 1_000_000.0
    assert [a.take("token-1", now=t), b.take("token-1", now=t)] == [0.0, 0.0]  # the burst of 2
    assert a.take("token-1", now=t) == pytest.approx(1.0)  # empty on either replica
    assert b.take("token-1", now=t + 0.5) == pytest.approx(0.5)
    assert b.take("token-2", now=t) == 0.0  # another token, another bucket
    assert a.take("token-1", now=t + 1.0) == 0.0  # refilled at 1 per second


def test_concurrent_takes_never_spend_a_request_twice(replicas: list[SharedBuckets]) -> None:
    buckets = [SharedBuckets(r.db, rate=1e-6, burst=5) for r in replicas]  # no refill during the test
    granted: list[float] = []
    lock = threading.Lock()

    def take(i: int) -> None:
        wait = buckets[i % 2].take("burst-token", now=2_000_000.0)
        with lock:
            granted.append(wait)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(granted).count(0.0) == 5 and len(granted) == 20
