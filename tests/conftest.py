from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same RNG state, so random models and inputs repeat exactly."""
    torch.manual_seed(0)
