"""Run the pipeplan command line in a subprocess, as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeplan", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)
