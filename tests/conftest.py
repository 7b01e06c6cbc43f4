from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same RNG state, so random models and inputs repeat exactly."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _calibration_file(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Runs record their stage times for calibration: into a file of the test session's own (the
    CLI's subprocesses inherit it), never the user's."""
    import os

    os.environ["PIPEPLAN_CALIBRATION"] = str(tmp_path_factory.mktemp("calibration") / "calibration.json")
    # A probe of this CPU in the user's data directory would change what `learned` means here.
    os.environ["PIPEPLAN_PROBE_DIR"] = str(tmp_path_factory.mktemp("probes"))
