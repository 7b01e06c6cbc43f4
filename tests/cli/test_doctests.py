"""The examples in pipeplan's docstrings run as tests: one test per module that has any.

pytest's ``--doctest-modules`` collects files by path and would import ``planner/ilp.py`` as a
top-level ``planner.ilp``; the packages live under one namespace (``pipeplan.planner``), so the
examples are found here by module name instead.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import io
import pkgutil

import pytest

PACKAGES = ("pipeplan", "pipeplan.api", "pipeplan.planner", "pipeplan.executor", "pipeplan.costmodel")


def _modules_with_examples() -> list[str]:
    names: set[str] = set()
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names.add(package)
        names.update(info.name for info in pkgutil.walk_packages(path, package + "."))
    found = []
    for name in sorted(names):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        with open(spec.origin, encoding="utf-8") as source:
            if ">>> " in source.read():
                found.append(name)
    return found


MODULES = _modules_with_examples()


def test_the_packages_have_examples() -> None:
    assert len(MODULES) >= 40 and "pipeplan.costmodel.source" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [test for test in doctest.DocTestFinder().find(module, name) if test.examples]
    assert tests, f"{name} mentions '>>> ' but has no example doctest can find"
    report = io.StringIO()
    for test in tests:
        runner.run(test, out=report.write)
    assert runner.failures == 0, report.getvalue()
