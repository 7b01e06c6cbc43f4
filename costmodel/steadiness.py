"""Whether this core runs at a steady speed now: what a load average cannot tell on a shared VM.

A 2-core VM shares its host with other tenants the guest cannot see: on 2026-11-29 a model-207 Xeon VM
with a load average of 0.5 and no steal time ran a 512×512 matmul at 43 to 151 GFLOP/s from one 40 ms
sample to the next, and the same eager forward at 1.24× to 2.2× its usual time within ten minutes. A
profile taken then, a probe's factors, or a judging run's errors describe the spell, not the machine;
printing the load average beside them says nothing of it.

So this times a fixed amount of work many times over a few seconds on one pinned core — a matmul (compute)
and a copy larger than a core's L2 (memory) in each sample — and reports the **swing**: the 90th percentile
of the sample times over the 10th. ``STEADY`` is the swing above which pipeplan warns before profiling,
probing or judging; it was set on that unsteady VM (1.2–1.6× in ten checks, 1.18× once). A Zen 5 VM that ran
whole models at their usual speed all along (2026-11-30) swung 1.07–1.19× in compute but 1.16–1.59× in memory,
so on that CPU the warning can speak of memory alone while models hold their speed.

    python -m pipeplan.costmodel.steadiness [--seconds 3] [--core 0]

>>> swing([1.0] * 20)
1.0
>>> swing([1.0] * 18 + [5.0, 5.0])  # two slow samples in twenty stretch the 90th percentile
1.4
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["STEADY", "Steadiness", "measure_steadiness", "swing", "warn_if_unsteady"]

# Room for a timer tick or a page fault while catching the 1.3–3.5× swings a busy host caused; one quiet VM's
# memory swing (a Zen 5's, up to 1.59×) passes it, so it is not a verdict on memory alone.
STEADY = 1.2
_MATMUL_N = 384  # 113 MFLOP: about a millisecond on one core of these VMs
_COPY_BYTES = 32 * 2**20  # larger than an L2, so the copy reads and writes memory


def swing(times: Sequence[float]) -> float:
    """The 90th percentile of ``times`` over their 10th (1.0 when they repeat exactly)."""
    if len(times) < 10:
        raise ValueError(f"a swing needs at least 10 samples, got {len(times)}")
    deciles = statistics.quantiles(times, n=10, method="inclusive")
    return deciles[-1] / deciles[0]


@dataclass(frozen=True)
class Steadiness:
    """Sample times of a fixed matmul and a fixed copy on one core, taken in turn."""

    core: int
    matmul_s: tuple[float, ...]
    copy_s: tuple[float, ...]
    matmul_flops: float  # FLOPs of one matmul sample
    copy_bytes: float  # bytes read and written by one copy sample

    @property
    def compute_swing(self) -> float:
        return swing(self.matmul_s)

    @property
    def memory_swing(self) -> float:
        return swing(self.copy_s)

    @property
    def steady(self) -> bool:
        return max(self.compute_swing, self.memory_swing) <= STEADY

    def describe(self) -> str:
        """One line for a log or a table's header: the median speeds and both swings."""
        flops = self.matmul_flops / statistics.median(self.matmul_s) / 1e9
        bandwidth = self.copy_bytes / statistics.median(self.copy_s) / 1e9
        verdict = "steady" if self.steady else f"UNSTEADY (above {STEADY:g}×)"
        return (f"core {self.core} {verdict}: swing {self.compute_swing:.2f}× compute, {self.memory_swing:.2f}× "
                f"memory (90th ÷ 10th percentile of {len(self.matmul_s)} samples; median {flops:.0f} GFLOP/s, "
                f"{bandwidth:.1f} GB/s)")


def measure_steadiness(seconds: float = 3.0, core: int = 0) -> Steadiness:
    """Time a matmul and a copy in turn on ``core`` (one thread) for about ``seconds``."""
    import torch

    from pipeplan.costmodel.profile import pinned

    a = torch.randn(_MATMUL_N, _MATMUL_N)
    src = torch.ones(_COPY_BYTES // 4)
    dst = torch.empty_like(src)
    matmul: list[float] = []
    copy: list[float] = []

    def timed(run: Callable[[], object], into: list[float]) -> None:
        begin = time.perf_counter()
        run()
        into.append(time.perf_counter() - begin)

    with pinned([core], 1):
        for _ in range(3):  # warm: first touches of the pages, the matmul's packing buffers
            torch.mm(a, a)
            dst.copy_(src)
        ends = time.perf_counter() + seconds
        while len(matmul) < 20 or time.perf_counter() < ends:
            timed(lambda: torch.mm(a, a), matmul)
            timed(lambda: dst.copy_(src), copy)
    return Steadiness(core, tuple(matmul), tuple(copy), 2 * _MATMUL_N**3, 2 * _COPY_BYTES)


def warn_if_unsteady(core: int, say: Callable[[str], None], seconds: float = 1.0) -> Steadiness:
    """Measure ``core``'s steadiness, say it, and say why an unsteady core's times should not be trusted."""
    found = measure_steadiness(seconds, core)
    say(found.describe())
    if not found.steady:
        say("warning: this core's speed swings though nothing of yours may be running (another tenant of the "
            "host); times measured now describe this spell, not the machine: measure again when it is steady")
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="how long to sample (3)")
    parser.add_argument("--core", type=int, default=0, help="the core to pin to (0)")
    args = parser.parse_args(argv)
    print(measure_steadiness(args.seconds, args.core).describe())


if __name__ == "__main__":
    main()
