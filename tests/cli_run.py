"""Run the pipeplan command line as a user would, and read back its output and exit status.

``run`` calls :func:`pipeplan.cli.main` inside the test process: the same argument parsing, commands,
error handling and printed text as ``python -m pipeplan``, without paying 3–4 s per call to start
Python and import torch again.  What a command may change in the process is put back afterwards (the
working directory, the environment, CPU affinity, torch's threads and RNG, logging, signal handlers,
warnings), and its output is captured as a subprocess's would be.  ``run_process`` starts the real
``python -m pipeplan`` entry point; a few tests keep it so that the entry point itself stays tested.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import signal
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy
import torch


@dataclass
class Result:
    """What ``subprocess.run(..., capture_output=True, text=True)`` returns, for an in-process run."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_process(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m pipeplan ARGS`` in a process of its own."""
    return subprocess.run([sys.executable, "-m", "pipeplan", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def _exit_status(exc: SystemExit, stderr: io.StringIO) -> int:
    """The status the interpreter would exit with for ``sys.exit(code)``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=stderr)
    return 1


def _signals() -> dict[signal.Signals, Any]:
    saved: dict[signal.Signals, Any] = {}
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(ValueError, OSError):
            saved[sig] = signal.getsignal(sig)
    return saved


def _print_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                   file: object = None, line: str | None = None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextlib.contextmanager
def _process_state(cwd: Path | None) -> Iterator[None]:
    """Save what a command may change in the process; put it back after."""
    old_cwd = os.getcwd()
    old_env = dict(os.environ)
    old_cores = os.sched_getaffinity(0)
    old_threads = torch.get_num_threads()
    old_torch_rng = torch.get_rng_state()
    old_random = random.getstate()
    old_argv = sys.argv[:]
    old_signals = _signals()
    root = logging.getLogger()
    old_handlers, old_level = root.handlers[:], root.level
    old_disable = logging.root.manager.disable
    old_numpy = numpy.random.get_state()
    # A fresh process has no logging handlers: the command's logging.basicConfig then writes to its
    # stderr, as it would as a process, instead of pytest's log capture taking the records.
    for handler in old_handlers:
        root.removeHandler(handler)
    try:
        with warnings.catch_warnings():
            # A fresh interpreter's filters, not pytest's: warnings print on the command's stderr.
            warnings.resetwarnings()
            warnings.simplefilter("default")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            warnings.showwarning = _print_warning  # not into pytest's record of the test's warnings
            if cwd is not None:
                os.chdir(cwd)
            yield
    finally:
        os.chdir(old_cwd)
        for key in set(os.environ) - set(old_env):
            del os.environ[key]
        for key, value in old_env.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        if os.sched_getaffinity(0) != old_cores:
            os.sched_setaffinity(0, old_cores)
        if torch.get_num_threads() != old_threads:
            torch.set_num_threads(old_threads)
        torch.set_rng_state(old_torch_rng)
        random.setstate(old_random)
        numpy.random.set_state(old_numpy)
        sys.argv[:] = old_argv
        for sig, handler in old_signals.items():
            if signal.getsignal(sig) is not handler:
                with contextlib.suppress(ValueError, OSError, TypeError):
                    signal.signal(sig, handler)
        for handler in root.handlers[:]:
            root.removeHandler(handler)
            if handler not in old_handlers:
                handler.close()
        for handler in old_handlers:
            root.addHandler(handler)
        root.setLevel(old_level)
        logging.disable(old_disable)


def run(*args: str, cwd: Path | None = None) -> Result:
    """``pipeplan ARGS`` run in this process: its exit status and what it printed.

    An exception the command does not handle is a traceback on stderr and status 1, as in a process.
    """
    from pipeplan.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with _process_state(cwd), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        sys.argv[:] = ["pipeplan", *args]
        try:
            returncode = main(list(args))
        except SystemExit as exc:
            returncode = _exit_status(exc, stderr)
        except Exception:  # what the interpreter does with it: a traceback, status 1
            traceback.print_exc(file=stderr)
            returncode = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
    return Result(["pipeplan", *args], returncode, stdout.getvalue(), stderr.getvalue())
