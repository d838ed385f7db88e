import pytest
import torch


@pytest.fixture(autouse=True)
def _deterministic_threads():
    # The test problems are tiny: one thread is fastest and immune to a busy machine
    # (two threads spin-waiting on a loaded 2-core machine slowed steps 20-fold).
    torch.set_num_threads(1)
    yield
