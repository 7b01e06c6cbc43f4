"""Catching one CPU's profile up with another's: the sweep keys it lacks, ready for ``profile --layers``."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeplan.costmodel.cli import select_layers
from pipeplan.costmodel.missing_configs import _sweep_configs, main, missing_configs
from pipeplan.costmodel.registry import SHIPPED


def _profile(name: str):
    (shipped,) = [s for s in SHIPPED if s.name == name]
    return shipped.dataset


def test_the_zen4_has_every_sweep_shape_of_the_xeon() -> None:
    assert missing_configs(_profile("xeon"), _profile("epyc-zen4")) == []


def _without(reference: Path, out: Path, dropped: Callable[[str], bool]) -> Path:
    """A copy of a profile CSV without the rows whose config ``dropped`` picks: a CPU that missed those kinds."""
    with reference.open(newline="") as f, out.open("w", newline="") as g:
        reader = csv.DictReader(f)
        writer = csv.DictWriter(g, fieldnames=list(reader.fieldnames or []))
        writer.writeheader()
        writer.writerows(row for row in reader if not dropped(row["config"]))
    return out


def test_the_keys_printed_are_the_shapes_profile_builds(tmp_path, capsys) -> None:
    # a CPU that missed two kinds: no softmax, none of the small Snake chains (chain=0)
    behind = _without(_profile("epyc-zen4"), tmp_path / "behind.csv",
                      lambda c: c.startswith("softmax:") or (c.startswith("pointwise:") and c.endswith(",chain=0")))
    assert main([str(_profile("epyc-zen4")), str(behind), "--kinds", "pointwise,softmax"]) == 0
    out, err = capsys.readouterr()
    specs, models = select_layers(out.strip(), per_kind=0, gpu=False)
    assert models == [] and len(specs) == 16 + 40 and {s.kind for s in specs} == {"pointwise", "softmax"}
    assert [s.key for s in specs] == missing_configs(_profile("epyc-zen4"), behind, ["pointwise", "softmax"])
    assert [s.key for s in specs if s.kind == "softmax"] == [s.key for s in select_layers("softmax", 40, gpu=False)[0]]
    assert "56 configurations" in err and "16 pointwise" in err and "40 softmax" in err
    # the other kinds are not asked for, and nothing else is missing
    assert missing_configs(_profile("epyc-zen4"), behind, ["conv2d", "activation"]) == []


# The Zen 4's depthwise and grouped convolutions and its dense ones on large maps, shipped on 2026-11-30: only the
# Zen 5 has them too (the other CPUs' rows are still to be measured: missing_configs names them).
_RESULTS = Path(__file__).resolve().parents[2] / "benchmarks"
_NEWER = {*_sweep_configs(_RESULTS / "results-zen4-dw" / "pass3-profile-dwconv2d.csv"),
          *_sweep_configs(_RESULTS / "results-zen4-largemap" / "profile-large-map-conv.csv")}


# the Zen 3 on 2026-11-28, the Zen 5 and the model-167 Xeon on 2026-11-29; the Xeon of model 207 was profiled on
# its shapes from the start
@pytest.mark.parametrize("cpu", ["epyc-zen3", "epyc", "xeon", "xeon-207"])
def test_the_other_cpus_caught_up_with_the_zen4(cpu: str) -> None:
    missing = missing_configs(_profile("epyc-zen4"), _profile(cpu))
    if cpu == "epyc":
        assert missing == []
    else:
        assert missing and set(missing) <= _NEWER


def test_a_file_that_is_not_a_profile_is_named(tmp_path, capsys) -> None:
    bad = tmp_path / "graph.csv"
    bad.write_text("name,flops\nx,1\n")
    with pytest.raises(ValueError, match=r"graph\.csv: not a profile"):
        missing_configs(bad, _profile("xeon"))
    assert main([str(bad), str(_profile("xeon"))]) == 2
    assert "not a profile" in capsys.readouterr().err
    # a profile not written yet lacks every configuration
    assert len(missing_configs(_profile("epyc-zen4"), tmp_path / "new.csv", ["pointwise"])) == 80 + 12
