"""The bounded queue in front of a deployment's stage 0, and the microbatches cut from it.

A request is one sample: the model's inputs as the plan's example passes them, without the batch
dimension.  Stage shapes are static (:class:`~pipeplan.executor.stages.Boundary`), so every microbatch sent
down the pipeline has exactly the plan's microbatch size ``B``:

- :meth:`RequestQueue.take` waits for a first request, then collects until it holds ``B`` or the
  oldest one has waited ``max_wait`` seconds — the latency bound of a lightly loaded deployment;
  under load the queue already holds ``B`` and nothing waits;
- :func:`stack` pads a partial microbatch by repeating its last sample (a real sample is a valid
  input by construction — zeros may not be: a token id out of range, an all-masked row that turns
  attention into NaN), and :func:`unstack` hands each request its own rows, dropping the padding's.

A full queue refuses: :meth:`RequestQueue.put` waits up to its ``timeout`` (0: not at all) for
room, then raises :class:`~pipeplan.executor.errors.QueueFullError`, so a caller sees back-pressure instead
of an unbounded backlog.

A switch holds the queue (:meth:`~RequestQueue.hold`: ``take`` hands out nothing meanwhile, submitters still
queue) and may :meth:`~RequestQueue.requeue` the requests of voided steps at its front, ahead of the
newer ones and past the capacity (they were admitted once already).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from pipeplan.executor.errors import DeploymentClosed, QueueFullError

__all__ = ["InputSpec", "Request", "RequestQueue", "input_specs", "sample_inputs", "stack", "unstack"]


@dataclass
class Request:
    """One submitted sample and the future its answer goes to; times are ``time.perf_counter()``."""

    id: int
    inputs: tuple[Any, ...]  # flat, as stage 0 takes them, without the batch dimension
    future: Future[Any]
    submitted: float
    dispatched: float = field(default=0.0)  # when its microbatch left for stage 0


class InputSpec(NamedTuple):
    """One flat input of the model: a batched tensor (``shape`` without the batch dimension), or a
    value every microbatch shares (``fixed``: a scalar, a 0-d tensor, None)."""

    shape: tuple[int, ...] | None
    dtype: torch.dtype | None
    fixed: Any = None


def input_specs(example: Sequence[Any]) -> list[InputSpec]:
    """What each flat input of one example microbatch is (see :class:`InputSpec`)."""
    return [InputSpec(tuple(a.shape[1:]), a.dtype) if isinstance(a, torch.Tensor) and a.dim() else
            InputSpec(None, None, a) for a in example]


def sample_inputs(specs: Sequence[InputSpec], flat: Sequence[Any]) -> tuple[Any, ...]:
    """One request's flat inputs, checked against ``specs``; a tensor may also carry a batch dimension of 1.

    Raises ValueError naming the input and the shape or dtype it should have.
    """
    if len(flat) != len(specs):
        raise ValueError(f"a request takes the model's {len(specs)} input(s) (as its example), got {len(flat)}")
    out: list[Any] = []
    for k, (spec, value) in enumerate(zip(specs, flat, strict=True)):
        if spec.shape is None:
            same = (torch.equal(value, spec.fixed) if isinstance(value, torch.Tensor) and
                    isinstance(spec.fixed, torch.Tensor) else value == spec.fixed)
            if not same:
                raise ValueError(f"input {k} has no batch dimension, so every request must pass the example's "
                                 f"value {spec.fixed!r}, got {value!r}")
            out.append(spec.fixed)
            continue
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"input {k} must be a tensor of shape {list(spec.shape)}, got {type(value).__name__}")
        if tuple(value.shape) == (1, *spec.shape):
            value = value[0]
        if tuple(value.shape) != spec.shape or value.dtype != spec.dtype:
            raise ValueError(f"input {k} must be one sample of shape {list(spec.shape)} and dtype {spec.dtype} "
                             f"(the plan's example without its batch dimension), got {list(value.shape)} "
                             f"{value.dtype}")
        out.append(value.detach().cpu())
    return tuple(out)


def stack(requests: Sequence[Request], specs: Sequence[InputSpec], size: int) -> tuple[Any, ...]:
    """The flat inputs of one microbatch of ``size`` samples: the requests', then copies of the last one."""
    if not 0 < len(requests) <= size:
        raise ValueError(f"a microbatch holds 1 to {size} requests, got {len(requests)}")
    padded = [*requests, *[requests[-1]] * (size - len(requests))]
    return tuple(torch.stack([r.inputs[k] for r in padded]) if spec.shape is not None else spec.fixed
                 for k, spec in enumerate(specs))


def unstack(outputs: Sequence[torch.Tensor], count: int) -> list[tuple[torch.Tensor, ...]]:
    """Each of the first ``count`` samples' rows of ``outputs``; the padding's rows are dropped."""
    return [tuple(t[i].clone() for t in outputs) for i in range(count)]


class RequestQueue:
    """A bounded FIFO of :class:`Request` shared by the callers of ``submit`` and the thread feeding
    stage 0.  :meth:`close` stops new requests; :meth:`take` then drains what is left."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"queue capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._items: deque[Request] = deque()
        self._cond = threading.Condition()
        self._closed: BaseException | None = None
        self._held = False

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, request: Request, timeout: float = 0.0) -> None:
        """Enqueue ``request``, waiting up to ``timeout`` seconds for room."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed is not None:
                    raise DeploymentClosed(f"the deployment takes no more requests: {self._closed}") \
                        from self._closed
                if len(self._items) < self.capacity:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise QueueFullError(f"the request queue is full ({self.capacity} waiting); retry later, "
                                         "pass a submit timeout to wait for room, or deploy with a larger "
                                         "queue_size")
                self._cond.wait(left)
            self._items.append(request)
            self._cond.notify_all()

    def take(self, size: int, max_wait: float) -> list[Request] | None:
        """Up to ``size`` requests, once ``size`` are waiting or the oldest has waited ``max_wait``
        seconds; blocks while the queue is empty.  Returns [] once closed and empty, None while held."""
        with self._cond:
            while not self._items or self._held:
                if self._held:
                    return None
                if self._closed is not None:
                    return []
                self._cond.wait()
            deadline = self._items[0].submitted + max_wait
            while len(self._items) < size and self._closed is None and not self._held:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._cond.wait(left)
            if self._held:
                return None
            taken = [self._items.popleft() for _ in range(min(size, len(self._items)))]
            self._cond.notify_all()  # room for waiting submitters
            return taken

    def hold(self) -> None:
        """Hand out nothing until :meth:`release` (a ``take`` waiting returns None at once)."""
        with self._cond:
            self._held = True
            self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def wait_released(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for :meth:`release`."""
        with self._cond:
            if self._held:
                self._cond.wait(timeout)

    def requeue(self, requests: Sequence[Request]) -> None:
        """Put ``requests`` back at the front, in their order (even when closed: they were admitted)."""
        with self._cond:
            self._items.extendleft(reversed(requests))
            self._cond.notify_all()

    def close(self, reason: BaseException) -> None:
        """Refuse new requests from now on (``reason`` is what ``put`` reports); queued ones stay."""
        with self._cond:
            if self._closed is None:
                self._closed = reason
            self._cond.notify_all()

    def clear(self) -> list[Request]:
        """Remove and return every queued request (to fail them)."""
        with self._cond:
            taken = list(self._items)
            self._items.clear()
            self._cond.notify_all()
            return taken
