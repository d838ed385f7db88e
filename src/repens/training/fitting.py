"""Fitting a stack of particles with a job's update rule: the wiring every experiment
shares (kernel from the job, the rule built with its options, the step size, a burn-in,
the training loop), for one set of particles or a stack of sets (UCI splits, image seeds)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from repens.core.atomic import torch_save_atomic
from repens.core.jobkey import load_keyed_checkpoint
from repens.jobs.job import Job, default_of
from repens.methods.optimizers import make_optimizer
from repens.methods.rule import Rule, build, standard_normal
from repens.methods.step_size import StepSize, langevin_step_size
from repens.models.kernels import RBF
from repens.models.posteriors import Batch, Posterior
from repens.training.train import TrainSettings, TrainState, train

__all__ = [
    "kernel_from_job",
    "job_rule",
    "Streams",
    "train_settings",
    "fit_particles",
    "burn_in",
    "burn_in_files",
    "remove_checkpoints",
    "curvature_step",
    "CURVATURE_BATCHES",
]

log = logging.getLogger("repens.fitting")

#: minibatches whose Hessians are averaged for the curvature of ``V`` (drawn from a stream
#: of their own, seeded with the job's seed, so the run's stream is untouched)
CURVATURE_BATCHES = 8


def kernel_from_job(job: Job | Mapping[str, Any]) -> RBF:
    """RBF kernel with the job's ``bandwidth``: ``"median"`` or a fixed ``h`` (a dict's
    missing bandwidth takes :class:`repens.jobs.job.Job`'s default)."""
    bandwidth = job.bandwidth if isinstance(job, Job) else job.get("bandwidth", default_of(Job, "bandwidth"))
    return RBF(None if bandwidth == "median" else float(bandwidth))


def train_settings(job: Job, steps: int | None = None, **extra: Any) -> TrainSettings:
    """The training loop's settings of ``job`` for a run of ``steps`` (default: the job's)
    steps; ``extra`` are further :class:`repens.training.train.TrainSettings` fields."""
    steps = job.steps if steps is None else steps
    if job.checkpoint_seconds is not None:  # else TrainSettings' own ($REPENS_CHECKPOINT_SECONDS)
        extra.setdefault("checkpoint_seconds", job.checkpoint_seconds)
    return TrainSettings(steps=steps, lr=job.lr, optimizer=job.optimizer, log_every=job.log_interval(steps), **extra)


@dataclass(frozen=True)
class Streams:
    """How a stack of sets draws its randomness when each set has a stream of its own (a
    seed stack, :class:`repens.experiments.image.SeedStreams`): the streams (registered with
    a captured step), the rule's standard normal draws from them, and each set's block of
    the particles stepped by the optimizer as a tensor of its own
    (:func:`repens.methods.optimizers.make_optimizer`'s ``blocks``). The default: one stream,
    the run's."""

    generators: tuple[torch.Generator, ...] = ()
    noise: Callable[[torch.Tensor, torch.Generator], torch.Tensor] = standard_normal
    blocks: bool = False


def job_rule(job: Job, posterior: Posterior, settings: TrainSettings, streams: Streams = Streams()) -> Rule:
    """The job's rule (``rule``, ``space``, its options, ``bandwidth``) bound to
    ``posterior``, stepped by the settings' optimizer at their learning rate."""
    return build(
        job.rule,
        job.space,
        posterior,
        kernel=kernel_from_job(job),
        optimizer=partial(_optimizer, settings.optimizer, settings.lr, streams.blocks),
        lr=settings.lr,
        noise=streams.noise,
        **job.rule_options(),
    )


def _optimizer(name: str, lr: float, blocks: bool, params: torch.Tensor) -> torch.optim.Optimizer:
    return make_optimizer(name, params, lr, blocks=blocks)


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
    streams: Streams = Streams(),
) -> TrainState:
    """Move the particles ``init`` with the job's rule (:func:`job_rule`) through
    :func:`repens.training.train.train`; returns its final state (``.params``: the
    particles; ``.repulsion``: the repulsion diagnostic). The rule's state is made at
    ``init``, the particles' draw (an anchored ensemble anchors there, Pearce et al.); a
    burn-in (:func:`burn_in`) then moves them on before the rule's steps. The checkpoint is
    keyed by ``checkpoint_key`` (default: ``job.key()``), so one made under other settings
    is set aside instead of resumed.
    """
    checkpoint_key = job.key() if checkpoint_key is None else checkpoint_key
    start = init
    if job.burn_in:
        init, settings = burn_in(
            job, posterior, init, settings, generator, next_batch, checkpoint, on_log, checkpoint_key, streams
        )
    rule = job_rule(job, posterior, settings, streams)
    if job.step_size == "curvature":
        step = curvature_step(job, rule, init, next_batch, generator.device)
        log.info(
            "step size: curvature %.4g (MMD bound %.3g) at the %s particles, eta = %g / L = %.4g (lr %g is the cap)",
            step.curvature,
            step.mmd_curvature,
            "burned-in" if job.burn_in else "initial",
            step.fraction,
            step.lr,
            settings.lr,
        )
        settings = dataclasses.replace(settings, lr=min(settings.lr, step.lr))
        rule = job_rule(job, posterior, settings, streams)
    state = rule.init(start, generator)
    if init is not start:  # the burn-in's particles
        with torch.no_grad():
            state.params.copy_(init)
    return train(
        rule,
        state,
        settings,
        next_batch=next_batch,
        checkpoint=checkpoint,
        on_log=on_log,
        checkpoint_key=checkpoint_key,
        streams=streams.generators,
    )


