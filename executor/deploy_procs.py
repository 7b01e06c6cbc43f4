"""A deployment's device processes: one per device, started when a layout first needs the device.

Each runs :func:`pipeplan.executor.deploy_stage.serve_device` under the launcher's stage body
(:func:`pipeplan.executor.launch.stage_main`: dies with its parent, imports the model's operator
registrations, reports ``("ok", totals)`` or ``("error", failure)`` on its result pipe), with two
pipes of its own: its *inbox* (the deployment's orders, written by several threads, so behind a
lock) and its *outbox* (its reports).  Unlike a run's processes, the set changes while the
deployment serves: a layout on a new device starts one, a layout without a device ends its process.
"""

from __future__ import annotations

import contextlib
import pickle
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from pipeplan.executor.launch import exit_reason, process_context, stage_main
from pipeplan.executor.options import RunSetup

__all__ = ["DeviceProcess", "start_device"]


class DeviceProcess:
    """The deployment's handle on one device process."""

    def __init__(self, device: str, process: Any, inbox: Connection, outbox: Connection, result: Connection) -> None:
        self.device = device
        self.process = process
        self.outbox = outbox  # its reports, read by the deployment's collector
        self.result = result  # the launcher's ("ok", totals) or ("error", failure), once it ends
        self._inbox = inbox
        self._lock = threading.Lock()
        self.ended: tuple[str, Any] | None = None  # set by :meth:`collect`

    @property
    def sentinel(self) -> int:
        return int(self.process.sentinel)

    def alive(self) -> bool:
        return self.ended is None and self.process.is_alive()

    def send(self, message: Any) -> bool:
        """Queue ``message`` in the process's inbox; False when the process is gone.

        Pickled here with the plain pickler: ``Connection.send`` would use torch's reductions, which
        move a tensor's storage to shared memory — the stage would then share its weights with this
        process instead of owning a copy."""
        data = pickle.dumps(message)
        with self._lock:
            try:
                self._inbox.send_bytes(data)
                return True
            except (OSError, ValueError):  # a broken pipe, or one we closed
                return False

    def collect(self) -> tuple[str, Any]:
        """How the process ended: ``("ok", totals)`` or ``("error", failure)``, as the launcher reports."""
        if self.ended is not None:
            return self.ended
        message: tuple[str, Any] | None = None
        with contextlib.suppress(EOFError, OSError):
            if self.result.poll(0.5):
                message = self.result.recv()
        if message is None:
            self.process.join(timeout=1)
            message = ("error", {"message": f"the process {exit_reason(self.process.exitcode)}", "origin": "exit",
                                 "details": ""})
        self.ended = message
        return message

    def stop(self, timeout: float = 5.0) -> None:
        """End the process (terminate, then kill) and close every pipe."""
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(timeout=timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        with self._lock:
            for conn in (self._inbox, self.outbox, self.result):
                conn.close()

    def close_inbox(self) -> None:
        """Close the inbox: the process reads EOF and stops."""
        with self._lock:
            self._inbox.close()


def start_device(device: str, setup: RunSetup, modules: Sequence[str]) -> DeviceProcess:
    """Start the process of ``device``; it waits for its first layout in its inbox."""
    from pipeplan.executor.deploy_stage import serve_device

    ctx = process_context()
    inbox_recv, inbox_send = ctx.Pipe(duplex=False)
    outbox_recv, outbox_send = ctx.Pipe(duplex=False)
    result_recv, result_send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=stage_main, name=f"pipeplan-deploy-{device}",
                          args=(0, setup, pickle.dumps(None), list(modules), "", result_send, serve_device,
                                (inbox_recv, outbox_send, device)))
    process.start()
    for conn in (inbox_recv, outbox_send, result_send):  # the child holds them: its death reads as EOF here
        conn.close()
    return DeviceProcess(device, process, inbox_send, outbox_recv, result_recv)
