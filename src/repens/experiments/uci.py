"""UCI regression benchmark (Table 2): one method on every split of one dataset.

One job trains ``particles`` one-hidden-layer ReLU networks (50 units, 100 for
protein: ``n_hidden.txt``) on each standard split of Hernandez-Lobato & Adams
(2015), all splits at once as one stack of independent sets (:func:`train_splits`),
and evaluates on each split's test rows, in the original units (member means
``m_s = f_s(x) * y_std + y_mean``; ``sigma = noise_std * y_std``, ``noise_std`` the
homoscedastic noise sd on the standardized targets):

* RMSE of the ensemble mean ``m = 1/S sum_s m_s``;
* NLL under Pearce et al.'s predictive (2020, Algorithm 1), the seeds' own:
  ``N(y | m, s_model^2 + sigma^2)`` with the members' unbiased variance
  (:func:`ensemble_gaussian_metrics`) -- the ``nll`` of the tables;
* NLL of the members' equal-weight mixture ``1/S sum_s N(y | m_s, sigma^2)``
  (:func:`mixture_metrics`), ``nll_mixture``: with Pearce's sigma^2 = 1e-7 (energy,
  naval, yacht) a few members cannot cover a test point and it runs to 1e3-1e4;
* the repulsion diagnostic ``||repulsion|| / ||drift||`` (:func:`repens.methods.updates.repulsion_ratio`),
  its mean over the log steps and its last value.

Training follows Pearce et al.'s protocol (their Table 4 in ``config.yaml``): shuffled
epochs (:class:`repens.methods.minibatches.EpochSampler`), the learning rate decayed per epoch
(``lr_decay``), Adam.

When the stack is done, each split's result is written to ``<out dir>/split<K>.json``
(with the job's key, :func:`repens.core.jobkey.job_key`); a rerun of the same settings
reuses them, and a killed stack resumes from its checkpoint (keyed likewise), so a
killed job loses at most the last checkpoint interval. Results and checkpoints made
under other settings are set aside (``<name>.stale``) and redone.
The job's output ``metrics.json`` gathers the splits (per-split values, mean and
standard error over splits).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from repens.core.atomic import write_json_atomic
from repens.core.jobkey import load_keyed_json
from repens.data.uci import UCI_FOLDERS, UCISplit, dataset_info, load_split
from repens.jobs.job import UCIJob, UCINetwork
from repens.methods.minibatches import EpochSampler
from repens.models.networks import mlp
from repens.models.particles import StackedModel
from repens.models.posteriors import NetworkPosterior
from repens.training.fitting import fit_particles, remove_checkpoints, train_settings

log = logging.getLogger("repens.uci")

__all__ = [
    "data_root",
    "layer_prior_stds",
    "mixture_metrics",
    "ensemble_gaussian_metrics",
    "uci_posterior",
    "train_splits",
    "run_uci",
    "DATA_ENV",
]

#: per-split figures of a UCI job: RMSE of the ensemble mean; NLL under Pearce et al.'s
#: predictive (:func:`ensemble_gaussian_metrics`, the main NLL) and under the members'
#: equal-weight mixture (:func:`mixture_metrics`); the repulsion diagnostic
METRICS = ("rmse", "nll", "nll_mixture", "repulsion_ratio_mean", "repulsion_ratio_last")

#: environment variable naming the UCI data root (overridden by the job's ``uci_data``)
DATA_ENV = "REPENS_UCI_DATA"


def layer_prior_stds(model: StackedModel, first_bias_var: float) -> Tensor:
    """Pearce et al. (2020, App. E.7.1) prior: first-layer bias variance ``b1``, first-layer
    weights ``b1 / D`` (D inputs), later weights and biases ``1 / fan_in`` (``W_2``: ``1/H``).

    Returns the prior standard deviation of every entry of a stacked row, (D_params,).
    """
    stds = torch.empty(model.dim)
    first = model.slots[0].shape[1]  # the first Linear's weight is (H, D)
    layer, fan_in = -1, first
    for slot in model.slots:
        if slot.name.endswith("weight"):  # a new layer (its bias, if any, comes next)
            layer, fan_in = layer + 1, slot.shape[1]
            var = first_bias_var / first if layer == 0 else 1.0 / fan_in
        else:
            var = first_bias_var if layer == 0 else 1.0 / fan_in
        stds[slot.start : slot.stop] = math.sqrt(var)
    return stds


def uci_posterior(network: UCINetwork | Mapping[str, Any], split: UCISplit, hidden: int) -> NetworkPosterior:
    """One-hidden-layer ReLU MLP (``hidden`` units unless the network sets ``hidden``; an
    output bias unless ``output_bias`` is false), Gaussian
    likelihood with sd ``noise_std`` on standardized targets, prior from ``prior_bias_var``
    (:func:`layer_prior_stds`) or isotropic ``prior_std`` (:class:`repens.jobs.job.UCINetwork`:
    a UCI job is one; from a dict, its keys)."""
    network = UCINetwork.pick(network)
    widths = list(network.hidden or [hidden])
    model = StackedModel(mlp(split.x_train.shape[1], widths, 1, output_bias=network.output_bias))
    prior_std: float | Tensor = network.prior_std
    if network.prior_bias_var is not None:
        prior_std = layer_prior_stds(model, network.prior_bias_var)  # per weight, (D,)
    return NetworkPosterior(
        model,
        "gaussian",
        num_train=split.x_train.shape[0],
        prior_std=prior_std,
        noise_std=network.noise_std,
    )


def ensemble_gaussian_metrics(means: np.ndarray, noise_std: float, y: np.ndarray) -> dict[str, float]:
    """RMSE and NLL of Pearce et al.'s predictive (2020, Algorithm 1): one Gaussian
    ``N(y | m, s_model^2 + noise_std^2)`` per test point with ``m = 1/S sum_s m_s`` and the
    members' unbiased variance ``s_model^2 = 1/(S-1) sum_s (m_s - m)^2``.

    Args:
        means: (S, T) member means, in the units of ``y`` (S >= 2).
        noise_std: the data noise sd (same units).
        y: (T,) targets.

    Returns:
        ``rmse = sqrt(mean_t (m_t - y_t)^2)`` and ``nll = -mean_t log N(y_t | m_t, var_t)``.
    """
    means = np.asarray(means, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if means.ndim != 2 or means.shape[1] != y.shape[0] or means.shape[0] < 2:
        raise ValueError(f"means must be (S >= 2, T) with T = {y.shape[0]}, got {means.shape}")
    mean = means.mean(0)
    var = means.var(0, ddof=1) + noise_std**2
    nll = 0.5 * np.log(2 * math.pi * var) + 0.5 * (y - mean) ** 2 / var
    return {"rmse": float(np.sqrt(((mean - y) ** 2).mean())), "nll": float(nll.mean())}


def mixture_metrics(means: np.ndarray, noise_std: float, y: np.ndarray) -> dict[str, float]:
    """RMSE and NLL of the equal-weight Gaussian mixture ``1/S sum_s N(m_s, noise_std^2)``.

    Args:
        means: (S, T) member means, in the units of ``y``.
        noise_std: the common sd of every component (same units).
        y: (T,) targets.

    Returns:
        ``rmse = sqrt(mean_t (mean_s m_st - y_t)^2)`` and
        ``nll = -mean_t log(1/S sum_s N(y_t | m_st, noise_std^2))`` (log-sum-exp).
    """
    means = np.asarray(means, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(1, -1)
    if means.ndim != 2 or means.shape[1] != y.shape[1]:
        raise ValueError(f"means must be (S, T) with T = {y.shape[1]}, got {means.shape}")
    log_comp = -0.5 * ((y - means) / noise_std) ** 2 - math.log(noise_std) - 0.5 * math.log(2 * math.pi)
    top = log_comp.max(0)
    log_mix = top + np.log(np.exp(log_comp - top).mean(0))
    rmse = float(np.sqrt(((means.mean(0) - y[0]) ** 2).mean()))
    return {"rmse": rmse, "nll": float(-log_mix.mean())}


def data_root(job: UCIJob) -> Path:
    """The UCI root: the job's ``uci_data``, else ``$REPENS_UCI_DATA``, else ``data/uci``."""
    return Path(job.uci_data or os.environ.get(DATA_ENV) or "data/uci")


