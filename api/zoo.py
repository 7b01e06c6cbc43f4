"""The model zoo as the service knows it, listed once by a helper process and then answered from
memory.

The zoo module imports torch, which the server process never does (it would cost seconds and
hundreds of MB); the solver workers could list it, but then a listing would wait behind solves.  So
the first request that needs the list starts a short-lived ``python -m api.worker models`` process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any

from api.errors import ApiError

__all__ = ["ZooCatalog"]


class ZooCatalog:
    def __init__(self, timeout: float, retry_after: int) -> None:
        self._timeout = timeout
        self._retry_after = retry_after
        self._lock = threading.Lock()
        self._future: Future[list[dict[str, Any]]] | None = None

    def start(self) -> Future[list[dict[str, Any]]]:
        """Start listing the zoo unless the list is known or on its way (a failure is retried)."""
        with self._lock:
            if self._future is not None and not (self._future.done() and self._future.exception()):
                return self._future
            future: Future[list[dict[str, Any]]] = Future()
            self._future = future
        threading.Thread(target=self._list, args=(future,), name="pipeplan-zoo", daemon=True).start()
        return future

    def _list(self, future: Future[list[dict[str, Any]]]) -> None:
        try:
            done = subprocess.run([sys.executable, "-m", "api.worker", "models"], capture_output=True, text=True,
                                  timeout=self._timeout, check=False)
            if done.returncode != 0:
                tail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
                raise RuntimeError(f"listing the zoo failed: {tail[0]}")
            future.set_result(json.loads(done.stdout))
        except (OSError, subprocess.TimeoutExpired, ValueError, RuntimeError) as exc:
            future.set_exception(RuntimeError(str(exc)))

    async def models(self) -> list[dict[str, Any]]:
        future = self.start()
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), self._timeout)
        except (TimeoutError, RuntimeError) as exc:
            raise ApiError(503, f"the model zoo is not available ({exc or 'still loading'}); try again",
                           [], "unavailable", headers={"Retry-After": str(self._retry_after)}) from None

    async def canonical_name(self, name: str) -> str:
        """The zoo's spelling of ``name`` (case-insensitive); a 422 listing the names otherwise."""
        models = await self.models()
        wanted = name.strip().lower()
        for m in models:
            if m["name"] == wanted:
                return str(m["name"])
        raise ApiError(422, f"unknown model {name!r}: the zoo has {', '.join(m['name'] for m in models)} "
                       "(or send a graph document as model.graph)", ["body", "model", "name"])
