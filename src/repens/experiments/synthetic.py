"""Appendix G.1: particles sampling a 2-D Gaussian and Neal's funnel."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from repens.core.atomic import save_npz_atomic
from repens.jobs.job import SyntheticJob
from repens.models.posteriors import TargetPosterior
from repens.models.targets import make_target
from repens.training.fitting import fit_particles, train_settings

log = logging.getLogger("repens.synthetic")

__all__ = ["run_synthetic", "initial_particles"]


def initial_particles(job: SyntheticJob, generator: torch.Generator) -> torch.Tensor:
    """``particles`` draws from N(0, init_std^2 I) in float64."""
    return job.init_std * torch.randn(job.particles, 2, generator=generator, dtype=torch.float64)


def run_synthetic(job: SyntheticJob | Mapping[str, Any], out: Path, checkpoint: Path | None = None) -> None:
    """Train one method on one synthetic target and save the particles to ``out`` (.npz).

    ``job``: a :class:`repens.jobs.job.SyntheticJob` or its spec. The file holds ``particles``
    (n, 2), ``initial`` (n, 2) and ``job`` (the JSON spec, including the scale), so plots
    and tables never need the config.
    """
    job = SyntheticJob.of(job)
    generator = torch.Generator().manual_seed(job.seed)
    target = make_target(job.dataset)
    init = initial_particles(job, generator)
    posterior = TargetPosterior(target)
    settings = train_settings(job)
    log.info("job %s", json.dumps(job.spec, sort_keys=True))

    def progress(step: int, params: torch.Tensor) -> dict[str, float]:
        mean = params.mean(0)
        return {"mean_x": float(mean[0]), "mean_y": float(mean[1]), "log_p": float(target.log_prob(params).mean())}

    particles = fit_particles(job, posterior, init, settings, generator, checkpoint=checkpoint, on_log=progress).params
    out.parent.mkdir(parents=True, exist_ok=True)
    save_npz_atomic(
        out, particles=particles.numpy(), initial=init.numpy(), job=np.array(json.dumps(job.spec, sort_keys=True))
    )
    if checkpoint is not None and checkpoint.exists():
        checkpoint.unlink()
    log.info("wrote %s", out)
