"""The HMC (NUTS) reference posterior of the BNN toy problems, Appendix G.2 / G.3.

The gold standard that Figures 1 and 3 compare the ensembles with: the same
network, prior and likelihood as the method runs, but sampled by NUTS on the full
training set. Writes the predictive on the test inputs in the format the method
runs and the plotting code share (see :func:`run_hmc`).

Cost (measured on one core of a 2-core CPU, MLP 2 x 50, float32): one leapfrog step
(one gradient plus pyro's bookkeeping) takes about 0.6 ms on the regression toy and
0.73 ms on the classification toy, and NUTS uses nearly all of its 2**max_tree_depth - 1
steps per iteration on these posteriors. A chain of 1000 warmup + 1000 sampling
iterations thus takes about 20 min at max_tree_depth 10 and 5-6 min at depth 8; the
depth-10 chains mix far better per gradient (regression, 2 chains x 1000 draws: split
R-hat of f <= 1.05 and ESS >= 97 at depth 10 against 1.20 and 8 at depth 8).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call

from repens.atomic import save_npz_atomic, torch_save_atomic, write_json_atomic
from repens.data.toy import make_toy
from repens.experiments.toy import toy_posterior
from repens.job import HMCJob
from repens.jobkey import set_aside
from repens.hmc import (
    ChainStats,
    HMCSettings,
    check_diagnostics,
    predictive_diagnostics,
    sample_nuts_with_stats,
    summarise_diagnostics,
)
from repens.particles import StackedModel
from repens.posteriors import Batch, NetworkPosterior

log = logging.getLogger("repens.hmc")

__all__ = ["run_hmc", "evaluate_samples", "predict_and_diagnose", "LABEL"]

LABEL = "HMC"
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _log_density(posterior: NetworkPosterior, batch: Batch) -> Callable[[Tensor], Tensor]:
    """log p(w | D) + const for one weight vector (D,) on the full batch (scale N/B = 1).

    For an :func:`~repens.models.mlp` (``Linear``/``ReLU`` layers) with the Gaussian or
    categorical likelihood, value and gradient come from a hand-written forward and
    backward pass (:class:`_MLPLogDensity`), about half the cost of autograd through
    ``functional_call`` for these small networks; NUTS spends nearly all its time
    here and in pyro's own bookkeeping. Other networks use ``functional_call``.
    Either way the value is ``posterior.log_likelihood(w[None], batch) + log_prior(w)``.
    """
    model = posterior.model
    layers = _mlp_layers(model)
    if layers is not None and posterior.likelihood in ("gaussian", "categorical"):
        fused = _MLPValueAndGrad(posterior, batch, layers)
        return lambda w: _MLPLogDensity.apply(w, fused)

    def log_density(w: Tensor) -> Tensor:
        out = functional_call(model.module, {**model.unflatten(w), **model.buffers}, (batch.x,))
        return posterior.log_likelihood_outputs(out.unsqueeze(0), batch)[0] + posterior.log_prior(w)

    return log_density


def _mlp_layers(model: StackedModel) -> list[tuple[slice, tuple[int, int], slice]] | None:
    """(weight slice, weight shape, bias slice) per ``Linear`` when the module is a
    ``Sequential`` of ``Linear`` layers with a ``ReLU`` between consecutive ones; else None."""
    module = model.module
    if not isinstance(module, nn.Sequential) or len(model.buffers):
        return None
    kinds = [type(m) for m in module]
    expected = [nn.Linear, nn.ReLU] * (len(kinds) // 2) + [nn.Linear]
    if kinds != expected or not all(m.bias is not None for m in module if isinstance(m, nn.Linear)):
        return None
    slots = {s.name: s for s in model.slots}
    layers = []
    for i, m in enumerate(module):
        if isinstance(m, nn.Linear):
            w, b = slots[f"{i}.weight"], slots[f"{i}.bias"]
            layers.append((slice(w.start, w.stop), (m.out_features, m.in_features), slice(b.start, b.stop)))
    return layers


class _MLPValueAndGrad:
    """Log posterior density of a ReLU MLP and its gradient, by hand (no autograd graph)."""

    def __init__(self, posterior: NetworkPosterior, batch: Batch, layers: list) -> None:
        self.posterior = posterior
        self.batch = batch
        self.layers = layers
        self.scale = posterior.num_train / batch.x.shape[0]
        if posterior.likelihood == "categorical":
            self.onehot = torch.nn.functional.one_hot(batch.y.long(), posterior.model.module[-1].out_features)

    @torch.no_grad()
    def __call__(self, w: Tensor) -> tuple[Tensor, Tensor]:
        post, layers = self.posterior, self.layers
        acts, h = [self.batch.x], self.batch.x
        for k, (ws, shape, bs) in enumerate(layers):
            h = torch.addmm(w[bs], h, w[ws].view(shape).T)
            if k < len(layers) - 1:
                h = h.clamp_min(0)
                acts.append(h)
        value = post.log_likelihood_outputs(h.unsqueeze(0), self.batch)[0] + post.log_prior(w)
        # d loglik / d outputs
        if post.likelihood == "gaussian":
            g = ((self.batch.y.reshape(-1) - h[:, 0]) * (self.scale / post.noise_std**2)).unsqueeze(1)
        else:
            g = (self.onehot - torch.softmax(h, dim=-1)) * self.scale
        grad = w / (-post.prior_std**2)
        for k in range(len(layers) - 1, -1, -1):
            ws, shape, bs = layers[k]
            grad[ws] += (g.T @ acts[k]).reshape(-1)
            grad[bs] += g.sum(0)
            if k > 0:
                g = (g @ w[ws].view(shape)) * (acts[k] > 0)
        return value, grad


class _MLPLogDensity(torch.autograd.Function):
    """Wraps a (value, gradient) function as a differentiable scalar of ``w``."""

    @staticmethod
    def forward(ctx: Any, w: Tensor, fn: _MLPValueAndGrad) -> Tensor:  # type: ignore[override]
        value, grad = fn(w.detach())
        ctx.save_for_backward(grad)
        return value

    @staticmethod
    def backward(ctx: Any, upstream: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (grad,) = ctx.saved_tensors
        return upstream * grad, None


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
    flat = draws.reshape(chains * kept, dim)
    parts, rhat, ess = [], [], []
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
        ess.append(d["ess"])
    predictive = torch.cat(parts, dim=1 if task == "regression" else 0)
    return predictive, summarise_diagnostics(np.concatenate(rhat), np.concatenate(ess), chains, chains * kept)


def _load_checkpoint(path: Path | None, key: str) -> dict[int, tuple[Tensor, ChainStats]]:
    if path is None or not path.exists():
        return {}
    try:
        state = torch.load(path, weights_only=False)
    except Exception as err:  # a corrupt checkpoint only costs a rerun
        log.warning("ignoring unreadable checkpoint %s (%s)", path, err)
        return {}
    if not isinstance(state, dict) or state.get("key") != key:
        set_aside(path, state.get("key") if isinstance(state, dict) else None, key, log,
                  then="sampling every chain again")
        return {}
    return {int(i): (draws, ChainStats(**st)) for i, (draws, st) in state["chains"].items()}


def _save_checkpoint(path: Path, key: str, chains: dict[int, tuple[Tensor, ChainStats]]) -> None:
    torch_save_atomic({"key": key, "chains": {i: (d, st.to_dict()) for i, (d, st) in chains.items()}}, path)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return [None if not np.isfinite(v) else round(float(v), 5) for v in obj.ravel()]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj)}")


def _log_density_summary(log_density: Callable[[Tensor], Tensor], draws: Tensor) -> dict[str, Any]:
    """Log posterior density of the kept draws, per chain: a chain still drifting (mean of its
    second half above its first) or chains at different levels point to too short a warmup.
    Reported, not checked (modes of a BNN may differ in density yet give similar f)."""
    with torch.no_grad():
        lp = torch.stack([torch.stack([log_density(w) for w in chain]) for chain in draws]).double()
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
    """NUTS reference posterior of a toy BNN job; predictions on ``x_test`` to ``out`` (.npz).

    ``job``: a :class:`repens.job.HMCJob` or its spec: ``dataset`` ("regression" |
    "classification"), ``seed`` (data, initial points and sampler), ``scale`` (recorded
    only), the toy network (``prior_std``, ``noise_std``, ``hidden``), ``hmc`` (fields of
    :class:`~repens.hmc.HMCSettings`; missing keys take the defaults), ``dtype`` and
    ``threads`` (torch intra-op threads while running: NUTS on these small networks is a
    long chain of tiny operations, which extra threads only slow down, badly so on a busy
    machine; the caller's setting is restored afterwards).

    Chains start from prior draws. First ``out.with_name("diagnostics.json")`` is
    written (settings, R-hat / ESS of the predictive, per-chain step size,
    acceptance, divergences, gradient evaluations, wall time), then the
    diagnostics are checked (:class:`~repens.hmc.HMCDiagnosticsError` on failure, so a
    bad run leaves the diagnostics but no predictions), then ``out`` with

    * ``x_train`` (N, d) float32, ``y_train`` (N,) float32 targets or int64 labels,
      ``x_test`` (T, d) float32;
    * regression: ``f_test`` (S, T) float32, f(x_test) of every kept sample, chains
      concatenated, and ``noise_std`` () float: the predictive is the mixture of
      N(f_s(x), noise_std^2);
    * classification: ``probs_test`` (T, C) float32, mean over samples of softmax(f_s(x));
    * ``job``: 0-d string array, ``json.dumps(job, sort_keys=True)``; ``label``: "HMC".

    ``checkpoint`` (optional) keeps finished chains, so an interrupted run resumes
    at the chain it was in. It is removed after a passed check and kept after a
    failed one: its key leaves out ``hmc.rhat_max`` / ``hmc.ess_min``, so rerunning
    with looser thresholds reuses the draws instead of sampling again.
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
    job_json = json.dumps(job.spec, sort_keys=True)
    log.info("job %s", job_json)
    settings = HMCSettings.from_dict(job.hmc)
    dtype = _DTYPES[job.dtype]
    seed = job.seed

    data = make_toy(job.dataset, seed)
    posterior = toy_posterior(job, data, dtype)
    model = posterior.model
    y = data.y_train.to(dtype) if data.task == "regression" else data.y_train.long()
    batch = Batch(data.x_train.to(dtype), y)
    log_density = _log_density(posterior, batch)

    generator = torch.Generator().manual_seed(seed)
    init = posterior.sample_prior(settings.chains, generator).to(dtype)
    log.info("%s: %d weights, %d training points, %d chains x (%d warmup + %d samples, thin %d), %s",
             job.dataset, model.dim, batch.x.shape[0], settings.chains, settings.warmup,
             settings.samples, settings.thin, dtype)

    # the acceptance thresholds do not change the draws: a run that failed its check
    # can be accepted with looser thresholds without sampling again
    key = job.replace(hmc={k: v for k, v in job.hmc.items() if k not in ("rhat_max", "ess_min")}).key()
    done = _load_checkpoint(checkpoint, key)
    finished = dict(done)

    def on_chain(i: int, draws: Tensor, st: ChainStats) -> None:
        finished[i] = (draws, st)
        if checkpoint is not None:
            _save_checkpoint(checkpoint, key, finished)

    draws, stats = sample_nuts_with_stats(log_density, init, settings, seed, done=done, on_chain=on_chain)
    chains, kept, _ = draws.shape

    predictive, diag = predict_and_diagnose(model, draws, data.x_test.to(dtype), data.task)
    lp_diag = _log_density_summary(log_density, draws)
    wall = time.perf_counter() - start

    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out.with_name("diagnostics.json"), {
        "job": job.to_spec(),
        "settings": settings.to_dict(),
        "dtype": str(dtype).removeprefix("torch."),
        "num_weights": model.dim,
        "quantity": "f(x_test)" if data.task == "regression" else "softmax(f(x_test)), worst class per input",
        "diagnostics": diag,
        "passed": bool(diag["rhat_max"] <= settings.rhat_max and diag["ess_min"] >= settings.ess_min),
        "log_density": lp_diag,
        "divergences": int(sum(st.divergences for st in stats)),
        "wall_time_s": wall,
        "sampling_time_s": float(sum(st.seconds for st in stats)),
        "chains": [st.to_dict() for st in stats],
    }, indent=1, default=_json_default, allow_nan=True)
    log.info("diagnostics: split R-hat max %.4f (mean %.4f), ESS min %.1f (mean %.1f) over %d draws, "
             "%d divergences, %.1f s; log density per chain %s (R-hat %.3g)", diag["rhat_max"], diag["rhat_mean"],
             diag["ess_min"], diag["ess_mean"], diag["draws"], sum(st.divergences for st in stats), wall,
             ", ".join(f"{v:.1f}" for v in lp_diag["mean_per_chain"]), lp_diag.get("rhat", float("nan")))
    check_diagnostics(diag, settings)  # on failure the checkpoint stays (see above)
    if checkpoint is not None and checkpoint.exists():
        checkpoint.unlink()

    arrays: dict[str, Any] = {
        "x_train": data.x_train.float().numpy(),
        "y_train": data.y_train.float().numpy() if data.task == "regression" else data.y_train.long().numpy(),
        "x_test": data.x_test.float().numpy(),
        "job": np.array(job_json),
        "label": np.array(LABEL),
    }
    if data.task == "regression":
        arrays["f_test"] = predictive.float().numpy()
        arrays["noise_std"] = np.array(float(posterior.noise_std))
    else:
        arrays["probs_test"] = predictive.float().numpy()
    save_npz_atomic(out, **arrays)
    log.info("wrote %s", out)
