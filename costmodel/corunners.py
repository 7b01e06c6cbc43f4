"""Real contention: co-running processes that keep a device busy while layers are timed or run.

A :class:`~pipeplan.costmodel.hardware.Contention` describes a load; :class:`CoRunners` creates it for real:

- ``kind="compute"``: each co-runner multiplies small dense matrices that stay in cache, so it takes
  the core's arithmetic units and little memory bandwidth;
- ``kind="memory"``: each co-runner streams copies between buffers far larger than the last-level
  cache, so it takes memory bandwidth and little arithmetic;
- ``kind="mixed"``: each co-runner alternates the two;
- ``kind="tenant"``: each co-runner behaves like another inference job: on a GPU it launches a
  chain of matmuls and activations back to back, waiting only every few dozen launches, so its
  context always has work queued (the synthetic kinds wait after every operation and leave the GPU
  idle in between); on a CPU it is the compute kind;
- ``duty`` below 1: each co-runner works ``duty`` of every 20 ms period and sleeps the rest;
- ``utilization=u``: one compute co-runner that works ``u`` of every 20 ms period and sleeps the rest.

Co-runners are separate OS processes (``python -m pipeplan.costmodel.corunners``), pinned to the given CPU
cores with one BLAS thread each, so that they share exactly the cores of the device under test.
On CUDA they run kernels on the given GPU instead. They exit by themselves if their parent dies, so
a crashed profiler or executor never leaves them spinning.

>>> from pipeplan.costmodel.hardware import Contention
>>> with CoRunners(Contention(corunners=1, kind="memory"), cores=[0]) as load:
...     len(load.pids)
1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from types import TracebackType

from pipeplan.costmodel.hardware import Contention

__all__ = ["CoRunnerError", "CoRunners"]

_PERIOD = 0.02  # seconds: one work/sleep cycle of a partially busy co-runner
_CPU_MATRIX = 256  # 256×256 float32 operands: 768 KiB, in L2/L3, so the work is arithmetic
_CPU_STREAM = 64 * 2**20  # bytes per buffer: well above any last-level cache
_GPU_MATRIX = 4096
_GPU_STREAM = 512 * 2**20
_TENANT_WIDTH = 2048  # a tenant's layers: 2048² fp32 matmuls (about 0.3 ms each on an H100)
_TENANT_QUEUE = 32  # launches a tenant queues before it waits for them
_SINGLE_THREAD = {var: "1" for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                       "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")}


class CoRunnerError(RuntimeError):
    """A co-runner could not start (or died while starting)."""


class CoRunners:
    """Start the co-runners that make ``load`` real on ``cores`` (CPU) or ``gpu`` (CUDA index).

    Use as a context manager; the processes are started on entry and killed on exit. An idle
    load starts nothing.
    """

    def __init__(self, load: Contention, cores: Sequence[int] | None = None, gpu: int | None = None,
                 start_timeout: float = 60.0) -> None:
        if cores is not None:
            available = os.sched_getaffinity(0)
            bad = [c for c in cores if c not in available]
            if bad or not cores:
                raise CoRunnerError(f"cores {list(cores)} are not all usable here (usable: {sorted(available)})")
        self.load = load
        self.cores = list(cores) if cores is not None else None
        self.gpu = gpu
        self.start_timeout = start_timeout
        self._procs: list[subprocess.Popen[str]] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def _commands(self) -> list[list[str]]:
        if self.load.utilization is not None:
            specs = [("compute", self.load.utilization)] if self.load.utilization > 0 else []
        else:
            specs = [(self.load.kind, self.load.duty)] * self.load.corunners
        base = [sys.executable, "-m", "pipeplan.costmodel.corunners"]
        where = (["--gpu", str(self.gpu)] if self.gpu is not None else
                 ["--cores", ",".join(map(str, self.cores))] if self.cores is not None else [])
        return [[*base, "--kind", kind, "--duty", f"{duty:.4f}", *where] for kind, duty in specs]

    def start(self) -> CoRunners:
        env = {**os.environ, **_SINGLE_THREAD}
        try:
            for cmd in self._commands():
                self._procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                    text=True, env=env))
            for proc in self._procs:  # wait until each one is really working
                line = _readline(proc, self.start_timeout)
                if line.strip() != "ready":
                    err = proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
                    raise CoRunnerError(f"co-runner {proc.args!r} did not start: {line.strip()!r} {err.strip()}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self._procs:
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()
        self._procs.clear()

    def __enter__(self) -> CoRunners:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __del__(self) -> None:  # a forgotten CoRunners must not leave processes behind
        if getattr(self, "_procs", None):
            self.stop()


def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    """One line of ``proc``'s stdout, or '' if it exits or ``timeout`` passes first."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return ""
    return proc.stdout.readline()


