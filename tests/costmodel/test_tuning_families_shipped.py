"""Which tuning-set entries each shipped CPU's in-model file holds (``tuning_set``'s docstring says, and the README's
catch-up commands rely on it): a family added on one CPU is missing on the others until someone profiles it there."""

from __future__ import annotations

import pytest

from pipeplan.costmodel.dataset_files import read_dataset
from pipeplan.costmodel.day_speed import entry_sums
from pipeplan.costmodel.registry import SHIPPED
from pipeplan.costmodel.tuning_set import ENTRIES

# families added after a CPU was last profiled (``tuning_set --only resnet_basic,mixtral --seconds 3`` adds them)
LACKING = {"epyc-zen3": {"resnet_basic", "mixtral"}}


@pytest.mark.parametrize("shipped", SHIPPED, ids=lambda s: s.name)
def test_each_in_model_file_holds_every_entry_of_the_families_it_has(shipped) -> None:
    held = set(entry_sums(read_dataset(shipped.in_model)))  # the entries it has rows of, by name
    lacking = LACKING.get(shipped.name, set())
    expected = {e.name for e in ENTRIES if e.factory.__name__ not in lacking}
    assert expected - held == set()
    assert {e.name for e in ENTRIES if e.factory.__name__ in lacking} & held == set()
