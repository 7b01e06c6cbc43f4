from __future__ import annotations

import pytest
import torch
from sklearn import ensemble, gaussian_process  # noqa: F401  (load their OpenMP and OpenBLAS before the limit)
from threadpoolctl import threadpool_limits

# One intra-op thread in the test process, as a run pinned to one core has.  The suite's own child
# processes (stages, servers, co-runners) share the machine's two cores with it, and a second
# torch/OpenMP or OpenBLAS thread then spins at every barrier waiting for a core a child holds: a
# model that trains in 8 s alone took 108 s in the suite so.  Code under test that needs more
# threads (a profile of a two-core device) sets them itself.
torch.set_num_threads(1)
threadpool_limits(1)


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
    # Stage predictions are back-to-back unless a test asks for a wake model: whether this CPU has
    # one (shipped or the user's) must not change what the other tests assert.
    os.environ["PIPEPLAN_WAKE"] = "none"