def _steps(job: UCIJob, n_train: int, n_epochs: int) -> int:
    """``steps`` if set, else ``epochs`` (default: ``n_epochs.txt``) passes of ``ceil(N / B)`` batches."""
    if job.steps is not None:
        return job.steps
    return (job.epochs or n_epochs) * _steps_per_epoch(job, n_train)


def _steps_per_epoch(job: UCIJob, n_train: int) -> int:
    return math.ceil(n_train / min(job.batch_size, n_train))


def _split_results(
    posterior: Any, state: Any, ks: list[int], splits: list[UCISplit], steps: int
) -> list[dict[str, Any]]:
    """:func:`train_splits`' test metrics of each split's trained members (original units)."""
    results = []
    for g, (k, split, members) in enumerate(zip(ks, splits, state.params)):
        with torch.no_grad():
            f = posterior.predict(members, split.x_test).squeeze(-1).double().numpy()  # (S, T)
        means = f * split.y_std + split.y_mean
        noise = posterior.noise_std * split.y_std
        pearce = ensemble_gaussian_metrics(means, noise, split.y_test_raw) if means.shape[0] > 1 else {}
        mixture = mixture_metrics(means, noise, split.y_test_raw)
        ratios = [r[g] for _, r in state.repulsion]
        results.append(
            {
                "split": k,
                "steps": steps,
                "n_train": int(split.x_train.shape[0]),
                "n_test": int(split.x_test.shape[0]),
                "rmse": mixture["rmse"],
                "nll": pearce.get("nll", math.nan),
                "nll_mixture": mixture["nll"],
                # ||repulsion|| / ||drift|| over training: mean of the log steps and last
                "repulsion_ratio_mean": float(np.mean(ratios)) if ratios else 0.0,
                "repulsion_ratio_last": float(ratios[-1]) if ratios else 0.0,
            }
        )
    return results


