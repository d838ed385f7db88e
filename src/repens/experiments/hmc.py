"""The HMC reference posterior of the BNN toy problems, Appendix G.2 / G.3.

The gold standard that Figures 1 and 3 compare the ensembles with: the same network,
prior and likelihood as the method runs, sampled by many HMC chains moved together
(:func:`repens.training.hmc.sample_hmc`) on the full training set. Writes the predictive on the
test inputs in the format the method runs and the plotting code share (see
:func:`run_hmc`).

Every leapfrog step of all chains is one batched full-data gradient of the MLP stack
(:meth:`~repens.models.posteriors.NetworkPosterior.grad_log_likelihood`'s written-out backward,
no autograd), with the network in the job's ``dtype`` (float32 by default: about twice
as fast as float64 here) and the prior term, the sampler state and the energies in
float64. Measured costs are in ``config.yaml`` (``experiments.toy.hmc``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from repens.core.atomic import save_npz_atomic, write_json_atomic
from repens.core.environment import env_setting
from repens.core.jobkey import ENGINE_VERSION, job_key
from repens.data.toy import ToyData, make_toy
from repens.experiments.toy import toy_posterior
from repens.jobs.job import HMCJob
from repens.models.particles import StackedModel
from repens.models.posteriors import Batch, NetworkPosterior
from repens.training.hmc import (
    HMCSettings,
    ValueAndGrad,
    check_diagnostics,
    convergence,
    predictive_diagnostics,
    sample_hmc,
    summarise_diagnostics,
)

log = logging.getLogger("repens.hmc")

__all__ = ["LABEL", "evaluate_samples", "predict_and_diagnose", "run_hmc"]

LABEL = "HMC"
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def value_and_grad(posterior: NetworkPosterior, batch: Batch) -> ValueAndGrad:
    """log p(w | D) + const and its gradient for the rows (C, D) of a chain stack, full batch.

    The likelihood and its gradient come from one batched forward and written-out backward
    of the network (:meth:`NetworkPosterior.outputs_with_pullback`) in the network's own
    dtype; the Gaussian prior term and its gradient are computed in float64 from the
    float64 rows (the prior's sum over D weights is the large term of the energy). Returns
    float64. Equals ``posterior.log_likelihood(w, batch) + posterior.log_prior(w)``."""
    if isinstance(posterior.prior_std, Tensor):
        raise TypeError("value_and_grad takes an isotropic prior (a float prior_std)")
    dtype = batch.x.dtype
    prior_var = float(posterior.prior_std) ** 2
    const = -0.5 * posterior.model.dim * math.log(2 * math.pi * prior_var)

    def fn(q: Tensor) -> tuple[Tensor, Tensor]:
        w = q.to(dtype)
        outputs, pull_back = posterior.outputs_with_pullback(w, batch.x)
        loglik = posterior.log_likelihood_outputs(outputs, batch).double()
        grad = pull_back(posterior.output_grad_log_likelihood(outputs, batch)).double()
        value = loglik - 0.5 * (q * q).sum(-1) / prior_var + const
        return value, grad.sub_(q, alpha=1.0 / prior_var)

    return fn


@torch.no_grad()
def evaluate_samples(model: StackedModel, params: Tensor, x: Tensor, chunk: int = 200) -> Tensor:
    """Network outputs (S, T, out) of S stacked weight samples, ``chunk`` at a time."""
    return torch.cat([model(params[i : i + chunk], x) for i in range(0, params.shape[0], chunk)])


def predict_and_diagnose(
    model: StackedModel, draws: Tensor, x_test: Tensor, task: str, points: int = 400
) -> tuple[Tensor, dict[str, Any]]:
    """Predictive of the draws (chains, kept, D) on ``x_test`` and its diagnostics.

    Regression: f(x_test) of every draw, (chains * kept, T), diagnosed as is.
    Classification: the mean over draws of softmax(f(x_test)), (T, C), with the
    diagnostics of the per-draw class probabilities. Works through ``points`` test
    inputs at a time so that memory stays bounded (4000 draws x 3600 grid points x 5
    classes would otherwise be a few GB with the FFTs of the ESS).
    """
    chains, kept, dim = draws.shape
    flat = draws.reshape(chains * kept, dim).to(x_test.dtype)
    parts, rhat, bulk, tail = [], [], [], []
    for i in range(0, x_test.shape[0], points):
        out = evaluate_samples(model, flat, x_test[i : i + points])  # (S, t, out)
        if task == "regression":
            value = out[..., 0]  # (S, t)
            parts.append(value)
        else:
            value = torch.softmax(out.double(), dim=-1)  # (S, t, C)
            parts.append(value.mean(0))
        d = predictive_diagnostics(value.reshape(chains, kept, *value.shape[1:]))
        rhat.append(d["rhat"])
        bulk.append(d["ess_bulk"])
        tail.append(d["ess_tail"])
    predictive = torch.cat(parts, dim=1 if task == "regression" else 0)
    return predictive, summarise_diagnostics(
        np.concatenate(rhat), np.concatenate(bulk), np.concatenate(tail), chains, chains * kept
    )


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return [None if not np.isfinite(v) else round(float(v), 5) for v in obj.ravel()]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj)}")


def _log_density_summary(draw_logp: Tensor) -> dict[str, Any]:
    """Log posterior density of the kept draws (chains, kept), per chain: a chain still
    drifting (second half above its first) or chains at different levels point to too
    short a warmup. Reported, not checked (modes of a BNN may differ in density yet give
    similar f)."""
    lp = draw_logp.double()
    half = lp.shape[1] // 2
    out: dict[str, Any] = {
        "mean_per_chain": lp.mean(1).tolist(),
        "first_half_mean_per_chain": lp[:, :half].mean(1).tolist(),
        "second_half_mean_per_chain": lp[:, half:].mean(1).tolist(),
        "sd_per_chain": lp.std(1).tolist() if lp.shape[1] > 1 else None,
    }
    if lp.shape[0] >= 2 and lp.shape[1] >= 4:
        d = predictive_diagnostics(lp.unsqueeze(-1))
        out.update(rhat=d["rhat_max"], ess=d["ess_min"])
    return out


def run_hmc(job: HMCJob | Mapping[str, Any], out: Path, checkpoint: Path | None = None) -> None:
    """HMC reference posterior of a toy BNN job; predictions on ``x_test`` to ``out`` (.npz).

    ``job``: an :class:`~repens.jobs.job.HMCJob` or its spec (made into one, so a misspelled key is
    an error naming it). Its settings: ``dataset`` ("regression" | "classification"), ``seed`` (data, initial
    points and sampler), ``scale`` (recorded only), ``prior_std`` (1.0),
    ``noise_std`` (regression, 0.5), ``hidden`` ([50, 50]), ``hmc`` (fields of
    :class:`~repens.training.hmc.HMCSettings`; missing keys take the defaults),
    ``dtype`` of the network ("float32", the default, or "float64"; the sampler is
    float64 either way) and ``threads`` (torch intra-op threads while running, default 1:
    the batched gradients of these small networks gain little from a second thread and
    lose badly on a busy machine; the caller's setting is restored afterwards).

    Chains start from prior draws. First ``out.with_name("diagnostics.json")`` is
    written (settings, rank-normalised R-hat and bulk / tail ESS of the predictive,
    per-chain step size, acceptance, divergences, trajectory length, gradient calls,
    wall time), then the diagnostics are checked (:class:`~repens.training.hmc.HMCDiagnosticsError`
    on failure, so a bad run leaves the diagnostics but no predictions), then ``out`` with

    * ``x_train`` (N, d) float32, ``y_train`` (N,) float32 targets or int64 labels,
      ``x_test`` (T, d) float32;
    * regression: ``f_test`` (S, T) float32, f(x_test) of every kept sample, chains
      concatenated, and ``noise_std`` () float: the predictive is the mixture of
      N(f_s(x), noise_std^2);
    * classification: ``probs_test`` (T, C) float32, mean over samples of softmax(f_s(x));
    * ``job``: 0-d string array, ``json.dumps(job, sort_keys=True)``; ``label``: "HMC";
    * ``converged``: 0-d bool, the diagnostics at the paper-scale thresholds
      (:func:`repens.training.hmc.convergence`; False for a quick-scale smoke test).

    The diagnostics file records, besides the figures, ``converged`` and ``status`` (at the
    paper-scale thresholds :data:`repens.training.hmc.CONVERGED_RHAT_MAX` /
    :data:`~repens.training.hmc.CONVERGED_ESS_MIN`, always), ``accepted`` (the job's own check),
    ``passed`` (both: never true for an unconverged reference), ``thresholds`` and
    ``job_thresholds``.

    ``checkpoint`` (optional) holds the sampler state (see :func:`~repens.training.hmc.sample_hmc`),
    written every ``REPENS_CHECKPOINT_SECONDS`` (default 300) and on SIGTERM / SIGINT:
    a killed run resumes where it stopped, bit-identically. It is removed after a passed
    check and kept after a failed one: its key leaves out ``hmc.rhat_max`` /
    ``hmc.ess_min``, so rerunning with looser thresholds reuses the draws instead of
    sampling again.
    """
    job = HMCJob.of(job)
    threads = torch.get_num_threads()
    torch.set_num_threads(job.threads)
    try:
        _run_hmc(job, Path(out), checkpoint)
    finally:
        torch.set_num_threads(threads)


def _run_hmc(job: HMCJob, out: Path, checkpoint: Path | None) -> None:
    start = time.perf_counter()
    spec = job.to_spec()  # the job as given: recorded, and hashed into the checkpoint's key
    log.info("job %s", json.dumps(spec, sort_keys=True))
    settings, dtype = HMCSettings.from_dict(job.hmc), _DTYPES[job.dtype]
    data = make_toy(job.dataset, job.seed)
    posterior = toy_posterior(job, data, dtype)
    draws, stats = _sample(job, settings, posterior, data, checkpoint)
    diag_start = time.perf_counter()
    predictive, diag = predict_and_diagnose(posterior.model, draws, data.x_test.to(dtype), data.task)
    lp_diag = _log_density_summary(stats.pop("draw_logp"))
    diagnostics_s = time.perf_counter() - diag_start
    times = {
        "wall_time_s": time.perf_counter() - start,
        "sampling_time_s": stats["seconds"],
        "diagnostics_time_s": diagnostics_s,
    }

    out.parent.mkdir(parents=True, exist_ok=True)
    # converged: at the paper-scale thresholds, whatever this job enforces (quick scale
    # relaxes them so that a smoke test runs through; its reference is then not converged)
    verdict = convergence(diag, settings, scale=job.scale)
    write_json_atomic(
        out.with_name("diagnostics.json"),
        {
            "job": spec,
            "settings": settings.to_dict(),
            "dtype": str(dtype).removeprefix("torch."),
            "num_weights": posterior.model.dim,
            "quantity": "f(x_test)" if data.task == "regression" else "softmax(f(x_test)), worst class per input",
            "diagnostics": diag,
            **verdict,
            "log_density": lp_diag,
            "divergences": int(sum(stats["divergences"])),
            **times,
            "sampler": stats,
        },
        indent=1,
        default=_json_default,
        allow_nan=True,
    )
    _log_verdict(verdict, diag, lp_diag, stats, times["wall_time_s"])
    check_diagnostics(diag, settings)  # on failure the checkpoint stays (see above)
    if checkpoint is not None and checkpoint.exists():
        checkpoint.unlink()
    _write_predictions(out, spec, data, posterior, predictive, verdict)


def _sample(
    job: HMCJob, settings: HMCSettings, posterior: NetworkPosterior, data: ToyData, checkpoint: Path | None
) -> tuple[Tensor, dict[str, Any]]:
    """The job's chains, started from prior draws, sampled on the full training set."""
    dtype = _DTYPES[job.dtype]
    y = data.y_train.to(dtype) if data.task == "regression" else data.y_train.long()
    batch = Batch(data.x_train.to(dtype), y)
    generator = torch.Generator().manual_seed(job.seed)
    init = posterior.sample_prior(settings.chains, generator).double()
    log.info(
        "%s: %d weights, %d training points, %d chains x (%d warmup + %d samples, thin %d), network in %s",
        job.dataset,
        posterior.model.dim,
        batch.x.shape[0],
        settings.chains,
        settings.warmup,
        settings.samples,
        settings.thin,
        dtype,
    )
    # the acceptance thresholds do not change the draws: a run that failed its check
    # can be accepted with looser thresholds without sampling again
    spec = job.to_spec()
    sampling_job = {
        **spec,
        "hmc": {k: v for k, v in (spec.get("hmc") or {}).items() if k not in ("rhat_max", "ess_min")},
    }
    return sample_hmc(
        value_and_grad(posterior, batch),
        init,
        settings,
        job.seed,
        # the network's numerics are the training engine's (ENGINE_VERSION)
        checkpoint=checkpoint,
        checkpoint_key=f"{job_key(sampling_job)}|engine{ENGINE_VERSION}",
        checkpoint_seconds=env_setting("REPENS_CHECKPOINT_SECONDS"),
    )


def _log_verdict(
    verdict: dict[str, Any], diag: dict[str, Any], lp_diag: dict[str, Any], stats: dict[str, Any], wall: float
) -> None:
    (log.info if verdict["converged"] else log.warning)("HMC reference %s", verdict["status"])
    log.info(
        "diagnostics: rank-normalised split R-hat max %.4f (mean %.4f), ESS min bulk %.1f tail %.1f "
        "(mean %.1f) over %d draws, %d divergences, sampling %.1f s (warmup %.1f s), %.1f s in all; "
        "log density per chain %s (R-hat %.3g)",
        diag["rhat_max"],
        diag["rhat_mean"],
        diag["ess_bulk_min"],
        diag["ess_tail_min"],
        diag["ess_mean"],
        diag["draws"],
        sum(stats["divergences"]),
        stats["seconds"],
        stats["warmup_seconds"],
        wall,
        ", ".join(f"{v:.1f}" for v in lp_diag["mean_per_chain"]),
        lp_diag.get("rhat", float("nan")),
    )


def _write_predictions(
    out: Path,
    spec: dict[str, Any],
    data: ToyData,
    posterior: NetworkPosterior,
    predictive: Tensor,
    verdict: dict[str, Any],
) -> None:
    """The predictions file (see :func:`run_hmc`)."""
    arrays: dict[str, Any] = {
        "x_train": data.x_train.float().numpy(),
        "y_train": data.y_train.float().numpy() if data.task == "regression" else data.y_train.long().numpy(),
        "x_test": data.x_test.float().numpy(),
        "job": np.array(json.dumps(spec, sort_keys=True)),
        "label": np.array(LABEL),
        # the paper-scale convergence verdict travels with the predictions (the toy report reads it)
        "converged": np.array(verdict["converged"]),
    }
    if data.task == "regression":
        arrays["f_test"] = predictive.float().numpy()
        arrays["noise_std"] = np.array(float(posterior.noise_std))
    else:
        arrays["probs_test"] = predictive.float().numpy()
    save_npz_atomic(out, **arrays)
    log.info("wrote %s", out)
