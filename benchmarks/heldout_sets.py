"""Every held-out set at once: the ``--models`` list for ``model_profile.py``, and its table summed up per set.

Each session scores all the held-out sets and compares models per set (median |error|, worst, how many
within 25%); both steps used to be rewritten from scratch in /tmp.

    .venv/bin/python benchmarks/model_profile.py --rounds 3 --learned learned,NEW.zip \\
        --models "$(.venv/bin/python benchmarks/heldout_sets.py --models)" > all-sets.md
    .venv/bin/python benchmarks/heldout_sets.py all-sets.md [--eager-from QUIET.md]

A model file trained since is scored on the same eager times without timing anything again by
``rescore.py ALL-SETS.md --learned learned,NEW.zip`` (its table is summed up here too).

This VM's speed can move by a third within one run; the models' own profiles (the ``profile`` column) show it.
``--eager-from`` scores the table's predictions against the eager times of another run of the same models (a
quieter one): the predictions depend on the model and the core's measured figures, not on the spell.

The sets are read from the tuples of ``model_profile.py`` (``MODELS``, the first set), ``heldout_models.py``,
``heldout_models_more.py``, ``heldout_models_21st.py``, ``heldout_models_24th.py``, ``heldout_models_28th.py``,
``heldout_models_31st.py`` and ``heldout_models_36th.py``, without importing them (no torch needed).
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Every tuple of NAMES in these files is a held-out set, in file order; a new set's file goes last here.
_FILES = ("model_profile.py", "heldout_models.py", "heldout_models_more.py", "heldout_models_21st.py",
          "heldout_models_24th.py", "heldout_models_28th.py", "heldout_models_31st.py",
          "heldout_models_36th.py")
# Written before the sets were scored apart, the first fifteen are scored as one (model_profile.py's MODELS and
# every set of heldout_models.py are among them).
_SCORED_TOGETHER = ("FOURTEENTH", "FIFTEENTH")


def _tuples(path: Path) -> dict[str, list[str]]:
    text = path.read_text()
    return {m.group(1): re.findall(r'"(\w+)"', m.group(2))
            for m in re.finditer(r"^([A-Z_]+) = \(([^)]*)\)", text, re.MULTILINE)}


def held_out_sets() -> dict[str, list[str]]:
    """Set name → its factories as ``model_profile.py --models`` takes them; the first fifteen are one set."""
    sets: dict[str, list[str]] = {"first to fifteenth": []}
    seen: dict[str, str] = {}
    for i, file in enumerate(_FILES):
        for key, names in _tuples(HERE / file).items():
            for name in names:  # a model already held out is no longer unseen, and tables key rows by name
                if name in seen:
                    raise ValueError(f"{name!r} of {file}'s {key} is already held out in {seen[name]}")
                seen[name] = f"{file}'s {key}"
            models = names if i == 0 else [f"benchmarks/{file}:{n}" for n in names]
            together = i < 2 or key in _SCORED_TOGETHER
            sets.setdefault("first to fifteenth" if together else key.lower().replace("_", "-"), []).extend(models)
    return sets


def _rows(table: Path) -> tuple[list[str], list[list[str]]]:
    """The header and the model rows of a ``model_profile.py`` table, cells stripped."""
    lines = []
    for line in table.read_text().splitlines():
        if line.startswith("| model | operator"):  # the --by-op table that may follow
            break
        if line.startswith("| ") and not line.startswith("|---"):
            lines.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return lines[0], lines[1:]


def _eager_ms(head: list[str], rows: list[list[str]]) -> dict[str, float]:
    column = next(i for i, name in enumerate(head) if name.startswith("eager ms"))
    return {row[0]: float(row[column].split()[0]) for row in rows}


def summarise(table: Path, eager_from: Path | None = None) -> list[str]:
    """Markdown rows: per set and per ``… (err)`` column of a ``model_profile.py`` table, median |error| /
    worst / models within 25%, then each column's signed median over all models. With ``eager_from``, errors
    are this table's predicted ms against the eager ms of the ``eager_from`` table, for the models both hold."""
    head, rows = _rows(table)
    columns = [i for i, name in enumerate(head) if name.endswith("(err)")]
    if eager_from is None:
        errors = {row[0]: [float(re.search(r"\(([-+]?\d+)%\)", row[i]).group(1)) for i in columns]
                  for row in rows}
    else:
        eager = _eager_ms(*_rows(eager_from))
        errors = {row[0]: [100 * (float(row[i].split()[0]) / eager[row[0]] - 1) for i in columns]
                  for row in rows if row[0] in eager}
    sets = {name: [m.split(":")[-1] for m in models] for name, models in held_out_sets().items()}
    sets["all"] = list(errors)
    names = [head[i].removesuffix(" ms (err)").split("/")[-1] for i in columns]
    out = ["| set | " + " | ".join(names) + " |",
           "|---|" + "---:|" * len(columns)]
    for name, models in sets.items():
        scored = [m for m in models if m in errors]
        if not scored:
            continue
        cells = []
        for j in range(len(columns)):
            errs = [errors[m][j] for m in scored]
            worst = max(errs, key=abs)
            cells.append(f"{statistics.median(map(abs, errs)):.0f}% / {worst:+.0f}% / "
                         f"{sum(abs(e) <= 25 for e in errs)} of {len(errs)}")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    signed = (f"{column} {statistics.median(e[j] for e in errors.values()):+.1f}%" for j, column in enumerate(names))
    return [*out, "", "Signed medians, all: " + ", ".join(signed)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", nargs="?", type=Path, help="a model_profile.py output to sum up per set")
    parser.add_argument("--models", action="store_true", help="print every held-out model, comma-separated")
    parser.add_argument("--eager-from", type=Path, metavar="TABLE",
                        help="score the predictions against this other model_profile.py run's eager times")
    args = parser.parse_args()
    if args.models:
        print(",".join(m for models in held_out_sets().values() for m in models))
    elif args.table:
        print("\n".join(summarise(args.table, args.eager_from)))
    else:
        parser.error("give a model_profile.py table, or --models")


if __name__ == "__main__":
    main()