def burn_in_files(checkpoint: Path) -> tuple[Path, Path]:
    """The burn-in's checkpoint and its final state beside the run's ``checkpoint``:
    ``<checkpoint>.burn_in`` and ``<checkpoint>.burn_in.done``."""
    running = checkpoint.with_name(checkpoint.name + ".burn_in")
    return running, running.with_name(running.name + ".done")


def remove_checkpoints(checkpoint: Path | None) -> None:
    """Remove a finished run's checkpoint and its burn-in's files (:func:`burn_in_files`)."""
    if checkpoint is None:
        return
    for path in (checkpoint, *burn_in_files(checkpoint)):
        if path.exists():
            path.unlink()


def burn_in(
    job: Job,
    posterior: Posterior,
    init: torch.Tensor,
    settings: TrainSettings,
    generator: torch.Generator,
    next_batch: Callable[[torch.Generator], Batch | None],
    checkpoint: Path | None,
    on_log: Callable[[int, torch.Tensor], dict] | None,
    checkpoint_key: str,
    streams: Streams = Streams(),
) -> tuple[torch.Tensor, TrainSettings]:
    """The first ``round(burn_in * steps)`` steps of a run as a deep ensemble: each particle
    ascends its own log-posterior (Eq. 2, the ``ensemble`` rule) with Adam at the job's
    ``lr`` and learning-rate schedule, the settings a deep ensemble of the job trains with.

    Returns the particles there and the settings of the rest of the run: the steps left,
    at a constant step (no decay; a sampler's step is its own, e.g. the curvature step
    measured at these particles). The burn-in checkpoints like any run
    (``<checkpoint>.burn_in``); its final state, with the random stream and the minibatch
    sampler, is kept in ``<checkpoint>.burn_in.done`` until the job is done
    (:func:`remove_checkpoints`), so a run killed after the burn-in resumes without it.
    """
    n = int(round(job.burn_in * settings.steps))
    rest = dataclasses.replace(settings, steps=settings.steps - n, lr_decay=1.0, lr_decay_steps=None)
    if n == 0:
        return init, rest
    key = f"{checkpoint_key}|burn_in{n}"
    running, done = burn_in_files(checkpoint) if checkpoint is not None else (None, None)
    sampler_state = getattr(next_batch, "state_dict", None)
    saved = load_keyed_checkpoint(done, key, log, then="burning in again") if done is not None else None
    if saved is not None:
        generator.set_state(saved["generator"])
        if sampler_state is not None:
            next_batch.load_state_dict(saved["sampler"])
        log.info("burn-in: %d steps done before (%s), reused", n, done)
        return saved["params"].to(init.device), rest
    log.info(
        "burn-in: %d of %d steps as a deep ensemble (adam, lr %g), then %s", n, settings.steps, settings.lr, job.rule
    )
    ensemble_settings = dataclasses.replace(settings, steps=n, optimizer="adam")
    ensemble = job_rule(job.replace(rule="ensemble", space="weight"), posterior, ensemble_settings, streams)
    state = train(
        ensemble,
        ensemble.init(init, generator),
        ensemble_settings,
        next_batch=next_batch,
        checkpoint=running,
        on_log=on_log,
        checkpoint_key=key,
        streams=streams.generators,
    )
    if done is not None:
        _keep_burn_in(done, running, key, n, state.params, generator, sampler_state)
    return state.params, rest


def _keep_burn_in(
    done: Path,
    running: Path,
    key: str,
    n: int,
    params: torch.Tensor,
    generator: torch.Generator,
    sampler_state: Callable[[], dict] | None,
) -> None:
    """:func:`burn_in`'s final state (particles, random stream, minibatch sampler) kept in
    ``done``, its running checkpoint removed."""
    torch_save_atomic(
        {
            "key": key,
            "step": n,
            "params": params,
            "generator": generator.get_state(),
            **({"sampler": sampler_state()} if sampler_state is not None else {}),
        },
        done,
    )
    if running.exists():
        running.unlink()


def curvature_step(
    job: Job,
    rule: Rule,
    init: torch.Tensor,
    next_batch: Callable[[torch.Generator], Batch | None],
    device: torch.device | str = "cpu",
) -> StepSize:
    """The job's ``step_size: curvature`` step, ``curvature_fraction / L``
    (:func:`repens.methods.step_size.langevin_step_size`) at the initial particles.

    ``V`` is the rule's (:meth:`repens.methods.rule.Rule.potential`): the full-data scaled
    likelihood plus ``temperature`` times the prior for a Langevin rule (plus DRLE's MMD
    bound at the initial particles' median bandwidth), likelihood plus prior otherwise; its
    Hessian is averaged over :data:`CURVATURE_BATCHES` minibatches from a stream seeded with
    the job's seed. The step is rounded to 3 significant digits, so a rerun (say on another
    thread count, which rounds the power iteration differently) finds the same ``lr`` and
    resumes its checkpoint.
    """
    seed = int(job.seed or 0)
    batch_stream = torch.Generator(device=device).manual_seed(seed)
    batches = [next_batch(batch_stream) for _ in range(CURVATURE_BATCHES)]
    if all(b is None for b in batches):
        batches = [None]
    temperature, mmd_weight = rule.potential()
    bandwidth = None
    if mmd_weight:
        bandwidth = float(torch.as_tensor(rule.kernel.self_gram(init)[1]).min())
    step = langevin_step_size(
        rule.posterior,
        init,
        batches,
        temperature=temperature,
        fraction=float(job.curvature_fraction),
        mmd_weight=mmd_weight,
        bandwidth=bandwidth,
        generator=torch.Generator(device=init.device).manual_seed(seed),
    )
    return dataclasses.replace(step, lr=float(f"{step.lr:.3g}"))
