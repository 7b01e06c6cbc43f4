"""``pipeplan costmodel probe`` and ``pipeplan costmodel wake``: this machine measured in a minute or a few.

The probe scales a shipped model to a CPU no model was profiled on (:mod:`pipeplan.costmodel.probe`); the wake
probe measures how a stage that waited for its input runs (:mod:`pipeplan.costmodel.wake_probe`). Both are
registered by :mod:`pipeplan.costmodel.cli`; heavy imports happen inside the commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["cmd_probe", "cmd_wake"]


def cmd_probe(args: argparse.Namespace) -> None:
    import time

    from rich.console import Console
    from rich.table import Table

    from pipeplan.costmodel.hardware import same_cpu
    from pipeplan.costmodel.probe import default_path, run_probe
    from pipeplan.costmodel.registry import SHIPPED, SHIPPED_NAMES, load_cost_model
    from pipeplan.costmodel.steadiness import warn_if_unsteady

    console = Console()
    names = args.base.split(",") if args.base else list(SHIPPED_NAMES)
    bases = [load_cost_model(n) for n in names]
    warn_if_unsteady(args.cores[0], console.print)  # a probe's factors taken in a slow spell scale every plan
    started = time.monotonic()
    with console.status("probing") as status:
        probe = run_probe(bases, args.cores, args.seconds, args.models.split(","),
                          progress=lambda c: status.update(f"probing: timing {c} in real passes"))
    path = probe.save(Path(args.out) if args.out else default_path())
    table = Table(title=f"{probe.cpu}: measured ÷ predicted inside real passes, per layer kind (Σ ÷ Σ)")
    table.add_column("kind")
    for n in names:
        table.add_column(n + (" (chosen)" if n == probe.base else ""), justify="right")
    for kind in sorted({p.kind for p in probe.points}):
        table.add_row(kind, *(f"{probe.factors[n].get(kind, float('nan')):.2f}" for n in names))
    table.add_row("spread (log10 RMS)", *(f"{probe.spread[n]:.3f}" for n in names))
    console.print(table)
    own = next((s for s in SHIPPED if same_cpu(s.cpu)), None)  # a CPU with a model of its own keeps it
    uses = (f"`learned` on this CPU stays learned-{own.name}, profiled on it; `--costmodel probed` uses the probe"
            if own is not None else f"`learned` on this CPU now predicts with probed:{probe.base}")
    console.print(f"{len(probe.points)} layers timed on core(s) {probe.cores} in {time.monotonic() - started:.0f} s; "
                  f"written to {path}. {uses}.")


def cmd_wake(args: argparse.Namespace) -> None:
    import os
    import time

    from rich.console import Console
    from rich.table import Table

    from pipeplan.costmodel.hardware import Contention
    from pipeplan.costmodel.wake import default_path
    from pipeplan.costmodel.wake_probe import run_wake_probe

    levels = [Contention.parse(text) for text in args.levels.split(",") if text.strip()]
    console = Console()
    started = time.monotonic()
    usable = sorted(os.sched_getaffinity(0))
    pipeline = None if args.no_pipeline or len(usable) < 2 else [args.core, next(c for c in usable if c != args.core)]
    with console.status("measuring") as status:
        model = run_wake_probe(levels, args.core, args.repeats, progress=lambda m: status.update(f"measuring: {m}"),
                               pipeline_cores=pipeline)
    path = model.save(Path(args.out) if args.out else default_path())
    table = Table(title=f"{model.cpu}: after sleeping S, work w takes w + a + b·w on an idle core; under a "
                  "shared core it runs its first x at full speed")
    for col in ("sleep ms", "a ms", "b", *(f"x ms, {level}" for level in model.credit)):
        table.add_column(col, justify="right")
    for i, (sleep, a, b) in enumerate(zip(model.sleeps, model.penalty_fixed, model.penalty_rate, strict=True)):
        table.add_row(f"{sleep * 1e3:g}", f"{a * 1e3:.3f}", f"{b:.3f}",
                      *(f"{credits[i] * 1e3:.2f}" for credits in model.credit.values()))
    console.print(table)
    fit = ", ".join(f"{name} {err:.0%}" for name, err in model.fit_error.items())
    delays = ", ".join(f"{level} +{delay * 1e3:.2f} ms" for level, delay in model.recv_delay.items())
    shares = ", ".join(f"{level} {share:.0%}" for level, share in model.pipeline_credit.items())
    extra = (f"a pipeline stage's microbatch takes {model.stage_fixed * 1e3:.3f} ms + {model.stage_rate:.1%} beyond "
             f"its module's back-to-back time, its input arrives later on a loaded core ({delays}), and there it "
             f"earns this share of the credit x ({shares}; cores {pipeline[0]} and {pipeline[1]}); " if pipeline
             else f"the pipeline part was skipped ({'--no-pipeline' if args.no_pipeline else 'it needs two cores'}"
             "): stages in a pipeline will earn the whole credit and pay nothing beyond their modules' times; ")
    console.print(f"{extra}fit error (log RMS) {fit}; measured on core {args.core} in "
                  f"{time.monotonic() - started:.0f} s; written to {path}. `pipeplan run` now prices each stage's "
                  "waits with it.")
