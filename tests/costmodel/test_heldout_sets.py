"""The held-out sets of ``benchmarks/``: every model in one set only, since a model scored once is no longer
unseen, and judging tables key their rows by the factory's name."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _heldout_sets():
    spec = importlib.util.spec_from_file_location("heldout_sets", BENCHMARKS / "heldout_sets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_model_is_held_out_twice() -> None:
    sets = _heldout_sets().held_out_sets()
    names = [m.split(":")[-1] for models in sets.values() for m in models]
    assert len(names) == len(set(names)) and len(names) > 150
    assert sets["thirty-third"] == [f"benchmarks/heldout_models_31st.py:{n}"
                                    for n in ("nanochat", "minicpm3", "seggpt", "mask2former", "zoedepth")]
    assert len(sets["thirty-fifth"]) == 5
    assert list(sets)[-1] == "thirty-seventh"
    assert sets["thirty-seventh"][0] == "benchmarks/heldout_models_36th.py:zaya"


def test_a_model_written_into_a_second_set_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _heldout_sets()
    (tmp_path / "first.py").write_text('MODELS = ("gpt_neox", "levit")\n')
    (tmp_path / "later.py").write_text('THIRTY_THIRD = (\n    "nanochat",\n    "levit",\n)\n')
    monkeypatch.setattr(module, "HERE", tmp_path)
    monkeypatch.setattr(module, "_FILES", ("first.py", "later.py"))
    message = "'levit' of later.py's THIRTY_THIRD is already held out in first.py's MODELS"
    with pytest.raises(ValueError, match=re.escape(message)):
        module.held_out_sets()
