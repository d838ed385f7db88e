import pytest
import torch


@pytest.fixture(autouse=True)
def _deterministic_threads():
    # Two-core CI machine; keep torch from oversubscribing it.
    torch.set_num_threads(2)
    yield
