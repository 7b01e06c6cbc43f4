"""The request queue and microbatch assembly of a deployment, without processes."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest
import torch

from pipeplan.executor.deploy_batcher import Request, RequestQueue, input_specs, sample_inputs, stack, unstack
from pipeplan.executor.errors import DeploymentClosed, QueueFullError


def _request(k: int, *inputs: torch.Tensor, submitted: float | None = None) -> Request:
    return Request(k, inputs, Future(), time.perf_counter() if submitted is None else submitted)


def test_a_partial_microbatch_is_padded_with_its_last_sample_and_the_padding_dropped() -> None:
    specs = input_specs([torch.zeros(4, 3), torch.zeros(4, 2, dtype=torch.long), 7])
    requests = [_request(k, torch.full((3,), float(k)), torch.full((2,), k)) for k in range(2)]
    floats, ints, fixed = stack(requests, specs, 4)
    assert floats[:, 0].tolist() == [0.0, 1.0, 1.0, 1.0] and ints[:, 0].tolist() == [0, 1, 1, 1] and fixed == 7
    rows = unstack([floats * 10, ints], 2)
    assert [r[0][0].item() for r in rows] == [0.0, 10.0] and [r[1][0].item() for r in rows] == [0, 1]


def test_request_inputs_are_checked_against_the_example() -> None:
    specs = input_specs([torch.zeros(4, 3)])
    assert sample_inputs(specs, [torch.ones(1, 3)])[0].shape == (3,)  # a batch dimension of 1 is dropped
    with pytest.raises(ValueError, match=r"input 0 must be one sample of shape \[3\] and dtype torch.float32"):
        sample_inputs(specs, [torch.ones(2, 3)])
    with pytest.raises(ValueError, match=r"dtype torch\.float32"):
        sample_inputs(specs, [torch.ones(3, dtype=torch.float64)])
    with pytest.raises(ValueError, match="takes the model's 1 input"):
        sample_inputs(specs, [torch.ones(3), torch.ones(3)])


def test_take_waits_for_a_full_microbatch_or_the_latency_bound() -> None:
    queue = RequestQueue(8)
    for k in range(5):
        queue.put(_request(k, torch.zeros(1)))
    assert [r.id for r in queue.take(4, max_wait=60.0)] == [0, 1, 2, 3]  # full: leaves at once
    start = time.perf_counter()
    assert [r.id for r in queue.take(4, max_wait=0.05)] == [4]  # partial: leaves after the bound
    assert time.perf_counter() - start >= 0.04

    late = threading.Timer(0.02, lambda: queue.put(_request(6, torch.zeros(1))))
    queue.put(_request(5, torch.zeros(1)))
    late.start()
    assert [r.id for r in queue.take(2, max_wait=30.0)] == [5, 6]  # a second request fills it
    late.join()


def test_a_full_queue_refuses_and_a_closed_one_drains() -> None:
    queue = RequestQueue(2)
    queue.put(_request(0, torch.zeros(1)))
    queue.put(_request(1, torch.zeros(1)))
    with pytest.raises(QueueFullError, match=r"queue is full \(2 waiting\)"):
        queue.put(_request(2, torch.zeros(1)))
    start = time.monotonic()
    with pytest.raises(QueueFullError):
        queue.put(_request(2, torch.zeros(1)), timeout=0.05)
    assert time.monotonic() - start >= 0.04
    queue.close(DeploymentClosed("closed for the test"))
    with pytest.raises(DeploymentClosed, match="closed for the test"):
        queue.put(_request(3, torch.zeros(1)))
    assert [r.id for r in queue.take(4, max_wait=60.0)] == [0, 1]  # closed: no wait for the bound
    assert queue.take(4, max_wait=60.0) == []


def test_a_held_queue_hands_out_nothing_and_requeued_requests_go_first() -> None:
    q = RequestQueue(2)
    first, second, third = (_request(k) for k in range(3))
    q.put(first)
    q.put(second)
    q.hold()
    assert q.take(2, 0.0) is None and len(q) == 2  # a switch is running: nothing leaves
    waiter = threading.Thread(target=q.wait_released, args=(5.0,))
    waiter.start()
    q.release()
    waiter.join(timeout=5)
    assert not waiter.is_alive()
    assert q.take(1, 0.0) == [first]
    q.requeue([third, first])  # voided steps' requests, past the capacity of 2, ahead of the rest
    assert len(q) == 3 and q.take(3, 0.0) == [third, first, second]
