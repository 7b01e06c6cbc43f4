"""A learned cost model's report: markdown tables and PNGs, from the model file alone.

The figures come from the held-out evaluation stored in the model at training time, so a report can
be made anywhere the model file is, without the dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeplan.costmodel.learned import LearnedCostModel

__all__ = ["markdown_report", "write_plots"]


def _row(label: str, main: dict[str, float], linear: dict[str, float]) -> str:
    return (f"| {label} | {main['n']} | {main['mape']:.1f} | {main['within10']:.0f} | "
            f"{linear['mape']:.1f} | {linear['within10']:.0f} |")


def _table(title: str, key: str, evaluation: dict[str, Any]) -> list[str]:
    lines = [f"### {title}", "", "| | rows | main MAPE % | main within ±10% | linear MAPE % | linear within ±10% |",
             "|---|---:|---:|---:|---:|---:|"]
    main, linear = evaluation["main"][key], evaluation["linear"][key]
    lines += [_row(name, main[name], linear[name]) for name in main]
    return [*lines, ""]


def markdown_report(model: LearnedCostModel) -> str:
    meta = model.meta
    lines = ["# Learned cost model", "",
             f"Trained on {meta.get('rows')} measurements of {meta.get('configs')} layer configurations on "
             f"{', '.join(meta.get('device_names') or ['?'])} (device type "
             f"{', '.join(model.reference_devices)}), contention levels: {', '.join(meta.get('levels', []))}. "
             f"scikit-learn {meta.get('sklearn_version')}.", ""]
    evaluation = meta.get("evaluation")
    if evaluation:
        lines += [f"## Held-out shapes ({evaluation['test_configs']} configurations, {evaluation['test_rows']} rows "
                  "never seen in training)", "",
                  "| | rows | main MAPE % | main within ±10% | linear MAPE % | linear within ±10% |",
                  "|---|---:|---:|---:|---:|---:|",
                  _row("**overall**", evaluation["main"]["overall"], evaluation["linear"]["overall"]), ""]
        interval = evaluation["main"]["overall"].get("mape_interval")
        if interval and not evaluation.get("cannot_judge"):
            lines += [f"90% interval of the main MAPE over held-out configurations: "
                      f"{interval[0]:.1f}–{interval[1]:.1f}%.", ""]
        if evaluation.get("cannot_judge"):
            lines += [f"**Warning:** {evaluation['cannot_judge']}.", ""]
        lines += _table("By contention level", "by_contention", evaluation)
        lines += _table("By layer type", "by_kind", evaluation)
    else:
        lines += ["(trained without a held-out evaluation)", ""]
    cover = meta.get("coverage")
    if cover:
        lines += ["## Coverage by layer kind", "", "| kind | rows | configurations | held out |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {k} | {c['rows']} | {c['configs']} | {c['held_out_configs']} |"
                  for k, c in cover["by_kind"].items()]
        if cover["without_held_out"]:
            lines += ["", f"No held-out rows (error unknown): {', '.join(cover['without_held_out'])}."]
        if cover["missing"]:
            lines += ["", f"No rows at all (the model extrapolates): {', '.join(cover['missing'])}."]
        lines += [""]
    lines += ["## What decides the time (decision-tree feature importances, summed per factor)", "",
              "| factor | importance |", "|---|---:|"]
    lines += [f"| {name} | {value:.3f} |" for name, value in (meta.get("importances") or {}).items()]
    return "\n".join(lines) + "\n"


def write_plots(model: LearnedCostModel, out_dir: str | Path) -> list[Path]:
    """importances.png, predicted_vs_measured.png, error_by_contention.png under ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    imp = model.meta.get("importances") or model.importances()
    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(imp)[::-1]
    ax.barh(names, [imp[n] for n in names], color="#4c72b0")
    ax.set_xlabel("importance (decision tree, summed per factor)")
    ax.set_title("What decides a layer's time")
    fig.tight_layout()
    written.append(out / "importances.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    evaluation = model.meta.get("evaluation")
    if not evaluation:
        return written
    pts = evaluation["points"]
    measured = np.array(pts["measured"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 5), sharex=True, sharey=True)
    levels = sorted(set(pts["contention"]))
    colours = plt.get_cmap("tab10")
    for ax, name in zip(axes, ("main", "linear"), strict=True):
        predicted = np.array(pts[name])
        for i, level in enumerate(levels):
            sel = np.array([c == level for c in pts["contention"]])
            ax.scatter(measured[sel], predicted[sel], s=9, alpha=0.7, color=colours(i % 10), label=level)
        lo, hi = measured.min() / 2, measured.max() * 2
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.2)
        ax.set(xscale="log", yscale="log", xlabel="measured s", title=f"{name}: held-out shapes")
    axes[0].set_ylabel("predicted s")
    axes[0].legend(fontsize=7, title="contention")
    fig.tight_layout()
    written.append(out / "predicted_vs_measured.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    by = [evaluation[name]["by_contention"] for name in ("main", "linear")]
    xs = np.arange(len(by[0]))
    for k, (name, figures) in enumerate(zip(("main", "linear"), by, strict=True)):
        ax.bar(xs + (k - 0.5) * 0.4, [figures[level]["mape"] for level in figures], 0.4, label=name)
    ax.axhline(10, color="k", lw=0.8, ls="--")
    ax.set_xticks(xs, list(by[0]), rotation=20)
    ax.set_ylabel("MAPE % on held-out shapes")
    ax.set_title("Error by contention level")
    ax.legend()
    fig.tight_layout()
    written.append(out / "error_by_contention.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written
