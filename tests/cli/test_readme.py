"""The README's Python examples run as written (from the repository root, as a reader would)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_readme_has_python_examples() -> None:
    assert len(_python_blocks()) >= 1


@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_python_block_runs(index: int, tmp_path: Path) -> None:
    script = tmp_path / f"block{index}.py"
    # A script run as __main__ must guard its work: the executor's stage processes import it.
    body = _python_blocks()[index]
    script.write_text("def main():\n" + "".join(f"    {line}\n" for line in body.splitlines())
                      + "\n\nif __name__ == '__main__':\n    main()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    if "run_plan" in body:
        assert "outputs match the unsplit model" in result.stdout
