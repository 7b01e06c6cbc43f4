"""Bounded load on the planning service over loopback: latency and throughput, printed as a table.

Starts ``python -m pipeplan.api serve`` on a fresh SQLite file (or ``--database-url``), makes a token and a
few plans, then offers load at fixed rates (open loop: request i is due at i / rate seconds, whether
or not earlier ones have answered) through a bounded pool of keep-alive connections:

- ``cached GET``: ``GET /v1/plans/{id}`` of stored plans;
- ``cached POST``: ``POST /v1/plans`` of requests identical to earlier ones (answered from the store);
- ``new plans``: ``POST /v1/plans`` of small problems never seen before (6-layer chains on the
  4-device ``hetero-a100-t4``, each solved by CP-SAT in a worker process).

Latency runs from the moment a request was due to the end of its answer, so a server (or client)
that falls behind is charged for the wait.  The client is a minimal HTTP/1.1 client on asyncio,
to leave the CPU to the server.

    .venv/bin/python benchmarks/load_service.py                      # 200 req/s for 10 s each
    .venv/bin/python benchmarks/load_service.py --rate 400 --duration 20 --markdown
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass
class Result:
    name: str
    rate: float
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    wall: float = 0.0
    cpu: float | None = None  # seconds of the server process's CPU

    def row(self) -> list[str]:
        lat = sorted(self.latencies)
        done = len(lat)

        def pct(p: float) -> str:
            return f"{1000 * lat[min(done - 1, int(p * done))]:.1f}" if done else "-"

        errors = sum(self.errors.values())
        detail = ", ".join(f"{k}×{v}" for k, v in sorted(self.errors.items()))
        return [self.name, f"{self.rate:g}", str(done + errors), f"{errors}" + (f" ({detail})" if detail else ""),
                pct(0.5), pct(0.99), f"{1000 * lat[-1]:.1f}" if done else "-",
                f"{statistics.fmean(lat) * 1000:.1f}" if done else "-", f"{done / self.wall:.1f}",
                f"{1000 * self.cpu / (done + errors):.2f}" if self.cpu is not None and done + errors else "-"]


class Connection:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes, token: str) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        if not status_line:
            self.writer = None
            raise ConnectionError("connection closed")
        status = int(status_line.split()[1])
        length = 0
        closing = False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                closing = True
        payload = await self.reader.readexactly(length)
        if closing:
            self.writer.close()
            self.writer = None
        return status, payload


def process_cpu(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` (Linux), None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def offer(name: str, url: str | list[str], token: str, requests: list[tuple[str, str, bytes]], rate: float,
                connections: int, ok: tuple[int, ...], server_pid: int | None = None) -> Result:
    """``requests`` sent open loop at ``rate`` per second over ``connections`` kept-alive connections
    (spread round robin over ``url``'s servers when it lists several); latency counts from the moment
    a request was due."""
    urls = [url] if isinstance(url, str) else url
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    for i in range(connections):
        host, port = urls[i % len(urls)].removeprefix("http://").split(":")
        pool.put_nowait(Connection(host, int(port)))
    result = Result(name, rate)

    async def one(due: float, method: str, path: str, body: bytes) -> None:
        conn = await pool.get()
        try:
            status, _ = await conn.request(method, path, body, token)
            key = None if status in ok else str(status)
        except (OSError, ConnectionError, asyncio.IncompleteReadError) as exc:
            conn.writer = None
            key = type(exc).__name__
        finally:
            pool.put_nowait(conn)
        if key is None:
            result.latencies.append(time.perf_counter() - due)
        else:
            result.errors[key] = result.errors.get(key, 0) + 1

    cpu_before = process_cpu(server_pid)
    start = time.perf_counter()
    tasks = []
    for i, (method, path, body) in enumerate(requests):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due, method, path, body)))
    await asyncio.gather(*tasks)
    result.wall = time.perf_counter() - start
    cpu_after = process_cpu(server_pid)
    if cpu_before is not None and cpu_after is not None:
        result.cpu = cpu_after - cpu_before
    return result


def chain(n: int, seed: int) -> dict[str, Any]:
    layers = [{"name": f"l{i}", "kind": "linear", "module_type": "Linear", "order": i,
               "flops": 10**9 * (1 + (i + seed) % 5), "bytes_read": 10**6, "bytes_written": 10**5,
               "param_bytes": 10**6 * (1 + i % 3), "activation_bytes": 10**5, "kernels": 1} for i in range(n)]
    edges = [{"src": f"l{i}", "dst": f"l{i + 1}", "bytes": 10**5 * (1 + (i * seed) % 7)} for i in range(n - 1)]
    return {"format": "pipeplan.graph", "version": 1, "model": f"bench-{seed}", "batch_size": 1,
            "layers": layers, "edges": edges}


def plan_request(seed: int) -> bytes:
    return json.dumps({"model": {"graph": chain(6, seed)}, "cluster": "hetero-a100-t4",
                       "solver": {"time_limit": 5, "seed": 0}}).encode()


def start_server(database_url: str, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PIPEPLAN_DATABASE_URL": database_url, "PIPEPLAN_QUEUE_SIZE": "256"}
    process = subprocess.Popen([sys.executable, "-m", "pipeplan.api", "serve", "--port", str(port),
                                "--workers", str(workers),
                                "--no-access-log", "--log-level", "warning"], env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("the service did not start")


def table(results: list[Result], markdown: bool) -> str:
    header = ["scenario", "offered req/s", "requests", "errors", "p50 ms", "p99 ms", "max ms", "mean ms",
              "answered req/s", "server CPU ms/req"]
    rows = [header] + [r.row() for r in results]
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows[1:]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


async def run(args: argparse.Namespace, url: str, token: str, pid: int) -> list[Result]:
    import httpx

    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        ids = []
        for seed in range(args.plans):  # the stored plans the cached scenarios read
            answer = await c.post("/v1/plans", content=plan_request(seed), headers={"content-type": "application/json"})
            assert answer.status_code in (200, 201), answer.text
            ids.append(answer.json()["id"])
    n = int(args.rate * args.duration)
    results = []
    # Warm-up: first connections and code paths, not counted.
    await offer("warm-up", url, token, [("GET", f"/v1/plans/{ids[0]}", b"")] * 200, args.rate, args.connections, (200,))
    gets = [("GET", f"/v1/plans/{ids[i % len(ids)]}", b"") for i in range(n)]
    results.append(await offer("cached GET /v1/plans/{id}", url, token, gets, args.rate, args.connections, (200,),
                               pid))
    posts = [("POST", "/v1/plans", plan_request(i % len(ids))) for i in range(n)]
    results.append(await offer("cached POST /v1/plans", url, token, posts, args.rate, args.connections, (200,),
                               pid))
    m = int(args.new_rate * args.duration)
    new = [("POST", "/v1/plans", plan_request(10_000 + i)) for i in range(m)]
    # The server's CPU here leaves out the solves, which run in the workers.
    results.append(await offer("new small plans", url, token, new, args.new_rate, args.connections, (201,), pid))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200.0, help="offered req/s for cached reads (200)")
    parser.add_argument("--new-rate", type=float, default=10.0, help="offered req/s of new plans (10)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per scenario (10)")
    parser.add_argument("--connections", type=int, default=32, help="keep-alive connections at most (32)")
    parser.add_argument("--plans", type=int, default=20, help="stored plans the cached scenarios read (20)")
    parser.add_argument("--workers", type=int, default=1, help="solver worker processes of the service (1)")
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()

    from pipeplan.api.auth import create_token
    from pipeplan.api.database import Database

    with tempfile.TemporaryDirectory() as tmp:
        database_url = args.database_url or f"sqlite:///{tmp}/bench.db"
        db = Database(database_url)
        db.migrate()
        token = create_token(db, "load-bench")
        db.dispose()
        process, url = start_server(database_url, args.workers)
        try:
            load = os.getloadavg()[0]
            results = asyncio.run(run(args, url, token, process.pid))
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(30)
    print(f"pipeplan service on {url}, {args.workers} worker(s), {os.cpu_count()} CPUs (load average "
          f"{load:.1f} at the start), {'SQLite' if database_url.startswith('sqlite') else 'PostgreSQL'}, "
          f"{args.duration:g} s per scenario")
    print(table(results, args.markdown))


if __name__ == "__main__":
    main()
