"""A real service process for the tests: ``pipeplan serve`` on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

__all__ = ["Server", "cli", "create_token", "free_port", "start_server", "wait_job"]

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(database_url: str, settings: dict[str, Any]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEPLAN_")}
    env["PIPEPLAN_DATABASE_URL"] = database_url
    env.update({f"PIPEPLAN_{k.upper()}": str(v) for k, v in settings.items()})
    return env


def create_token(database_url: str, name: str = "tests", owner: str | None = None, scopes: str = "read plan") -> str:
    """A stored token (test_cli checks ``pipeplan token create`` itself, which also loads torch)."""
    from pipeplan.api.auth import create_token as create
    from pipeplan.api.database import Database

    db = Database(database_url)
    try:
        db.migrate()
        return create(db, name, owner, scopes)
    finally:
        db.dispose()


def cli(database_url: str, *args: str, timeout: float = 120,
        module: str = "pipeplan") -> subprocess.CompletedProcess[str]:
    """Run ``pipeplan ARGS`` on ``database_url`` (``module="pipeplan.api"``: the service's own commands, without
    loading torch)."""
    return subprocess.run([sys.executable, "-m", module, *args], env=_env(database_url, {}), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class Server:
    url: str
    database_url: str
    settings: dict[str, Any]
    process: subprocess.Popen[bytes]
    log: Path
    tokens: list[str] = field(default_factory=list)

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, **kwargs)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # uvicorn shuts down cleanly: lifespan stops workers
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start_server(database_url: str, log: Path, workers: int = 2, log_level: str = "warning", access_log: bool = False,
                 **settings: Any) -> Server:
    port = free_port()
    out = log.open("ab")
    process = subprocess.Popen(
        # ``python -m pipeplan.api serve`` is ``pipeplan serve`` without the rest of the CLI (which imports torch).
        [sys.executable, "-m", "pipeplan.api", "serve", "--port", str(port), "--workers", str(workers),
         "--log-level", log_level, *([] if access_log else ["--no-access-log"])],
        env=_env(database_url, settings), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    server = Server(f"http://127.0.0.1:{port}", database_url, settings, process, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{server.url}/readyz", timeout=1).status_code == 200:  # workers ready too
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"the server did not answer within 60 s:\n{log.read_text()[-3000:]}")


def wait_job(client: httpx.Client, url: str, until: tuple[str, ...] = ("done", "failed"),
             timeout: float = 60.0) -> dict[str, Any]:
    """Poll a job until its status is one of ``until``; its last view."""
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(url).json()
        if job["status"] in until or time.monotonic() > deadline:
            return job
        time.sleep(0.05)
