"""A deep-ensemble burn-in before a Langevin rule (repens.training.fitting.burn_in): the sampler that
follows still samples a Gaussian within ULA's stated bias, the burn-in resumes from its
final state after a kill, and its settings are checked."""

from __future__ import annotations

import logging
import math

import pytest
import torch

import repens.training.fitting as fitting
from repens.jobs.job import Job, SpecError
from repens.methods.step_size import DEFAULT_FRACTION, relaxation_steps, ula_variance_inflation
from repens.training.fitting import burn_in_files, fit_particles, remove_checkpoints
from repens.training.train import TrainSettings
from test_langevin import CURVATURES, Quadratic, _network_job, _network_problem


def _gaussian_job(steps: int, burn_in: float) -> Job:
    return Job.from_spec(
        {
            "experiment": "toy",
            "dataset": "regression",
            "method": "dle-burnin",
            "rule": "langevin",
            "temperature": 1.0,
            "seed": 0,
            "particles": 2,
            "steps": steps,
            "lr": 0.5,
            "optimizer": "sgd",
            "step_size": "curvature",
            "burn_in": burn_in,
        }
    )


def test_burned_in_ula_samples_an_anisotropic_gaussian_from_a_far_start():
    """20,000 chains started 30 away from the mean (curvatures 1, 10, 100): half the run as a
    deep ensemble (Adam at lr 0.5: within 1e-3 of it after 2,000 steps) brings them to the
    mode, the other half is ULA at the curvature step
    measured there (eta L = 0.1), 4 relaxation times of the softest direction. Every
    eigen-direction's variance is within 10 % of the target's (sampling sd of each ratio 1 %),
    the stiffest inflated as 1 / (1 - eta L / 2) = 1.053 says; the mean within 0.02."""
    target = Quadratic()
    eta = DEFAULT_FRACTION / max(CURVATURES)
    ula_steps = math.ceil(4 * relaxation_steps(eta, min(CURVATURES)))
    job = _gaussian_job(2 * ula_steps, 0.5)
    g = torch.Generator().manual_seed(1)
    start = target.mean + 30.0 + torch.randn(20000, len(CURVATURES), generator=g, dtype=torch.float64)
    seen = {}
    original = fitting.train

    def spy(rule, state, settings, **kwargs):
        seen.setdefault("phases", []).append((settings.optimizer, settings.steps, settings.lr, settings.lr_decay))
        return original(rule, state, settings, **kwargs)

    fitting.train = spy
    try:
        out = fit_particles(
            job, target, start, TrainSettings(steps=job.steps, lr=job.lr, optimizer="sgd", log_every=10**9), g
        ).params
    finally:
        fitting.train = original
    (opt1, n1, lr1, _), (opt2, n2, lr2, decay2) = seen["phases"]
    assert (opt1, n1, lr1) == ("adam", ula_steps, 0.5)
    assert (opt2, n2, decay2) == ("sgd", ula_steps, 1.0)
    assert lr2 == pytest.approx(eta, rel=0.01)  # measured at the burned-in particles
    ratios = target.variance_ratios(out)
    assert torch.all((ratios - 1).abs() < 0.1), ratios
    assert float(ratios[-1]) == pytest.approx(ula_variance_inflation(DEFAULT_FRACTION), abs=0.035)
    assert float((out.mean(0) - target.mean).norm()) < 0.02


def test_without_the_burn_in_the_same_far_start_is_not_sampled_in_the_same_run():
    """The control: ULA alone over the whole run from the same start (the step measured there)
    has not forgotten it. Its softest direction's variance or its mean is off."""
    target = Quadratic()
    eta = DEFAULT_FRACTION / max(CURVATURES)
    steps = math.ceil(relaxation_steps(eta, min(CURVATURES)))  # one relaxation time: e^-1 of the offset left
    job = _gaussian_job(steps, 0.0)
    g = torch.Generator().manual_seed(1)
    start = target.mean + 30.0 + torch.randn(2000, len(CURVATURES), generator=g, dtype=torch.float64)
    out = fit_particles(
        job, target, start, TrainSettings(steps=steps, lr=job.lr, optimizer="sgd", log_every=10**9), g
    ).params
    assert float((out.mean(0) - target.mean).norm()) > 1.0


def _run(job, checkpoint=None):
    posterior, init, next_batch = _network_problem()
    return fit_particles(
        job,
        posterior,
        init,
        TrainSettings(steps=job.steps, lr=job.lr, optimizer="sgd", log_every=10**9),
        torch.Generator().manual_seed(0),
        next_batch=next_batch,
        checkpoint=checkpoint,
    ).params


def test_a_run_killed_after_the_burn_in_resumes_without_it_and_ends_bit_identical(tmp_path, caplog):
    job = _network_job(steps=40, lr=0.01, burn_in=0.5)
    reference = _run(job)
    ckpt = tmp_path / "metrics.json.ckpt"
    original, calls = fitting.train, []

    def killed_in_the_sampler(rule, state, settings, **kwargs):
        calls.append(settings.optimizer)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed after the burn-in")
        return original(rule, state, settings, **kwargs)

    fitting.train = killed_in_the_sampler
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(job, ckpt)
    finally:
        fitting.train = original
    running, done = burn_in_files(ckpt)
    assert done.exists() and not running.exists()
    with caplog.at_level(logging.INFO, logger="repens.fitting"):
        resumed = _run(job, ckpt)
    assert "burn-in: 20 steps done before" in caplog.text
    assert torch.equal(resumed, reference)
    # another burn-in length is another run: its final state is set aside, not reused
    caplog.clear()
    with caplog.at_level(logging.INFO):
        _run(job.replace(burn_in=0.25), ckpt)
    assert "done before" not in caplog.text and "set aside" in caplog.text
    remove_checkpoints(ckpt)
    assert not any(p.exists() for p in (ckpt, *burn_in_files(ckpt)))


def test_burn_in_changes_the_run_and_zero_is_no_burn_in():
    job = _network_job(steps=20, lr=0.01)
    assert torch.equal(_run(job), _run(job.replace(burn_in=0.0)))
    assert not torch.equal(_run(job), _run(job.replace(burn_in=0.5)))


@pytest.mark.parametrize("value", [1.0, -0.1, 1.5])
def test_burn_in_outside_zero_to_one_is_refused_naming_the_key(value):
    with pytest.raises(SpecError, match="burn_in"):
        _network_job(burn_in=value)
