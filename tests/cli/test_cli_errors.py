"""The command lines' error boundary: the user's mistakes (a ``pipeplan.errors.UserError``, an option a
library cannot read, a file that is not there) are one line on stderr and exit status 2; anything else
— a bare ``ValueError`` from a bug included — keeps its traceback and exits 1.

Real commands, in a subprocess where the exit status and stderr are what is checked, else in process
(``main``); an internal error is made by a library function monkeypatched to raise a plain ValueError,
which tests the boundary, not a result.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeplan.api.__main__ import main as api_main
from pipeplan.cli import main
from pipeplan.executor.cli import main as run_main
from tests.api.api_factories import chain_graph

ROOT = Path(__file__).resolve().parents[2]


def _pipeplan(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m pipeplan ARGS``, or ``python -c CODE``, in the repository."""
    command = [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "pipeplan", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def _one_line(stderr: str, prefix: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_an_unreadable_option_is_one_line_and_status_2() -> None:
    done = _pipeplan("cluster", "hetero-a100-t4", "--load", "gpu1=lots")
    assert done.returncode == 2
    line = _one_line(done.stderr, "pipeplan cluster: error: cannot read load 'lots'")
    assert "'2xmemory'" in line  # the library's message says what to write


def test_a_file_that_is_not_there_is_one_line_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "cluster.json"
    done = _pipeplan("cluster", "hetero-a100-t4", "--json", str(out))
    assert done.returncode == 2
    assert _one_line(done.stderr, "pipeplan cluster: error:") == \
        f"pipeplan cluster: error: No such file or directory: {out}"


def test_an_internal_value_error_keeps_its_traceback_and_exits_1() -> None:
    code = ("import sys\n"
            "import pipeplan.costmodel.cluster as cluster\n"
            "def broken(spec):\n"
            "    raise ValueError('a broken invariant')\n"
            "cluster.load_cluster = broken\n"
            "from pipeplan.cli import main\n"
            "sys.exit(main(['cluster', 'hetero-a100-t4']))\n")
    done = _pipeplan(code=code)
    assert done.returncode == 1, done.stderr
    assert "Traceback (most recent call last)" in done.stderr and "in broken" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "ValueError: a broken invariant"
    assert "error:" not in done.stderr.split("Traceback")[0]


def test_a_missing_cost_model_file_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = tmp_path / "chain.json"
    graph.write_text(json.dumps(chain_graph(4)))
    assert main(["costs", str(graph), "--cluster", "hetero-a100-t4", "--summary",
                 "--costmodel", str(tmp_path / "none.zip")]) == 2
    line = _one_line(capsys.readouterr().err, f"pipeplan costs: error: cost model '{tmp_path / 'none.zip'}'")
    assert "no such model file" in line


@pytest.mark.parametrize("command", [["cluster", "hetero-a100-t4"], ["cluster", "hetero-a100-t4", "--load",
                                                                      "gpu1=1xcompute"]])
def test_main_lets_a_plain_value_error_through(command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import pipeplan.costmodel.cluster

    def broken(spec: str) -> None:
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(pipeplan.costmodel.cluster, "load_cluster", broken)
    with pytest.raises(ValueError, match="could not be broadcast"):
        main(command)


def test_the_service_commands_draw_the_same_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PIPEPLAN_DATABASE_URL", f"sqlite:///{tmp_path / 'pipeplan.db'}")
    assert api_main(["token", "create", "--name", "me", "--scopes", "read,root"]) == 2
    assert "scopes must be some of read, plan, admin" in _one_line(capsys.readouterr().err,
                                                                   "pipeplan token: error:")
    assert api_main(["token", "revoke", "nobody"]) == 2
    assert "no unrevoked token" in _one_line(capsys.readouterr().err, "pipeplan token: error:")

    import pipeplan.api.auth

    def broken(db: object) -> None:
        raise ValueError("a broken invariant")

    monkeypatch.setattr(pipeplan.api.auth, "list_tokens", broken)
    with pytest.raises(ValueError, match="a broken invariant"):
        api_main(["token", "list"])


def test_the_executor_main_draws_the_same_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["--plan", str(tmp_path / "none.json")]) == 2
    assert "cannot read plan" in _one_line(capsys.readouterr().err, "pipeplan run: error:")

    import pipeplan.planner.plan

    def broken(cls: object, path: object) -> None:
        raise ValueError("a broken invariant")

    monkeypatch.setattr(pipeplan.planner.plan.Plan, "load", classmethod(broken))
    with pytest.raises(ValueError, match="a broken invariant"):
        run_main(["--plan", str(tmp_path / "none.json")])
