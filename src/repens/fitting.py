"""Fitting a stack of particles with a job's update rule: the wiring every experiment
shares (kernel from the job, update rule with its options, anchors, the training loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from repens.config import method_options
from repens.jobkey import job_key
from repens.kernels import RBF
from repens.posteriors import Batch, Posterior
from repens.train import TrainSettings, TrainState, train
from repens.updates import StepContext, make_update

__all__ = ["kernel_from_job", "fit_particles"]


def kernel_from_job(job: dict[str, Any]) -> RBF:
    """RBF kernel with the job's ``bandwidth``: ``"median"`` or a fixed ``h``."""
    bandwidth = job.get("bandwidth", "median")
    return RBF(None if bandwidth == "median" else float(bandwidth))


def fit_particles(
    job: dict[str, Any],
    posterior: Posterior,
    init: torch.Tensor,
    settings: TrainSettings,
    generator: torch.Generator,
    next_batch: Callable[[torch.Generator], Batch | None] = lambda g: None,
    checkpoint: Path | None = None,
    on_log: Callable[[int, torch.Tensor], dict] | None = None,
    checkpoint_key: str | None = None,
) -> TrainState:
    """Move the particles ``init`` with the job's update rule (``rule``, ``space``, its
    options and ``bandwidth``) through :func:`repens.train.train`; returns its final
    state (``.params``: the particles; ``.repulsion``: the repulsion diagnostic). Anchored ensembles are anchored at ``init`` (Pearce et al.: anchor = draw).
    The checkpoint is keyed by ``checkpoint_key`` (default: ``job_key(job)``), so one
    made under other settings is set aside instead of resumed.
    """
    kernel = kernel_from_job(job)
    update = make_update(job["rule"], job.get("space", "weight"), **method_options(job))
    anchors = init.clone() if job["rule"] == "anchored" else None
    state = train(
        TrainState(init, anchors),
        update,
        lambda batch, anchors_: StepContext(posterior, kernel, generator, batch, anchors_),
        settings,
        generator,
        next_batch=next_batch,
        checkpoint=checkpoint,
        on_log=on_log,
        checkpoint_key=job_key(job) if checkpoint_key is None else checkpoint_key,
    )
    return state
