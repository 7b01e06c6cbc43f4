"""Catching one CPU's profile up with another's: the sweep keys it lacks, ready for ``profile --layers``."""

from __future__ import annotations

import pytest

from pipeplan.costmodel.cli import select_layers
from pipeplan.costmodel.missing_configs import main, missing_configs
from pipeplan.costmodel.registry import SHIPPED


def _profile(name: str):
    (shipped,) = [s for s in SHIPPED if s.name == name]
    return shipped.dataset


def test_the_zen4_has_every_sweep_shape_of_the_xeon_and_its_own_besides() -> None:
    assert missing_configs(_profile("xeon"), _profile("epyc-zen4")) == []
    extra = missing_configs(_profile("epyc-zen4"), _profile("xeon"))
    kinds = ("activation", "conv2d", "pointwise", "softmax")
    by_kind = {kind: [c for c in extra if c.startswith(f"{kind}:")] for kind in kinds}
    assert sum(map(len, by_kind.values())) == len(extra) == 37 + 80 + 12 + 40
    assert len(by_kind["activation"]) == 37 and all(c.endswith(",op=7") for c in by_kind["activation"])  # tanh GELU
    # wide convolutions (384-3,072 channels in; the grid stops at 256) and small Snake chains
    assert len(by_kind["conv2d"]) == 80 and all(int(c.split("cin=")[1].split(",")[0]) >= 384 for c in by_kind["conv2d"])
    assert len(by_kind["pointwise"]) == 12 and all(c.endswith(",chain=0") for c in by_kind["pointwise"])
    assert by_kind["softmax"] == [s.key for s in select_layers("softmax", 40, gpu=False)[0]]


def test_the_keys_printed_are_the_shapes_profile_builds(capsys) -> None:
    assert main([str(_profile("epyc-zen4")), str(_profile("xeon")), "--kinds", "pointwise,softmax"]) == 0
    out, err = capsys.readouterr()
    specs, models = select_layers(out.strip(), per_kind=0, gpu=False)
    assert models == [] and len(specs) == 52 and {s.kind for s in specs} == {"pointwise", "softmax"}
    assert [s.key for s in specs] == missing_configs(_profile("epyc-zen4"), _profile("xeon"), ["pointwise", "softmax"])
    assert "52 configurations" in err and "12 pointwise" in err and "40 softmax" in err


# the Zen 3 on 2026-11-28, the Zen 5 on 2026-11-29; the Xeon of model 207 was profiled on its shapes from the start
@pytest.mark.parametrize("cpu", ["epyc-zen3", "epyc", "xeon-207"])
def test_the_other_cpus_caught_up_with_the_zen4(cpu: str) -> None:
    assert missing_configs(_profile("epyc-zen4"), _profile(cpu)) == []


def test_a_file_that_is_not_a_profile_is_named(tmp_path, capsys) -> None:
    bad = tmp_path / "graph.csv"
    bad.write_text("name,flops\nx,1\n")
    with pytest.raises(ValueError, match=r"graph\.csv: not a profile"):
        missing_configs(bad, _profile("xeon"))
    assert main([str(bad), str(_profile("xeon"))]) == 2
    assert "not a profile" in capsys.readouterr().err
    # a profile not written yet lacks every configuration
    assert len(missing_configs(_profile("epyc-zen4"), tmp_path / "new.csv", ["pointwise"])) == 80 + 12
