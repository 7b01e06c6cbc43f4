"""Start one process per stage and watch them: the first failure ends the run, naming its stage.

:func:`spawn` starts the stages as local processes (``spawn`` start method, rendezvous over TCP on
a free loopback port) and waits for each one's message, or its exit.  When a stage fails, the
others are stopped and :class:`~pipeplan.executor.errors.StageFailure` names the stage to blame: a stage
whose own forward raised is preferred over its neighbours, which only see the connection drop.
Nothing can hang: every collective has the run's ``timeout``, the whole run ``run_timeout``, and a
stage process dies with its launcher.

:func:`torchrun_env` reads the rank and world size that ``torchrun`` sets, for runs it launched.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing as mp
import os
import pickle
import signal
import socket
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from pipeplan.executor.errors import RunError, StageFailure
from pipeplan.executor.options import RunSetup

__all__ = ["exit_reason", "failure_of", "free_port", "process_context", "spawn", "stage_main", "torchrun_env"]

log = logging.getLogger(__name__)

_GRACE = 2.0  # seconds to wait, after a first failure, for the stage that caused it to report


def free_port() -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun_env() -> tuple[int, int] | None:
    """``(rank, world_size)`` when this process was started by ``torchrun``, else None."""
    if "TORCHELASTIC_RUN_ID" not in os.environ and "MASTER_ADDR" not in os.environ:
        return None
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except KeyError:
        return None


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its launcher dies, so that no stage outlives a crash."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def stage_main(rank: int, setup: RunSetup, built: bytes, modules: list[str], init_method: str,
                conn: Connection, body: Callable[..., Any] | None = None, extra: tuple[Any, ...] = ()) -> None:
    """Body of a spawned stage process: run the stage, send ("ok", result) or ("error", failure).

    ``body`` replaces :func:`pipeplan.executor.worker.run_stage` (same first five arguments, then ``extra``)."""
    _die_with_parent()
    from pipeplan.executor.source import import_registrations
    from pipeplan.executor.worker import Phases, describe_failure, run_stage

    phases = Phases()
    try:
        # The stage module may call custom operators that the model's package or factory registers
        # when imported: import them before unpickling the module, which looks those operators up.
        phases.enter("importing the modules that register the model's operators")
        import_registrations(modules, setup.plan.get("source"))
        phases.enter("unpickling the stage")
        result = (body or run_stage)(rank, setup, init_method, phases, pickle.loads(built), *extra)
        conn.send(("ok", result))
    except BaseException as exc:  # report anything, KeyboardInterrupt included, then exit non-zero
        with contextlib.suppress(Exception):
            conn.send(("error", describe_failure(exc, phases.current)))
        conn.close()
        os._exit(1)
    conn.close()


def _pickled(build: Any, rebuildable: bool) -> bytes:
    """``build`` pickled; an unsplit model that cannot be pickled (a class defined in a function,
    a lambda attribute, a parametrized module such as ``weight_norm``'s, which torch refuses with a
    RuntimeError) is left for the last stage to rebuild from the plan's source."""
    try:
        return pickle.dumps(build)
    except (pickle.PicklingError, TypeError, AttributeError, RuntimeError) as exc:
        if build.model is None:
            raise RunError(f"a stage module cannot be sent to its process: {exc}") from exc
        if not rebuildable:
            raise RunError(f"the model cannot be pickled to the last stage for the output check ({exc}); define "
                           "its classes at module level, give the plan a factory ('module:function'), or run "
                           "with --no-check") from exc
        log.info("the model cannot be pickled (%s); the last stage rebuilds it from the plan's source", exc)
        build.model = None
        return pickle.dumps(build)


def process_context() -> Any:
    """Stage processes fork from a server that has imported torch once, instead of each importing it.

    The server is single-threaded (it has run nothing), so forking it is safe, and a fresh one is
    not needed for every run: a test session or a benchmark pays the imports once.
    """
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["pipeplan.executor.worker"])
    return ctx


def exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code} without reporting"


