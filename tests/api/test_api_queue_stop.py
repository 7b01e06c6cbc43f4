"""A stopping queue worker's side tasks end even when one loses its cancellation
(:func:`pipeplan.api.queue_worker._stop_tasks`): a database driver's call can swallow a cancel, and the
worker then waited for its sweeper forever (``test_a_stopped_worker_finishes_or_hands_back_its_jobs``
hung 1 run in 6). Real asyncio tasks, no database."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from pipeplan.api.queue_worker import _stop_tasks


def test_a_task_that_swallows_its_cancellation_is_cancelled_again() -> None:
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed == 1:
                    continue  # lost, as inside the driver's call: back to sleep
                raise

    async def main() -> tuple[asyncio.Task[None], float]:
        task = asyncio.create_task(stubborn(), name="stubborn")
        await asyncio.sleep(0)
        started = time.monotonic()
        await _stop_tasks([task], patience=5)
        return task, time.monotonic() - started

    task, took = asyncio.run(main())
    assert task.cancelled() and swallowed == 2
    assert took < 3, took  # the second cancel came after a second's wait, not after the patience


def test_a_task_that_will_not_stop_is_left_behind_after_the_patience(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> tuple[bool, float, int]:
        release = asyncio.Event()
        cancels = 0

        async def deaf() -> None:
            nonlocal cancels
            while not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    cancels += 1
        task = asyncio.create_task(deaf(), name="deaf")
        await asyncio.sleep(0)
        started = time.monotonic()
        await _stop_tasks([task], patience=1.5)
        took, pending = time.monotonic() - started, not task.done()
        release.set()  # let it go, so that asyncio.run can end
        await task
        return pending, took, cancels

    with caplog.at_level(logging.ERROR, logger="pipeplan.api.queue_worker"):
        pending, took, cancels = asyncio.run(main())
    assert pending and 1.4 <= took < 3, took
    assert cancels >= 2  # cancelled again each second
    assert "tasks did not stop when cancelled: deaf; left behind" in caplog.text
