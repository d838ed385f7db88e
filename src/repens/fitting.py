"""Fitting a stack of particles with a job's update rule: the wiring every experiment
shares (kernel from the job, update rule with its options, anchors, the step size, the
training loop)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from repens.job import Job, default_of
from repens.kernels import RBF
from repens.posteriors import Batch, Posterior
from repens.step_size import StepSize, langevin_step_size
from repens.train import TrainSettings, TrainState, train
from repens.updates import StepContext, make_update

__all__ = ["kernel_from_job", "train_settings", "fit_particles", "curvature_step", "CURVATURE_BATCHES"]

log = logging.getLogger("repens.fitting")

#: minibatches whose Hessians are averaged for the curvature of ``V`` (drawn from a stream
#: of their own, seeded with the job's seed, so the run's stream is untouched)
CURVATURE_BATCHES = 8


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
    if job.step_size == "curvature":
        step = curvature_step(job, posterior, init, next_batch, kernel, generator.device)
        log.info("step size: curvature %.4g (MMD bound %.3g) at the initial particles, eta = %g / L = %.4g "
                 "(lr %g is the cap)", step.curvature, step.mmd_curvature, step.fraction, step.lr, settings.lr)
        settings = dataclasses.replace(settings, lr=min(settings.lr, step.lr))
    elif job.rule == "langevin" and settings.optimizer == "adam" and (job.temperature is None or job.temperature):
        log.warning("Langevin noise preconditioned by Adam (no correction term) does not sample the target: "
                    "it over-disperses a Gaussian by tens of percent (tests/test_langevin.py); use "
                    "optimizer: sgd with step_size: curvature for ULA")
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


def curvature_step(job: Job, posterior: Posterior, init: torch.Tensor,
                   next_batch: Callable[[torch.Generator], Batch | None], kernel: RBF,
                   device: torch.device | str = "cpu") -> StepSize:
    """The job's ``step_size: curvature`` step, ``curvature_fraction / L``
    (:func:`repens.step_size.langevin_step_size`) at the initial particles.

    ``V`` is the rule's: the full-data scaled likelihood plus ``temperature`` times the prior
    for a Langevin rule (plus DRLE's MMD bound at the initial particles' median bandwidth),
    likelihood plus prior otherwise; its Hessian is averaged over :data:`CURVATURE_BATCHES`
    minibatches from a stream seeded with the job's seed. The step is rounded to 3
    significant digits, so a rerun (say on another thread count, which rounds the power
    iteration differently) finds the same ``lr`` and resumes its checkpoint.
    """
    seed = int(job.seed or 0)
    batch_stream = torch.Generator(device=device).manual_seed(seed)
    batches = [next_batch(batch_stream) for _ in range(CURVATURE_BATCHES)]
    if all(b is None for b in batches):
        batches = [None]
    langevin = job.rule == "langevin"
    mmd_weight = float(job.mmd_weight or 0.0) if langevin else 0.0
    bandwidth = None
    if mmd_weight:
        bandwidth = float(torch.as_tensor(kernel.self_gram(init)[1]).min())
    step = langevin_step_size(
        posterior, init, batches,
        temperature=float(1.0 if job.temperature is None else job.temperature) if langevin else 1.0,
        fraction=float(job.curvature_fraction),
        mmd_weight=mmd_weight, bandwidth=bandwidth,
        generator=torch.Generator(device=init.device).manual_seed(seed),
    )
    return dataclasses.replace(step, lr=float(f"{step.lr:.3g}"))