def spawn(setup: RunSetup, builds: list[Any], modules: Sequence[str] = (), rebuildable: bool = True,
          *, body: Callable[..., Any] | None = None, extra: Sequence[tuple[Any, ...]] | None = None
          ) -> list[dict[str, Any]]:
    """Run every rank of ``setup`` in its own local process (the stages, then the lenders that run no
    stage: :mod:`pipeplan.executor.lending`); return rank 0's gathered results.

    ``builds[k]`` (an :class:`pipeplan.executor.stage_build.StageBuild`) is pickled to stage k's process, so no
    process has to rebuild or export the model again; ``modules`` are imported there first (they
    register the custom operators the stages call).  ``rebuildable`` says whether the plan's source
    can rebuild the model, for a model that cannot be pickled.

    ``body`` (a module-level function) runs in each process instead of
    :func:`pipeplan.executor.worker.run_stage`, with ``extra[rank]`` appended to its arguments (a deployment
    passes the pipes of its requests and answers).  Connections in ``extra`` are closed here once
    their process holds them, so that either end sees the other's death as EOF or a broken pipe.
    """
    ctx = process_context()
    init_method = f"tcp://127.0.0.1:{free_port()}"
    procs: list[Any] = []
    conns: dict[Connection, int] = {}
    try:
        for rank in range(setup.world_size):
            recv_end, send_end = ctx.Pipe(duplex=False)
            built = _pickled(builds[rank], rebuildable)
            more = tuple(extra[rank]) if extra is not None else ()
            proc = ctx.Process(target=stage_main, args=(rank, setup, built, list(modules), init_method, send_end,
                                                         body, more),
                               name=f"pipeplan-stage-{rank}")
            proc.start()
            send_end.close()
            for obj in more:
                if isinstance(obj, Connection):
                    obj.close()
            procs.append(proc)
            conns[recv_end] = rank
        return _supervise(setup, procs, conns)
    finally:
        _stop(procs)
        for conn in conns:
            conn.close()


def failure_of(setup: RunSetup, rank: int, message: str, details: str) -> StageFailure:
    """The failure of ``rank``: a stage's, or a lender's with a process of its own."""
    from pipeplan.executor.lender import LenderFailure

    if rank < len(setup.stages):
        return StageFailure(rank, setup.stages[rank].device, message, details)
    name = setup.loans.rank_name(rank) if setup.loans is not None else None
    return LenderFailure(rank, name or f"rank {rank}", message, details)


def _who(setup: RunSetup, rank: int) -> str:
    if rank < len(setup.stages):
        return f"stage {rank} on {setup.stages[rank].device}"
    return f"lender {setup.loans.rank_name(rank) if setup.loans is not None else rank}"


def _supervise(setup: RunSetup, procs: list[Any], conns: dict[Connection, int]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + setup.options.run_timeout
    sentinels = {proc.sentinel: rank for rank, proc in enumerate(procs)}
    pipes = {rank: conn for conn, rank in conns.items()}
    finished: dict[int, tuple[str, Any]] = {}
    first_failure: float | None = None

    def collect(rank: int) -> None:
        """Read stage ``rank``'s message, or record how its process ended without one."""
        conn = pipes.pop(rank, None)
        message: tuple[str, Any] | None = None
        if conn is not None:
            with contextlib.suppress(EOFError, OSError):
                if conn.poll(0.5):
                    message = conn.recv()
            conn.close()
        if message is None:
            procs[rank].join(timeout=1)
            failure = {"message": f"the process {exit_reason(procs[rank].exitcode)}", "origin": "exit",
                       "details": ""}
            message = ("error", failure)
        finished[rank] = message

    while len(finished) < len(procs):
        now = time.monotonic()
        failures = [r for r, (kind, _) in finished.items() if kind == "error"]
        if failures:
            first_failure = first_failure or now
            if now - first_failure > _GRACE or any(finished[r][1]["origin"] == "forward" for r in failures):
                break
        if now > deadline:
            running = [r for r in range(len(procs)) if r not in finished]
            raise RunError(f"the run took longer than run_timeout={setup.options.run_timeout:g}s; stages "
                           f"{running} had not finished")
        waiting = [pipes[r] for r in pipes] + [s for s, r in sentinels.items() if r not in finished]
        for obj in wait(waiting, timeout=max(0.0, min(deadline - now, _GRACE))):
            rank = conns[obj] if obj in conns else sentinels[obj]
            if rank not in finished:
                collect(rank)
    failures = [r for r, (kind, _) in finished.items() if kind == "error"]
    if failures:
        # A stage whose forward raised, else one that died without a word (its neighbours report only
        # the dropped connection, and may do so first), else the first to fail.
        blamed = next((r for origin in ("forward", "exit") for r in failures if finished[r][1]["origin"] == origin),
                      failures[0])
        failure = finished[blamed][1]
        log.debug("stage %d traceback:\n%s", blamed, failure["details"])
        message = failure["message"]
        silent = [_who(setup, r) for r in range(len(procs)) if r not in finished]
        if silent and failure["origin"] != "forward":  # a stage that hangs shows as its neighbours' timeouts
            message += f"; still running without a word: {', '.join(silent)}"
        raise failure_of(setup, blamed, message, failure["details"])
    result = finished[0][1]
    if not isinstance(result, list):
        raise RunError("stage 0 finished without the stages' measurements")
    return result


def _stop(procs: list[Any]) -> None:
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join()
        proc.close()  # its sentinel is a file descriptor: a long session runs many plans
