"""``pipeplan profile`` and ``pipeplan costmodel train|report|predict`` (registered by :mod:`pipeplan.cli`).

Heavy imports happen inside the command functions so that ``pipeplan --help`` answers at once.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeplan.costmodel.machine_cli import cmd_probe, cmd_wake
from pipeplan.errors import UsageError, user_input

__all__ = ["USER_ERRORS", "register", "select_layers"]

DEFAULT_MODELS = ("gpt2", "bert-base", "vit-base", "resnet-50", "convnext-tiny")
DEFAULT_LAYERS = "sweep," + ",".join(f"model:{m}" for m in DEFAULT_MODELS)


def _user_errors() -> tuple[type[Exception], ...]:
    from pipeplan.costmodel.corunners import CoRunnerError

    return (CoRunnerError,)


# Failures the CLI prints as one line, exit status 2, besides the UserErrors (ModelFileError, and the
# plain ValueErrors of reading a dataset or an option, which these commands turn into UsageErrors).
USER_ERRORS: tuple[type[Exception], ...] = _user_errors()


def select_layers(layers: str, per_kind: int, gpu: bool, channels_last: bool = False) -> tuple[list[Any], list[str]]:
    """The layer specs and zoo model names ``--layers`` asks for, nothing built yet. The sweep (and a
    bare layer type) takes GPU-sized shapes (:func:`pipeplan.costmodel.gpu_sweep.gpu_sweep`) when ``gpu``,
    the CPU sweep's (:func:`pipeplan.costmodel.layerspecs.default_sweep`) otherwise. ``channels_last``
    adds, after each shape whose input is a 4-D map, the same shape laid out channels-last (``cl=1``):
    pairs that differ in layout alone. (A kind's seeded shapes depend on the kinds drawn before it in one
    call, so twins of another command's shapes are best given by key.)

    >>> specs, models = select_layers("linear,model:gpt2", 2, gpu=True)
    >>> [s.kind for s in specs], models
    (['linear', 'linear'], ['gpt2'])
    """
    from pipeplan.costmodel.gpu_sweep import gpu_sweep
    from pipeplan.costmodel.layerspecs import CHANNELS_LAST_KINDS, KINDS, channels_last_twin, default_sweep, parse_spec

    # Items are comma-separated and so are a shape's parameters: "k=v" pieces belong to the item before.
    items: list[str] = []
    for piece in (x.strip() for x in layers.split(",") if x.strip()):
        if "=" in piece and ":" not in piece and items:
            items[-1] += "," + piece
        else:
            items.append(piece)
    specs, models, kinds = [], [], []
    for item in items:
        if item == "sweep":
            kinds += list(KINDS)
        elif item.startswith("model:"):
            models.append(item.removeprefix("model:"))
        elif ":" in item:
            with user_input(f"--layers {item!r}"):
                specs.append(parse_spec(item))
        elif item in KINDS:
            kinds.append(item)
        else:
            raise UsageError(f"--layers {item!r}: give 'sweep', a layer type ({', '.join(KINDS)}), "
                             "model:NAME or a shape such as linear:m=64,k=768,n=768")
    if kinds:
        specs += (gpu_sweep if gpu else default_sweep)(per_kind, kinds)
    if channels_last:
        twins = [(spec, channels_last_twin(spec)) for spec in specs]
        if models or not any(twin for _, twin in twins):
            raise UsageError("--channels-last times 4-D maps of the sweep's kinds "
                             f"({', '.join(CHANNELS_LAST_KINDS)}), not zoo models: --layers {layers!r} "
                             + ("names a model" if models else "has none"))
        specs = [s for spec, twin in twins for s in (spec, twin) if s is not None]
    return specs, models


def _targets(layers: str, per_kind: int, gpu: int | None, dtype: str = "fp32",
             channels_last: bool = False) -> list[Any]:
    from pipeplan.costmodel.profile import targets_from_models, targets_from_specs

    specs, models = select_layers(layers, per_kind, gpu is not None, channels_last)
    return targets_from_specs(specs, gpu, dtype) + targets_from_models(models, gpu, dtype)


def cmd_profile(args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pipeplan.costmodel.dataset_files import check_appendable, read_dataset, replace_rows
    from pipeplan.costmodel.hardware import Contention
    from pipeplan.costmodel.profile import ProfileSettings, check_dtype, measure_device, profile
    from pipeplan.costmodel.speed_drift import SpeedCheck, drift_verdict
    from pipeplan.costmodel.steadiness import warn_if_unsteady

    console = Console(stderr=True, soft_wrap=True)  # paths are not folded: they are copied from here
    out = Path(args.out)
    dtype = getattr(args, "dtype", None) or "fp32"  # the option is shared with `profile MODEL` (pipeplan.cli_args)
    if args.append and args.replace:
        raise UsageError("--append keeps a layer's earlier rows and --replace drops them: pass one of them")
    if out.exists() and not (args.append or args.replace):
        raise UsageError(f"{out} exists: pass --append to add rows to it, --replace to time its layers again, or "
                         "choose another --out")
    with user_input(f"--out {out}"):
        check_appendable(out, dtype, events=args.gpu is not None, channels_last=args.channels_last)
    with user_input("profile options"):
        settings = ProfileSettings(
            levels=[Contention.parse(x) for x in args.levels.split(",")], cores=args.cores, threads=args.threads,
            repeats=args.repeats, window=args.window_ms / 1000.0, loaded_window=args.loaded_window_ms / 1000.0,
            gpu=args.gpu, dtype=dtype,
            budget=args.budget_minutes * 60.0 if args.budget_minutes else None,
            device_type=args.device_type, drift_tolerance=args.drift_tolerance or None,
            stop_on_drift=args.stop_on_drift)
        check_dtype(dtype, args.gpu)
    console.print("building and capturing the layers to profile"
                  + (" (GPU-sized sweep shapes)" if args.gpu is not None else "") + f" in {dtype} …")
    targets = _targets(args.layers, args.per_kind, args.gpu, dtype, args.channels_last)
    device = measure_device(settings)
    if args.gpu is None:  # a GPU's clocks are its own; a CPU core shares its host with unseen tenants
        warn_if_unsteady(settings.cores[0], console.print)
    console.print(f"device {device.type}: {device.peak_flops / 1e9:.1f} GFLOP/s (fp32 matmul), "
                  f"{device.mem_bandwidth / 1e9:.1f} GB/s (copy), measured idle on cores "
                  f"{list(settings.cores)} with {settings.threads} thread(s)")
    console.print(f"{len(targets)} layers × {len(settings.levels)} contention levels "
                  f"({', '.join(c.describe() for c in settings.levels)})"
                  + (f", budget {args.budget_minutes:g} min" if args.budget_minutes else ""))
    # --replace measures into a file beside OUT and swaps the rows in only once every level is done, so an
    # interrupted run leaves OUT as it was (and what it had measured, in that file)
    staged = out
    if args.replace and out.exists():
        staged = out.with_name(f"{out.stem}.measuring{out.suffix}")
        staged.unlink(missing_ok=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("profiling", total=len(targets) * len(settings.levels))

        def step(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, description=what[:60].ljust(60))

        checks: list[SpeedCheck] = []

        def checked(check: SpeedCheck) -> None:
            checks.append(check)
            bar.console.print(check.describe())

        rows = profile(targets, staged, settings, device, progress=step, checked=checked)
    if checks and settings.drift_tolerance is not None:
        console.print(drift_verdict(checks, settings.drift_tolerance))
    if staged == out:
        console.print(f"{rows} measurements written to {out}")
        return
    with user_input(f"--out {out}"):  # read as every dataset is: typed, checked, optional columns filled
        dropped, written = replace_rows(out, read_dataset(staged))
    staged.unlink()
    console.print(f"{written} measurements written to {out}, in place of {dropped} earlier ones of the same layers")


def cmd_train(args: argparse.Namespace) -> None:
    from rich.console import Console

    from pipeplan.costmodel.dataset_files import read_dataset, single_dtype
    from pipeplan.costmodel.learned import LearnedCostModel

    console = Console()
    kept = None
    if args.sweep_from:  # before reading the datasets: the file and the option are checked at once
        if not args.in_model:
            raise UsageError("--sweep-from keeps a model's sweep and fits its in-model correction: give --in-model")
        kept = LearnedCostModel.load(args.sweep_from)
    with user_input(""):  # its messages name the file and the line
        rows = read_dataset(args.data)
        in_model_rows = read_dataset(args.in_model) if args.in_model else []
        single_dtype(rows)  # the learned model has no dtype feature: one dtype per model
    if kept is not None:
        console.print(f"keeping {args.sweep_from}'s sweep, fitted on these {len(rows)} measurements; fitting its "
                      f"in-model correction on {len(in_model_rows)} in-model rows (seconds)")
    else:
        first = "" if args.no_eval else "holding out a quarter of the shapes to evaluate first; "
        console.print(f"training on {len(rows)} measurements of {len({r['config'] for r in rows})} layer "
                      f"configurations ({first}a few minutes for the shipped profiles)")
    with console.status("fitting …") as status:
        if kept is not None:
            model = kept
            model.refit_in_model(rows, in_model_rows, evaluate=not args.no_eval,
                                 progress=lambda phase: status.update(phase + " …"))
        else:
            model = LearnedCostModel.train(rows, seed=args.seed, evaluate=not args.no_eval,
                                           progress=lambda phase: status.update(phase + " …"),
                                           in_model_rows=in_model_rows)
    model.save(args.out)
    evaluation = model.meta.get("evaluation")
    if evaluation:
        for name in ("main", "linear"):
            o = evaluation[name]["overall"]
            lo, hi = o["mape_interval"]  # a bootstrap over a handful of configurations is too narrow
            interval = "" if evaluation.get("cannot_judge") else f" (90% interval {lo:.1f}–{hi:.1f}%)"
            console.print(f"{name:>6}: held-out MAPE {o['mape']:.1f}%{interval}, "
                          f"{o['within10']:.0f}% within ±10% ({o['n']} rows, {evaluation['test_configs']} "
                          "configurations)")
        if evaluation.get("cannot_judge"):
            console.print(f"[bold yellow]warning:[/] {evaluation['cannot_judge']}", highlight=False)
    _print_coverage(console, model.meta["coverage"])
    cv = model.meta.get("in_model", {})
    if "corrected" in cv:
        for name in ("sweep", "corrected"):
            f = cv[name]
            console.print(f"whole models, each architecture family held out ({cv['models']} models of "
                          f"{len(cv['families'])} families), {name}: median |error| {f['median_abs']:.0%}, "
                          f"worst {f['worst']:+.0%}, {f['within_25']:.0%} within ±25%")
    console.print(f"model written to {args.out}")


def _print_coverage(console: Any, cover: dict[str, Any]) -> None:
    """Rows, configurations and held-out configurations per layer kind, and the gaps."""
    from rich.table import Table

    table = Table(title="coverage by layer kind", title_justify="left")
    for column in ("kind", "rows", "configurations", "held out"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    for kind, c in cover["by_kind"].items():
        table.add_row(kind, str(c["rows"]), str(c["configs"]), str(c["held_out_configs"]))
    console.print(table)
    if cover["without_held_out"]:
        console.print(f"[yellow]no held-out rows[/] for {', '.join(cover['without_held_out'])}: "
                      "their error is unknown", highlight=False)
    if cover["missing"]:
        console.print(f"[yellow]no rows at all[/] for {', '.join(cover['missing'])}: the model extrapolates "
                      "for every such layer", highlight=False)


def cmd_report(args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.markdown import Markdown

    from pipeplan.costmodel.learned import LearnedCostModel
    from pipeplan.costmodel.registry import resolve_model_path
    from pipeplan.costmodel.report import markdown_report, write_plots

    with user_input(""):  # no such model file
        path = resolve_model_path(args.model)
    model = LearnedCostModel.load(path)
    text = markdown_report(model)
    Console().print(Markdown(text))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(text)
        for path in write_plots(model, out):
            print(f"wrote {path}")
        print(f"wrote {out / 'report.md'}")


def _first_core() -> int:
    """The lowest core this process may run on (0 unless a taskset or container withholds it)."""
    import os

    return min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0


def register(sub: Any) -> None:
    """Add ``profile`` and ``costmodel`` to the ``pipeplan`` subparsers ``sub``."""
    from pipeplan.costmodel.probe import PROBE_MODELS
    from pipeplan.costmodel.speed_drift import DRIFT_TOLERANCE

    p = sub.add_parser("profile", help="time layers on this machine under real contention → CSV",
                       description="Time layers on this machine's CPU cores (or a GPU) while real "
                       "co-runner processes contend for them, one row per layer and contention level. "
                       "With --gpu the sweep's shapes are GPU-sized. --dtype fp32|bf16|fp16 runs the layers in "
                       "that dtype (default fp32; bf16 runs on CPUs too, fp16 is refused where this torch cannot "
                       "run it) and every row records it in its dtype column.")
    p.add_argument("--out", metavar="DATA.csv", help="the dataset to write (with MODEL: the profile table)")
    p.add_argument("--append", action="store_true", help="add rows to an existing dataset")
    p.add_argument("--replace", action="store_true",
                   help="time layers of an existing dataset again: their earlier rows are dropped once the new ones "
                   "are all measured (other layers' rows are kept)")
    p.add_argument("--levels", default="idle,1xcompute,2xcompute,1xmemory,2xmemory,1xmixed,50%",
                   metavar="L,L,…", help="contention levels (default: idle and six loads)")
    p.add_argument("--layers", default=DEFAULT_LAYERS, metavar="X,X,…",
                   help="'sweep' (every layer type), layer types (linear, conv2d, …), model:NAME for a "
                   "zoo model's layers, or shapes such as linear:m=64,k=768,n=768 "
                   "(default: the sweep and the layers of gpt2, bert-base, vit-base, resnet-50, convnext-tiny); "
                   "with --gpu the sweep's shapes are GPU-sized (tokens 128–32k, hidden 512–8192, real image "
                   "sizes, batch 1–64)")
    p.add_argument("--per-kind", type=int, default=12, metavar="N", help="shapes per layer type in the sweep (12)")
    p.add_argument("--channels-last", action="store_true",
                   help="also time each shape whose input is a 4-D map (conv2d, batchnorm, pools, resize, "
                   "activation) laid out channels-last (cl=1), as models leave their maps after turning tokens back "
                   "into images: pairs that differ in layout alone")
    p.add_argument("--budget-minutes", type=float, metavar="N", help="stop after about N minutes")
    p.add_argument("--cores", type=lambda s: [int(c) for c in s.split(",")], default=[_first_core()], metavar="C,C",
                   help="CPU cores to run on, co-runners included (default: the first core this process may "
                   "use, 0 on most machines)")
    p.add_argument("--threads", type=int, default=1, metavar="N", help="torch threads (1)")
    p.add_argument("--repeats", type=int, default=5, metavar="R", help="timed windows per layer (5)")
    p.add_argument("--window-ms", type=float, default=25.0, metavar="MS", help="length of an idle window (25 ms)")
    p.add_argument("--loaded-window-ms", type=float, default=80.0, metavar="MS",
                   help="length of a window under contention (80 ms: many scheduler slices)")
    p.add_argument("--gpu", type=int, metavar="I", help="profile CUDA device I instead of the CPU: wall clock per "
                   "call (CUDA-event span in a second column), over GPU-sized sweep shapes "
                   "(pipeplan.costmodel.gpu_sweep) instead of the CPU's")
    p.add_argument("--device-type", default="cpu-core", metavar="T",
                   help="device type the rows describe, as cluster specs name it (cpu-core)")
    p.add_argument("--drift-tolerance", type=float, default=DRIFT_TOLERANCE, metavar="F",
                   help="the device's idle speed is measured before the first level and after each; name the levels "
                   f"at either end of which it was more than this fraction off the run's median ({DRIFT_TOLERANCE:g}; "
                   "0: no checks)")
    p.add_argument("--stop-on-drift", action="store_true",
                   help="stop after a level at whose end the device's speed had moved that far from the start's (rows "
                   "so far are kept: in the dataset, or with --replace beside it, the dataset itself unchanged)")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("costmodel", help="train and explain learned, contention-aware cost models")
    cm = p.add_subparsers(dest="costmodel_command", metavar="ACTION", required=True)
    t = cm.add_parser("train", help="fit the models on a profile dataset and save them",
                      description="Fit gradient-boosted trees (the predictor), a linear baseline and an "
                      "explaining decision tree on DATA; first evaluate them on held-out shapes.")
    t.add_argument("data", metavar="DATA.csv")
    t.add_argument("--out", required=True, metavar="MODEL.zip")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation")
    t.add_argument("--in-model", metavar="IN_MODEL.csv",
                   help="layers timed inside real forward passes (python -m pipeplan.costmodel.tuning_set): adds the "
                   "correction for a layer in a pass, which graph predictions then use")
    t.add_argument("--sweep-from", metavar="MODEL.zip",
                   help="keep MODEL.zip's sweep estimators (and seed), fitted on this DATA, and fit only the in-model "
                   "correction (seconds, not the sweep's minutes); DATA's operator counts and device figures (its "
                   "rows' median) are read again, and operators the sweep never timed are priced at the roofline")
    t.set_defaults(func=cmd_train)
    r = cm.add_parser("report", help="held-out accuracy tables, feature importances and plots",
                      description="Print MODEL's held-out errors (overall, per contention level, per layer "
                      "type) and importances; with --out also write report.md and PNGs.")
    r.add_argument("model", metavar="MODEL", help="a model file, or 'learned' for the shipped CPU model")
    r.add_argument("--out", metavar="DIR", help="write report.md and the PNGs here")
    r.set_defaults(func=cmd_report)
    pr = cm.add_parser("probe", help="a CPU no model was profiled on, in about a minute: scale a shipped model to it",
                       description="Time every layer of four small tuning-set models inside real passes on "
                       "one idle core and fit each shipped model's per-kind factors to them; `learned` (and "
                       "`probed`) then use the best-fitting model scaled by them on this CPU "
                       "(pipeplan.costmodel.probe).")
    pr.add_argument("--base", metavar="M,M", help="cost models to fit (default: every shipped learned model)")
    pr.add_argument("--cores", type=lambda s: [int(c) for c in s.split(",")], default=[_first_core()], metavar="C",
                    help="the core to time on (default: the first this process may use; keep it idle)")
    pr.add_argument("--models", default=",".join(PROBE_MODELS), metavar="M,M",
                    help=f"tuning-set models to time (default {','.join(PROBE_MODELS)})")
    pr.add_argument("--seconds", type=float, default=1.0, metavar="S",
                    help="seconds of timed passes per probe model (1)")
    pr.add_argument("--out", metavar="PROBE.json", help="where to write it (default: this CPU's probe in the user "
                    "data directory, or $PIPEPLAN_PROBE_DIR)")
    pr.set_defaults(func=cmd_probe)
    wk = cm.add_parser("wake", help="how this CPU runs a stage that waited for its input, in a few minutes",
                       description="Time a reference workload on one core after sleeps of 0.5–16 ms and back to "
                       "back, idle and under co-runners, and fit this CPU's wake model: the idle penalty after a "
                       "wait and the full-speed credit a woken task gets on a shared core. With a second core it "
                       "then runs the workload as real two-process pipelines: what a stage pays per microbatch, "
                       "how much later a message reaches a loaded core, and what share of the credit a loaded "
                       "stage earns there. `pipeplan run` and `pipeplan plan` then price each stage's waits "
                       "(pipeplan.costmodel.wake).")
    wk.add_argument("--core", type=int, default=_first_core(), metavar="C",
                    help="the core to measure on (default: the first this process may use; keep it otherwise idle)")
    wk.add_argument("--levels", default="2xcompute,1xcompute", metavar="L,L",
                    help="loads that share the core, made by co-runners (default 2xcompute,1xcompute)")
    wk.add_argument("--repeats", type=int, default=30, metavar="N", help="timed calls per cell (30)")
    wk.add_argument("--no-pipeline", action="store_true", help="skip the two-stage pipelines of the reference "
                    "workload that measure what a stage pays per microbatch, how late its input arrives on a "
                    "loaded core and how much credit it earns there (they use this core and the next: about a "
                    "minute, and half a minute per load)")
    wk.add_argument("--out", metavar="WAKE.json", help="where to write it (default: this CPU's wake model in the "
                    "user data directory, or $PIPEPLAN_WAKE_DIR)")
    wk.set_defaults(func=cmd_wake)