def train_splits(
    job: UCIJob, splits: list[UCISplit], ks: list[int], info: dict[str, int], checkpoint: Path | None = None
) -> list[dict[str, Any]]:
    """Train the job's method on the splits ``ks`` as one stack and return their test metrics.

    The splits (same number of training rows) are independent sets of ``particles``
    members, (G, n, D): each has its own data, minibatches, kernel and bandwidth (the
    update rules take stacks of sets), so one step pays the per-step overhead once for
    all of them. Split k's members are drawn from the prior with seed ``seed + k`` (as
    when splits ran one by one); the minibatches, Langevin noise and prior draws of the
    whole stack come from one stream seeded with ``seed`` and checkpointed with it.
    """
    sizes = {s.x_train.shape[0] for s in splits}
    if len(sizes) != 1:
        raise ValueError(f"splits {ks} have different training sizes {sorted(sizes)}; stacks need one")
    posterior = uci_posterior(job, splits[0], info["n_hidden"])
    init = torch.stack([posterior.sample_prior(job.particles, torch.Generator().manual_seed(job.seed + k)) for k in ks])
    generator = torch.Generator().manual_seed(job.seed)
    n_train = splits[0].x_train.shape[0]
    steps = _steps(job, n_train, info["n_epochs"])
    settings = train_settings(
        job, steps, lr_decay=job.lr_decay, lr_decay_steps=job.lr_decay_steps or _steps_per_epoch(job, n_train)
    )
    x = torch.stack([s.x_train for s in splits])
    y = torch.stack([s.y_train for s in splits])

    def progress(step: int, params: Tensor) -> dict[str, float]:
        with torch.no_grad():
            mean = posterior.predict(params, x).squeeze(-1).mean(-2)  # (G, N)
            rmse = (mean - y).pow(2).mean(-1).sqrt()
        return {"train_rmse_std_units_mean": float(rmse.mean())}

    # anchored members are anchored at their prior draw (Pearce et al., Alg. 1)
    # shuffled epochs (Pearce et al. trained with Keras' shuffled fit), lr decayed per epoch
    state = fit_particles(
        job,
        posterior,
        init,
        settings,
        generator,
        next_batch=EpochSampler(x, y, job.batch_size),
        checkpoint=checkpoint,
        on_log=progress,
        checkpoint_key=job.key("splits", ks),
    )
    return _split_results(posterior, state, ks, splits, steps)


