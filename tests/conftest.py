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
def interrupt_hmc(monkeypatch):
    """``interrupt(True)`` makes ``repens.experiments.hmc`` stop with KeyboardInterrupt (a
    killed HMC job) half-way through sampling, with the sampler state of the iteration
    before checkpointed; ``interrupt(False)`` undoes it."""
    import repens.experiments.hmc as exp

    real = exp.sample_hmc

    def interrupted(value_and_grad, init, settings, seed, **kwargs):
        checkpoint = kwargs["checkpoint"]

        def dying(q):
            if checkpoint.exists():
                done = torch.load(checkpoint, weights_only=False)["state"]["iteration"]
                if done >= (settings.warmup + settings.samples) // 2:
                    raise KeyboardInterrupt
            return value_and_grad(q)

        return real(dying, init, settings, seed, **{**kwargs, "checkpoint_seconds": 0.0})

    return lambda on: monkeypatch.setattr(exp, "sample_hmc", interrupted if on else real)