# --- the co-runner process itself -------------------------------------------------------------------

def _cpu_work(kind: str) -> Callable[[], object]:
    import numpy as np

    if kind in ("compute", "tenant"):
        a = np.random.default_rng(0).standard_normal((_CPU_MATRIX, _CPU_MATRIX), dtype=np.float32)
        b = a.copy()
        out = np.empty_like(a)
        return lambda: np.matmul(a, b, out=out)
    src = np.ones(_CPU_STREAM // 4, dtype=np.float32)
    dst = np.empty_like(src)
    if kind == "memory":
        return lambda: np.copyto(dst, src)
    compute = _cpu_work("compute")

    def mixed() -> None:
        np.copyto(dst, src)
        for _ in range(20):
            compute()

    return mixed


def _gpu_work(kind: str, gpu: int) -> Callable[[], object]:
    import torch

    dev = torch.device("cuda", gpu)
    if kind == "tenant":
        x = torch.randn(_TENANT_WIDTH, _TENANT_WIDTH, device=dev)
        w = torch.randn(_TENANT_WIDTH, _TENANT_WIDTH, device=dev) / _TENANT_WIDTH**0.5

        def infer() -> None:
            h = x
            for _ in range(_TENANT_QUEUE // 2):
                h = torch.relu(h @ w)
            torch.cuda.synchronize(dev)
        return infer
    if kind == "compute":
        a = torch.randn(_GPU_MATRIX, _GPU_MATRIX, device=dev, dtype=torch.float16)
        def compute() -> None:
            torch.mm(a, a)
            torch.cuda.synchronize(dev)
        return compute
    src = torch.ones(_GPU_STREAM // 4, device=dev)
    dst = torch.empty_like(src)
    a = torch.randn(_GPU_MATRIX, _GPU_MATRIX, device=dev, dtype=torch.float16)

    def stream() -> None:
        dst.copy_(src)
        if kind == "mixed":
            torch.mm(a, a)
        torch.cuda.synchronize(dev)
    return stream


def _run(kind: str, duty: float, cores: list[int] | None, gpu: int | None) -> None:
    if cores:
        os.sched_setaffinity(0, cores)
    work = _gpu_work(kind, gpu) if gpu is not None else _cpu_work(kind)
    parent = os.getppid()
    work()
    print("ready", flush=True)
    while os.getppid() == parent:  # the parent died: we were re-parented, stop
        start = time.perf_counter()
        while time.perf_counter() - start < _PERIOD * duty:
            work()
        if duty < 1.0:
            time.sleep(max(0.0, _PERIOD * (1.0 - duty)))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeplan.costmodel.corunners",
                                     description="One co-runner process (started by CoRunners).")
    parser.add_argument("--kind", choices=("compute", "memory", "mixed", "tenant"), required=True)
    parser.add_argument("--duty", type=float, default=1.0, help="share of each 20 ms period spent working")
    parser.add_argument("--cores", help="comma-separated CPU cores to pin to")
    parser.add_argument("--gpu", type=int, help="CUDA device index to load instead of the CPU")
    args = parser.parse_args(argv)
    cores = [int(c) for c in args.cores.split(",")] if args.cores else None
    with contextlib.suppress(KeyboardInterrupt):
        _run(args.kind, min(max(args.duty, 0.01), 1.0), cores, args.gpu)


if __name__ == "__main__":
    main()
