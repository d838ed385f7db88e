"""Appendix G.2 / G.3: BNN posteriors on the 1-D regression and 2-D classification toys.

One job trains one method's particles on one toy data set and writes its predictions
on the test inputs (the format the HMC reference shares, read by the figures and the
distance-to-HMC table):

* ``x_train`` (N, d), ``y_train`` (N,), ``x_test`` (T, d), all float32 (labels int64);
* regression: ``f_test`` (S, T), f(x_test) per particle, and ``noise_std``;
* classification: ``probs_test`` (T, C), the ensemble's predictive probabilities;
* ``job`` (the JSON spec) and ``label`` (display name).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from repens.core.atomic import save_npz_atomic
from repens.data.toy import ToyData, make_toy
from repens.jobs.job import ToyJob, ToyNetwork
from repens.methods.minibatches import batch_sampler
from repens.models.networks import mlp
from repens.models.particles import StackedModel
from repens.models.posteriors import Batch, NetworkPosterior
from repens.training.fitting import fit_particles, train_settings

log = logging.getLogger("repens.toy")

__all__ = ["run_toy", "toy_posterior", "toy_predictions"]


def toy_posterior(
    network: ToyNetwork | Mapping[str, Any], data: ToyData, dtype: torch.dtype = torch.float32
) -> NetworkPosterior:
    """MLP (``hidden`` ReLU layers) with N(0, prior_std^2 I) on all weights, Gaussian (sd
    ``noise_std``) or softmax likelihood: :class:`repens.jobs.job.ToyNetwork` (a toy or HMC job is
    one; from a dict, its keys), shared with the HMC job."""
    network = ToyNetwork.pick(network)
    net = mlp(data.x_train.shape[-1], list(network.hidden), data.num_outputs).to(dtype)
    likelihood = "gaussian" if data.task == "regression" else "categorical"
    return NetworkPosterior(
        StackedModel(net),
        likelihood,
        num_train=data.x_train.shape[0],
        prior_std=network.prior_std,
        noise_std=network.noise_std,
    )


@torch.no_grad()
def toy_predictions(posterior: NetworkPosterior, params: torch.Tensor, data: ToyData) -> dict[str, np.ndarray]:
    """The prediction arrays of the shared format (see module docstring)."""
    outputs = posterior.predict(params, data.x_test)  # (S, T, C)
    arrays = {
        "x_train": data.x_train.numpy().astype(np.float32),
        "y_train": data.y_train.numpy(),
        "x_test": data.x_test.numpy().astype(np.float32),
    }
    if data.task == "regression":
        arrays["f_test"] = outputs.squeeze(-1).numpy().astype(np.float32)
        arrays["noise_std"] = np.array(posterior.noise_std)
    else:
        arrays["probs_test"] = torch.softmax(outputs, dim=-1).mean(0).numpy().astype(np.float32)
    return arrays


def run_toy(job: ToyJob | Mapping[str, Any], out: Path, checkpoint: Path | None = None) -> None:
    """Train one method on one toy data set (G.2 / G.3) and save its predictions to ``out``
    (``job``: a :class:`repens.jobs.job.ToyJob` or its spec)."""
    job = ToyJob.of(job)
    data = make_toy(job.dataset, job.seed)
    posterior = toy_posterior(job, data)
    generator = torch.Generator().manual_seed(job.seed)
    init = posterior.sample_prior(job.particles, generator)  # G.2/G.3: from the prior
    settings = train_settings(job)
    full = Batch(data.x_train, data.y_train)
    log.info("job %s", json.dumps(job.spec, sort_keys=True))

    def progress(step: int, params: torch.Tensor) -> dict[str, float]:
        with torch.no_grad():
            nll = -posterior.log_likelihood(params, full).mean() / data.x_train.shape[0]
        return {"train_nll": float(nll)}

    params = fit_particles(
        job,
        posterior,
        init,
        settings,
        generator,
        next_batch=batch_sampler(data, job.batch_size),
        checkpoint=checkpoint,
        on_log=progress,
    ).params
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays = toy_predictions(posterior, params, data)
    save_npz_atomic(
        out, **arrays, job=np.array(json.dumps(job.spec, sort_keys=True)), label=np.array("")
    )  # display names come from the config at plot time
    if checkpoint is not None and checkpoint.exists():
        checkpoint.unlink()
    log.info("wrote %s", out)
