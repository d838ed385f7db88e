import os

import pytest
import torch

# No test touches the network: the workflow's data check (repens.data.availability)
# counts no download as possible instead of probing the data sets' hosts, as on a
# machine with no network; and Snakemake subprocesses inherit this.
os.environ.setdefault("REPENS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _deterministic_threads():
    # The test problems are tiny: one thread is fastest and immune to a busy machine
    # (two threads spin-waiting on a loaded 2-core machine slowed steps 20-fold).
    torch.set_num_threads(1)
    yield


@pytest.fixture
def interrupt_hmc_after_first_chain(monkeypatch):
    """``interrupt(True)`` makes ``repens.experiments.hmc`` raise KeyboardInterrupt once
    its first chain is checkpointed (a killed HMC job); ``interrupt(False)`` undoes it."""
    import repens.experiments.hmc as exp

    real = exp.sample_nuts_with_stats

    def interrupted(*args, on_chain=None, **kwargs):
        def once(i, draws, st):
            on_chain(i, draws, st)
            raise KeyboardInterrupt

        return real(*args, on_chain=once, **kwargs)

    return lambda on: monkeypatch.setattr(exp, "sample_nuts_with_stats", interrupted if on else real)
