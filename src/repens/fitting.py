"""Fitting a stack of particles with a job's update rule: the wiring every experiment
shares (kernel from the job, update rule with its options, anchors, the training loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from repens.job import Job, default_of
from repens.kernels import RBF
from repens.posteriors import Batch, Posterior
from repens.train import TrainSettings, TrainState, train
from repens.updates import StepContext, make_update

__all__ = ["kernel_from_job", "train_settings", "fit_particles"]


def kernel_from_job(job: Job | Mapping[str, Any]) -> RBF:
    """RBF kernel with the job's ``bandwidth``: ``"median"`` or a fixed ``h`` (a dict's
    missing bandwidth takes :class:`repens.job.Job`'s default)."""
    bandwidth = job.bandwidth if isinstance(job, Job) else job.get("bandwidth", default_of(Job, "bandwidth"))
    return RBF(None if bandwidth == "median" else float(bandwidth))


def train_settings(job: Job, steps: int | None = None, **extra: Any) -> TrainSettings:
    """The training loop's settings of ``job`` for a run of ``steps`` (default: the job's)
    steps; ``extra`` are further :class:`repens.train.TrainSettings` fields."""
    steps = job.steps if steps is None else steps
    if job.checkpoint_seconds is not None:  # else TrainSettings' own ($REPENS_CHECKPOINT_SECONDS)
        extra.setdefault("checkpoint_seconds", job.checkpoint_seconds)
    return TrainSettings(steps=steps, lr=job.lr, optimizer=job.optimizer, log_every=job.log_interval(steps), **extra)


def fit_particles(
    job: Job,
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
    state (``.params``: the particles; ``.repulsion``: the repulsion diagnostic).
    Anchored ensembles are anchored at ``init`` (Pearce et al.: anchor = draw).
    The checkpoint is keyed by ``checkpoint_key`` (default: ``job.key()``), so one
    made under other settings is set aside instead of resumed.
    """
    kernel = kernel_from_job(job)
    update = make_update(job.rule, job.space, **job.rule_options())
    anchors = init.clone() if job.rule == "anchored" else None
    state = train(
        TrainState(init, anchors),
        update,
        lambda batch, anchors_: StepContext(posterior, kernel, generator, batch, anchors_),
        settings,
        generator,
        next_batch=next_batch,
        checkpoint=checkpoint,
        on_log=on_log,
        checkpoint_key=job.key() if checkpoint_key is None else checkpoint_key,
    )
    return state