def _saved_splits(out: Path, key: str, ks: list[int]) -> dict[int, dict[str, Any]]:
    """:func:`run_uci`'s split results saved before under ``key`` (others set aside)."""
    done: dict[int, dict[str, Any]] = {}
    for k in ks:
        saved = load_keyed_json(
            out.parent / f"split{k}.json",
            key,
            log,
            then=f"training split {k} again",
            what="split result",
            required=("metrics",),
        )
        if saved is not None:
            done[k] = saved["metrics"]
    return done


def _summary(job: UCIJob, results: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`run_uci`'s output: the job, the split results, each metric per split, mean and s.e."""
    summary: dict[str, Any] = {"job": job.to_spec(), "splits": results}
    for name in METRICS:
        values = np.array([r.get(name, math.nan) for r in results], dtype=np.float64)
        summary[name] = values.tolist()
        summary[f"{name}_mean"] = float(values.mean())
        summary[f"{name}_se"] = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else float("nan")
    return summary


def run_uci(job: UCIJob | Mapping[str, Any], out: Path, checkpoint: Path | None = None) -> None:
    """Train one method on the first ``splits`` (default all) splits of one UCI dataset
    (``job``: a :class:`repens.jobs.job.UCIJob` or its spec).

    The splits train as one stack (:func:`train_splits`), checkpointed as one; each
    split's result is then written to ``<out dir>/split<K>.json`` with the job's key. A
    rerun of the same settings reuses the split results when all of them are there, and
    otherwise trains the stack again from its checkpoint (so a job killed between two
    split files ends as an uninterrupted one would). Split results made under other
    settings are set aside (``<name>.stale``).

    Writes ``out`` (JSON): each of :data:`METRICS` per split and their ``*_mean`` and
    ``*_se`` (standard error ``sd / sqrt(K)``, ``ddof = 1``) over splits, plus the job.
    """
    job = UCIJob.of(job)  # a missing setting fails here, before any data is read
    folder = UCI_FOLDERS.get(job.dataset)
    if folder is None:
        raise ValueError(f"unknown UCI dataset {job.dataset!r}; known: {sorted(UCI_FOLDERS)}")
    root = data_root(job)
    info = dataset_info(root, folder)  # raises naming missing files before any training
    n = info["n_splits"] if job.splits is None else min(job.splits, info["n_splits"])
    out.parent.mkdir(parents=True, exist_ok=True)
    key = job.key()  # what decides a split's result (not where the data live)
    log.info(
        "job %s; data %s/%s, %d of %d splits", json.dumps(job.spec, sort_keys=True), root, folder, n, info["n_splits"]
    )
    ks = list(range(n))
    done = _saved_splits(out, key, ks)
    if len(done) == n:
        log.info("all %d splits done before (%s/split*.json), reused", n, out.parent)
        results = [done[k] for k in ks]
    else:
        splits = [load_split(root, folder, k) for k in ks]
        results = train_splits(job, splits, ks, info, checkpoint)
        for metrics in results:
            k = metrics["split"]
            log.info("split %d: test rmse %.4g, nll %.4g", k, metrics["rmse"], metrics["nll"])
            write_json_atomic(out.parent / f"split{k}.json", {"key": key, "metrics": metrics}, indent=1, sort_keys=True)
        remove_checkpoints(checkpoint)
    summary = _summary(job, results)
    write_json_atomic(out, summary, indent=1, sort_keys=True)
    log.info(
        "wrote %s: rmse %.4g +- %.2g, nll %.4g +- %.2g",
        out,
        summary["rmse_mean"],
        summary["rmse_se"],
        summary["nll_mean"],
        summary["nll_se"],
    )
