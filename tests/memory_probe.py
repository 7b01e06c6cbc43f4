"""Run in a child process by tests/costmodel/test_memory_liveness.py: the predicted peak live set of one
microbatch (pipeplan.costmodel.memory) against the RSS high-water mark of running the exported program.

The child sets ``MALLOC_MMAP_THRESHOLD_`` (in its environment, before start) so that glibc serves
every tensor from mmap and returns it on free: RSS then follows the live tensors.  Prints one line
per model: ``name predicted measured`` in bytes.
"""

from __future__ import annotations

import gc
import statistics
import sys
import threading

import torch

from pipeplan.costmodel.capture import capture_program
from pipeplan.costmodel.memory import stage_memory
from pipeplan.costmodel.zoo import build_model
from pipeplan.costmodel.zoo.llm import LLM_MODELS, build_llm


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


# Measured passes per model, after two warm-up passes; the median rise counts.  The passes run in a
# thread of their own: glibc gives it a fresh malloc arena.  On the main thread, free chunks that
# capture (torch.export) leaves in the heap served some tensors despite the mmap threshold (glibc only
# weighs mmap when no free chunk fits), so their pages were resident already: bert-base (2×128,
# predicted 7.11 MB) rose 6.19–6.27 MB in some processes and 6.95–7.07 in others, and failed CI at
# 6.23.  In its own arena it rose 6.92–7.11 MB in 16 processes out of 16.
PASSES = 3


def probe(name: str, batch: int, seq_len: int | None) -> tuple[int, int]:
    if name in LLM_MODELS:  # one block of the real architecture, uninitialised memory (no init cost)
        model, args = build_llm(name, batch, seq_len, num_layers=1)
        model.to_empty(device="cpu")
        args = tuple(torch.zeros(a.shape, dtype=a.dtype) for a in args)
    else:
        built = build_model(name, batch, seq_len=seq_len)
        model, args = built.model, built.args
    captured = capture_program(model, args, name=name)
    graph = captured.graph
    predicted = stage_memory(graph, [layer.name for layer in graph.layers]).peak_live
    run = captured.program.module()  # what an executor stage runs: FX code frees each value after its last use
    del model
    measured: list[int] = []

    def passes() -> None:
        with torch.no_grad():
            run(*args)
            run(*args)
            for _ in range(PASSES):
                gc.collect()
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # reset VmHWM to the current RSS
                base = _status("VmRSS:")
                out = run(*args)
                measured.append(_status("VmHWM:") - base)
                del out

    thread = threading.Thread(target=passes)  # a fresh malloc arena, see PASSES
    thread.start()
    thread.join()
    if len(measured) != PASSES:
        raise RuntimeError(f"{name}: the measured passes failed (see the thread's traceback above)")
    return predicted, statistics.median_low(measured)


def measure_in_child(specs: list[str], timeout: float = 900) -> list[tuple[str, int, int]]:
    """``(name, predicted, measured)`` bytes for each ``name:batch:seq`` of ``specs``, probed in a child
    process with glibc returning every tensor on free (what the tests compare)."""
    import os
    import subprocess
    from pathlib import Path

    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}  # glibc: tensors from mmap, freed at once
    done = subprocess.run([sys.executable, "-m", "tests.memory_probe", *specs], cwd=Path(__file__).parents[1],
                          env=env, capture_output=True, text=True, check=True, timeout=timeout)
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    return [(name, int(predicted), int(measured)) for name, predicted, measured in rows]


if __name__ == "__main__":
    torch.set_num_threads(1)
    for spec in sys.argv[1:]:
        name, batch, seq = spec.split(":")
        predicted, measured = probe(name, int(batch), int(seq) or None)
        print(name, predicted, measured, flush=True)
