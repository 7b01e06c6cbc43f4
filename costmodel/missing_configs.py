"""The sweep configurations one profile has and another lacks, as keys ``pipeplan profile --layers`` takes.

Every CPU's profile is meant to hold the same shapes (a model trained on one CPU's rows is compared with
another's shape by shape), but kinds were added one CPU at a time. A session on a CPU that missed some catches
up by profiling the keys another CPU has:

    pipeplan profile --layers "$(python -m pipeplan.costmodel.missing_configs \\
        costmodel/data/profile-cpu-epyc-zen4.csv costmodel/data/profile-cpu-epyc.csv --kinds activation,pointwise)" \\
        --repeats 3 --loaded-window-ms 60 --out costmodel/data/profile-cpu-epyc.csv --append

Only sweep rows count (a zoo layer or an in-model row has no key to rebuild it from). A configuration present
at some contention levels only still counts as present: its missing levels are a matter of ``--levels``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

__all__ = ["missing_configs"]


def _sweep_configs(path: Path) -> list[str]:
    """The sweep configurations of a profile CSV, each once, in the order first measured."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or not {"config", "source"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: not a profile (no 'config' and 'source' columns in its header)")
        return list(dict.fromkeys(row["config"] for row in reader if row["source"] == "sweep"))


def missing_configs(reference: str | Path, target: str | Path, kinds: Sequence[str] = ()) -> list[str]:
    """Sweep configurations of ``reference`` that ``target`` lacks, in ``reference``'s order; only those of
    ``kinds`` (the key's prefix, ``activation`` of ``activation:b=1,…``) when given.

    A target that does not exist yet lacks them all.
    """
    wanted = set(kinds)
    have = set(_sweep_configs(Path(target))) if Path(target).exists() else set()
    return [c for c in _sweep_configs(Path(reference))
            if c not in have and (not wanted or c.partition(":")[0] in wanted)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", help="the profile whose sweep configurations to look for")
    parser.add_argument("target", help="the profile that may lack some")
    parser.add_argument("--kinds", default="", help="comma-separated key kinds to keep (default: all)")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    try:
        configs = missing_configs(args.reference, args.target, kinds)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    by_kind = Counter(config.partition(":")[0] for config in configs)
    print(f"{len(configs)} configurations of {args.reference} missing from {args.target}"
          + (f": {', '.join(f'{n} {k}' for k, n in by_kind.items())}" if by_kind else ""), file=sys.stderr)
    print(",".join(configs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
