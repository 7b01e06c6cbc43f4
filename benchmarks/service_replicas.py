"""Several replicas and queue workers on one PostgreSQL, on this machine: throughput, cached reads,
and jobs lost when a replica and a worker are killed mid-load.

Starts ``--replicas`` servers (``python -m pipeplan.api serve``) and ``--workers`` queue workers
(``python -m pipeplan.api worker``, one solver process each) with ``PIPEPLAN_JOB_QUEUE=postgresql``, on a
schema of its own in the PostgreSQL at ``--database-url`` (dropped at the end), then measures:

- ``cached GET``: ``GET /v1/plans/{id}`` of stored plans, open loop at ``--rate``, round robin over
  the replicas (latency from the moment a request was due, as in ``load_service.py``);
- ``new plans``: ``--clients`` clients each posting new 6-layer chains (``wait`` 60: the answer is
  the plan), round robin over the replicas, until ``--new`` plans are made: plans per second;
- ``kill``: ``--kill-jobs`` new plans posted at ``--kill-rate`` per second, each with an
  ``Idempotency-Key`` and ``wait`` ``--kill-wait`` (so that some are in flight on the replica that
  dies), of wide graphs on 8 devices (CP-SAT runs each to its ``--kill-seconds`` time limit, so that
  the workers are busy); a third of the way in, one replica and the worker of the job that started
  last are killed (SIGKILL to their process groups: their solver and predict processes die too).  A
  post whose replica died is sent again, with the same key, to another replica.  Then every accepted
  job is followed (through the live replicas) until it ends: jobs lost are those accepted that never
  ended ``done``; each plan must be stored once.

    .venv/bin/python benchmarks/service_replicas.py                  # 3 replicas, 4 workers
    .venv/bin/python benchmarks/service_replicas.py --markdown --rate 200 --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from load_service import Result, chain, offer, table  # noqa: E402

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@dataclass
class Proc:
    kind: str  # replica | worker
    process: subprocess.Popen[bytes]
    url: str | None = None
    alive: bool = True

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.alive = False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self.alive = False


@dataclass
class KillReport:
    posted: int = 0
    accepted: int = 0
    resent: int = 0  # posts sent again to another replica after theirs died
    done: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    reclaimed: int = 0  # jobs claimed more than once (their worker was killed)
    duplicate_plans: int = 0
    victim_jobs: int = 0  # jobs the killed worker was running a moment before
    wall: float = 0.0
    drained: float = 0.0  # seconds from the kill until every accepted job had ended


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(database_url: str, args: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEPLAN_")}
    env.update({"PIPEPLAN_DATABASE_URL": database_url, "PIPEPLAN_JOB_QUEUE": "postgresql",
                "PIPEPLAN_QUEUE_SIZE": "5000", "PIPEPLAN_QUEUE_HEARTBEAT": str(args.heartbeat),
                "PIPEPLAN_QUEUE_LEASE": str(args.lease), "PIPEPLAN_LOG_FORMAT": "text"})
    return env


def start(kind: str, database_url: str, args: argparse.Namespace, log: Path) -> Proc:
    out = log.open("ab")
    if kind == "worker":
        cmd = [sys.executable, "-m", "pipeplan.api", "worker", "--workers", str(args.solvers), "--log-level", "warning"]
        return Proc(kind, subprocess.Popen(cmd, env=_env(database_url, args), cwd=ROOT, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True))
    port = _free_port()
    cmd = [sys.executable, "-m", "pipeplan.api", "serve", "--port", str(port), "--no-access-log",
           "--log-level", "warning"]
    return Proc(kind, subprocess.Popen(cmd, env=_env(database_url, args), cwd=ROOT, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True), f"http://127.0.0.1:{port}")


def wait_ready(procs: list[Proc], workers: int) -> None:
    import httpx

    deadline = time.monotonic() + 120
    for p in procs:
        while True:
            if p.process.poll() is not None:
                raise SystemExit(f"a {p.kind} exited with {p.process.returncode}")
            try:
                health = httpx.get(f"{p.url}/healthz", timeout=2).json()
                if (health.get("queue") or {}).get("workers") == workers:
                    break
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the service did not start")
            time.sleep(0.2)


def plan_body(seed: int, wait: float) -> bytes:
    return json.dumps({"model": {"graph": chain(6, seed)}, "cluster": "hetero-a100-t4", "wait": wait,
                       "solver": {"time_limit": 5, "seed": 0}}).encode()


def wide(seed: int, branches: int = 12, depth: int = 6) -> dict[str, Any]:
    """A stem, ``branches`` parallel chains and a join: CP-SAT searches it until its time limit on 8 devices."""
    rng = random.Random(seed)
    layer = {"kind": "linear", "module_type": "Linear", "bytes_read": 10**6, "bytes_written": 10**6,
             "param_bytes": 10**6, "activation_bytes": 10**6, "kernels": 1}
    join = branches * depth + 1
    layers = [{"name": "l0", "order": 0, "flops": 10**9, **layer}]
    edges = []
    for b in range(branches):
        prev = 0
        for d in range(depth):
            v = 1 + b * depth + d
            layers.append({"name": f"l{v}", "order": v, "flops": int(10 ** rng.uniform(8, 10)), **layer})
            edges.append({"src": f"l{prev}", "dst": f"l{v}", "bytes": 10**6})
            prev = v
        edges.append({"src": f"l{prev}", "dst": f"l{join}", "bytes": 10**6})
    layers.append({"name": f"l{join}", "order": join, "flops": 10**9, **layer})
    return {"format": "pipeplan.graph", "version": 1, "model": f"bench-{seed}", "batch_size": 1, "layers": layers,
            "edges": edges}


def long_body(seed: int, seconds: float, wait: float) -> bytes:
    """A job that runs about ``seconds`` in its solver, so that a worker killed at any moment holds some."""
    return json.dumps({"model": {"graph": wide(seed)}, "cluster": "8gpu-2hosts", "wait": wait,
                       "solver": {"time_limit": seconds, "seed": 0}}).encode()


async def cached_reads(urls: list[str], token: str, ids: list[str], rate: float, duration: float,
                       connections: int) -> Result:
    """``offer`` of load_service.py over several replicas: connections spread round robin."""
    gets = [("GET", f"/v1/plans/{ids[i % len(ids)]}", b"") for i in range(int(rate * duration))]
    return await offer(f"cached GET /v1/plans/{{id}} ({len(urls)} replicas)", urls, token, gets, rate, connections,
                       (200,))


async def new_plans(urls: list[str], token: str, count: int, clients: int, first_seed: int) -> Result:
    """``clients`` closed-loop clients posting new plans until ``count`` are made."""
    import httpx

    result = Result(f"new plans ({clients} clients, closed loop)", 0.0)
    seeds = iter(range(first_seed, first_seed + count))
    headers = {"Authorization": f"Bearer {token}", "content-type": "application/json"}

    async def client(k: int) -> None:
        async with httpx.AsyncClient(headers=headers, timeout=120) as c:
            for i, seed in enumerate(seeds):
                url = urls[(k + i) % len(urls)]
                started = time.perf_counter()
                try:
                    answer = await c.post(f"{url}/v1/plans", content=plan_body(seed, 60))
                    key = None if answer.status_code == 201 else str(answer.status_code)
                except httpx.HTTPError as exc:
                    key = type(exc).__name__
                if key is None:
                    result.latencies.append(time.perf_counter() - started)
                else:
                    result.errors[key] = result.errors.get(key, 0) + 1

    start = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(clients)))
    result.wall = time.perf_counter() - start
    result.rate = round(len(result.latencies) / result.wall, 1)
    return result


async def kill_mid_load(replicas: list[Proc], workers: list[Proc], token: str, args: argparse.Namespace,
                        first_seed: int, database_url: str) -> KillReport:
    import httpx

    report = KillReport()
    headers = {"Authorization": f"Bearer {token}", "content-type": "application/json"}
    jobs: dict[int, str] = {}  # seed -> job url
    killed_at: float | None = None
    victim_replica = replicas[0]

    async def post(c: httpx.AsyncClient, i: int, seed: int) -> None:
        key = uuid.uuid4().hex
        for attempt in range(len(replicas) * 3):
            live = [r for r in replicas if r.alive]
            replica = live[(i + attempt) % len(live)]
            try:
                body = long_body(seed, args.kill_seconds, args.kill_wait)
                answer = await c.post(f"{replica.url}/v1/plans", content=body, headers={"Idempotency-Key": key})
            except httpx.HTTPError:
                report.resent += 1
                await asyncio.sleep(0.2)
                continue
            if answer.status_code in (200, 201, 202):  # 200, 201: the plan already; 202: the job
                jobs[seed] = answer.json()["url"] if answer.status_code == 202 else answer.headers["location"]
                report.accepted += 1
                return
            report.failed[str(answer.status_code)] = report.failed.get(str(answer.status_code), 0) + 1
            return

    async def kill_later(delay: float) -> None:
        nonlocal killed_at
        await asyncio.sleep(delay)
        by_name = {f"{socket.gethostname()}:{w.process.pid}": w for w in workers}
        victim = workers[0]
        running: list[dict[str, Any]] = []
        async with httpx.AsyncClient(timeout=10) as c:
            live = next(r for r in replicas if r is not victim_replica)
            for _ in range(50):  # the worker of the job that started last: far from its end
                running = [j for j in (await c.get(f"{live.url}/v1/jobs", params={"status": "running", "limit": 200},
                                                   headers=headers)).json()["items"] if j["worker"] in by_name]
                if running:
                    victim = by_name[max(running, key=lambda j: j["started_at"])["worker"]]
                    break
                await asyncio.sleep(0.1)
        victim_replica.kill()
        victim.kill()
        killed_at = time.perf_counter()
        report.victim_jobs = sum(j["worker"] == f"{socket.gethostname()}:{victim.process.pid}" for j in running)

    n = args.kill_jobs
    start = time.perf_counter()
    async with httpx.AsyncClient(headers=headers, timeout=60) as c:
        killer = asyncio.create_task(kill_later(n / args.kill_rate / 3))
        tasks = []
        for i in range(n):
            due = start + i / args.kill_rate
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(post(c, i, first_seed + i)))
            report.posted += 1
        await asyncio.gather(*tasks)
        await killer
        # Follow every accepted job to its end through a live replica.
        live = [r for r in replicas if r.alive]
        pending = dict(jobs)
        deadline = time.perf_counter() + args.lease * 4 + 120
        final: dict[int, dict[str, Any]] = {}
        while pending and time.perf_counter() < deadline:
            for seed, url in list(pending.items()):
                if url.startswith("/v1/plans/"):  # answered with a stored plan: done
                    final[seed] = {"status": "done", "attempts": 1}
                    del pending[seed]
                    continue
                job = (await c.get(f"{random.choice(live).url}{url}")).json()
                if job["status"] in ("done", "failed", "cancelled"):
                    final[seed] = job
                    del pending[seed]
            await asyncio.sleep(0.2)
        assert killed_at is not None
        report.drained = time.perf_counter() - killed_at
    report.wall = time.perf_counter() - start
    for job in final.values():
        if job["status"] == "done":
            report.done += 1
        else:
            why = job.get("error_type") or job["status"]
            report.failed[why] = report.failed.get(why, 0) + 1
        report.reclaimed += job.get("attempts", 1) > 1
    report.lost = report.accepted - report.done
    report.duplicate_plans = _duplicates(database_url, first_seed, n)
    return report


def _duplicates(database_url: str, first_seed: int, n: int) -> int:
    """Plans stored more than once for one model of the kill scenario (each seed is its own model)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT model, count(*) FROM plans GROUP BY model HAVING count(*) > 1")).all()
    finally:
        engine.dispose()
    models = {f"bench-{s}" for s in range(first_seed, first_seed + n)}
    return sum(count - 1 for model, count in rows if model in models)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4, help="queue worker processes (4)")
    parser.add_argument("--solvers", type=int, default=1, help="solver processes per worker (1)")
    parser.add_argument("--rate", type=float, default=200.0, help="offered req/s of cached reads (200)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of cached reads (10)")
    parser.add_argument("--connections", type=int, default=32, help="keep-alive connections for reads (32)")
    parser.add_argument("--plans", type=int, default=20, help="stored plans the reads cycle through (20)")
    parser.add_argument("--new", type=int, default=120, help="new plans made for the throughput (120)")
    parser.add_argument("--clients", type=int, default=8, help="closed-loop clients making new plans (8)")
    parser.add_argument("--kill-jobs", type=int, default=60, help="jobs posted in the kill scenario (60)")
    parser.add_argument("--kill-rate", type=float, default=2.0, help="jobs posted per second there (2)")
    parser.add_argument("--kill-seconds", type=float, default=2.0,
                        help="solver time limit of those jobs: each runs about this long (2)")
    parser.add_argument("--kill-wait", type=float, default=3.0,
                        help="seconds each of those posts waits for its plan (3): requests are in flight on the "
                             "replica that dies")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="PIPEPLAN_QUEUE_HEARTBEAT (1)")
    parser.add_argument("--lease", type=float, default=5.0, help="PIPEPLAN_QUEUE_LEASE (5)")
    parser.add_argument("--database-url", default=PG, help=f"a PostgreSQL database ({PG}); a schema of its own")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()

    import httpx
    from sqlalchemy import create_engine, text

    from pipeplan.api.auth import create_token
    from pipeplan.api.database import Database

    schema = f"pipeplan_bench_{uuid.uuid4().hex[:8]}"
    root = create_engine(args.database_url)
    with root.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    database_url = f"{args.database_url}?options=-csearch_path%3D{schema}"
    procs: list[Proc] = []
    try:
        db = Database(database_url)
        db.migrate()
        token = create_token(db, "bench", None, "read plan")
        db.dispose()
        with tempfile.TemporaryDirectory() as tmp:
            workers = [start("worker", database_url, args, Path(tmp) / f"worker{i}.log") for i in range(args.workers)]
            procs += workers
            time.sleep(2)  # the first worker creates the queue's tables; the others find them
            replicas = [start("replica", database_url, args, Path(tmp) / f"replica{i}.log")
                        for i in range(args.replicas)]
            procs += replicas
            wait_ready(replicas, args.workers)
            urls = [r.url for r in replicas if r.url]
            ids = []
            for seed in range(args.plans):
                answer = httpx.post(f"{urls[seed % len(urls)]}/v1/plans", content=plan_body(seed, 60), timeout=120,
                                    headers={"Authorization": f"Bearer {token}", "content-type": "application/json"})
                assert answer.status_code in (200, 201), answer.text
                ids.append(answer.json()["id"])
            load = os.getloadavg()[0]
            reads = asyncio.run(cached_reads(urls, token, ids, args.rate, args.duration, args.connections))
            made = asyncio.run(new_plans(urls, token, args.new, args.clients, 10_000))
            killed = asyncio.run(kill_mid_load(replicas, workers, token, args, 100_000, database_url))
    finally:
        for p in procs:
            p.stop() if p.alive else None
        with root.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        root.dispose()

    print(f"{args.replicas} replicas, {args.workers} queue workers × {args.solvers} solver, one PostgreSQL, "
          f"{os.cpu_count()} CPUs (load average {load:.1f} at the start); heartbeat {args.heartbeat:g} s, "
          f"lease {args.lease:g} s")
    print(table([reads, made], args.markdown))
    print()
    lat = sorted(made.latencies)
    print(f"new plans: {len(lat)} in {made.wall:.1f} s = {len(lat) / made.wall:.1f} plans/s "
          f"(p50 {1000 * statistics.median(lat):.0f} ms per plan end to end)" if lat else "new plans: none")
    rows = [("posted", killed.posted), ("accepted", killed.accepted), ("posts resent after the replica died",
                                                                       killed.resent),
            ("done", killed.done), ("failed", sum(killed.failed.values())),
            ("jobs the killed worker was running", killed.victim_jobs),
            ("claimed again after the worker died", killed.reclaimed), ("plans stored twice", killed.duplicate_plans),
            ("**jobs lost**", killed.lost),
            ("seconds from the kill until every job had ended", f"{killed.drained:.1f}")]
    print(f"kill one replica and one worker a third of the way into {killed.posted} jobs "
          f"({args.kill_rate:g} per second):" + (f" failures {killed.failed}" if killed.failed else ""))
    if args.markdown:
        print("| | |\n|---|---:|")
        print("\n".join(f"| {k} | {v} |" for k, v in rows))
    else:
        print("\n".join(f"  {k.strip('*'):<48} {v}" for k, v in rows))


if __name__ == "__main__":
    main()
