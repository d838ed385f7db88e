"""Table 1 (Appendix G.4 / G.5): ensembles on FashionMNIST (OOD: MNIST) and CIFAR-10
(OOD: SVHN).

One job trains one method's particles with one seed and writes

* ``predictions.npz``: the ensemble's predictive probabilities and model disagreement
  on the test and OOD inputs (``test_probs`` (N, C), ``test_md`` (N,), ``test_labels``,
  ``ood_probs``, ``ood_md``), the mutual information (``test_mi``, ``ood_mi``), enough
  to recompute every metric, and ``job``;
* ``metrics.json`` (the path ``out``): the Table 1 metrics
  (:func:`repens.evaluation.classification_metrics`), the job, the device, wall time
  and training speed.

The metrics file is written last and atomically: it exists only for a finished run.
Hyper-deep ensembles (Wenzel et al. 2020, as in G.4/G.5) first run a random search of
the L2 strength on a validation split carved from the training set (all candidates
trained at once as one stack), then train the ensemble with the five best strengths.
The search's result (``l2_search.json``) and checkpoint (``<checkpoint>.search``) carry
the job's key (:func:`repens.jobkey.job_key`): a rerun under other settings (say, a
new ``l2_range``) sets them aside and searches again.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor

from repens.atomic import save_npz_atomic, write_json_atomic
from repens.data.images import load_arrays
from repens.evaluation import classification_metrics, ensemble_summary, mutual_information
from repens.fitting import fit_particles, train_settings
from repens.job import ImageJob
from repens.jobkey import load_keyed_json
from repens.models import build_model
from repens.particles import StackedModel
from repens.posteriors import Batch, NetworkPosterior

log = logging.getLogger("repens.image")

__all__ = ["run_image", "ImageData", "load_image_data", "resolve_device", "predict_summary", "predict_details", "member_nll", "l2_search"]


def resolve_device(name: str = "auto") -> torch.device:
    """``auto``: CUDA when available, else CPU; ``cuda`` fails clearly without a GPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but torch sees no CUDA device; use device: auto or cpu")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {name!r}; use auto, cpu or cuda")
    return torch.device(name)


@dataclass
class ImageData:
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    x_ood: Tensor
    num_classes: int = 10

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def _to_float(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> Tensor:
    out = torch.from_numpy(x).float().div_(255.0)
    return (out - torch.from_numpy(mean).view(1, -1, 1, 1)) / torch.from_numpy(std).view(1, -1, 1, 1)


def load_image_data(train_file: Path | str, ood_file: Path | str, normalize: str = "unit",
                    device: torch.device | str = "cpu") -> ImageData:
    """In-distribution train/test and OOD test images as float tensors on ``device``.

    ``normalize``: ``unit`` scales pixels to [0, 1] (FashionMNIST); ``standard`` also
    standardises each channel with the training set's mean and sd (CIFAR-10), and the
    OOD images get the same transform.
    """
    x_train, y_train = load_arrays(train_file, "train")
    x_test, y_test = load_arrays(train_file, "test")
    x_ood, _ = load_arrays(ood_file, "test")
    if x_ood.shape[1:] != x_train.shape[1:]:
        raise ValueError(f"OOD images {x_ood.shape[1:]} differ in shape from training images {x_train.shape[1:]}")
    channels = x_train.shape[1]
    if normalize == "unit":
        mean, std = np.zeros(channels, np.float32), np.ones(channels, np.float32)
    elif normalize == "standard":
        scaled = x_train.astype(np.float64) / 255.0
        mean = scaled.mean(axis=(0, 2, 3)).astype(np.float32)
        std = scaled.std(axis=(0, 2, 3)).astype(np.float32)
    else:
        raise ValueError(f"unknown normalize {normalize!r}; use 'unit' or 'standard'")
    return ImageData(
        _to_float(x_train, mean, std).to(device), torch.from_numpy(y_train).to(device),
        _to_float(x_test, mean, std).to(device), torch.from_numpy(y_test).to(device),
        _to_float(x_ood, mean, std).to(device),
    )


@torch.no_grad()
def predict_details(model: StackedModel, params: Tensor, x: Tensor, batch: int = 1000) -> tuple[Tensor, Tensor, Tensor]:
    """Predictive probabilities (N, C), model disagreement (N,) and mutual information (N,)
    on ``x``, in chunks so memory stays ``n x batch x C``."""
    probs, md, mi = [], [], []
    for i in range(0, x.shape[0], batch):
        member = torch.softmax(model(params, x[i : i + batch]).double(), dim=-1)
        p, d = ensemble_summary(member)
        probs.append(p)
        md.append(d)
        mi.append(mutual_information(member))
    return torch.cat(probs).cpu(), torch.cat(md).cpu(), torch.cat(mi).cpu()


def predict_summary(model: StackedModel, params: Tensor, x: Tensor, batch: int = 1000) -> tuple[Tensor, Tensor]:
    """Predictive probabilities (N, C) and model disagreement (N,) on ``x``."""
    probs, md, _ = predict_details(model, params, x, batch)
    return probs, md


@torch.no_grad()
def member_nll(model: StackedModel, params: Tensor, x: Tensor, y: Tensor, batch: int = 1000) -> Tensor:
    """Mean NLL ``-log p(y|x, w_i)`` of every particle on its own, (n,), all particles at
    once in chunks of ``batch`` inputs (probabilities floored at 1e-12)."""
    logp = []
    for i in range(0, x.shape[0], batch):
        probs = torch.softmax(model(params, x[i : i + batch]).double(), dim=-1)  # (n, b, C)
        labels = y[i : i + batch].view(1, -1, 1).expand(probs.shape[0], -1, 1)
        logp.append(probs.gather(-1, labels).squeeze(-1).clamp_min(1e-12).log().cpu())
    return -torch.cat(logp, dim=1).mean(1)


def _batches(x: Tensor, y: Tensor, batch_size: int):
    n = x.shape[0]
    size = min(int(batch_size), n)

    def next_batch(generator: torch.Generator) -> Batch:
        idx = torch.randint(n, (size,), generator=generator, device=generator.device).to(x.device)
        return Batch(x[idx], y[idx])

    return next_batch


def _initial(model: StackedModel, job: ImageJob, n: int, prior_std: Any, generator: torch.Generator) -> Tensor:
    if job.init == "prior":  # G.4: "initialized with random samples from the prior"
        return model.sample_gaussian(n, prior_std, generator)
    return model.sample_he(n, generator)  # G.5: He initialisation


def _train_stack(job, data_x, data_y, model, prior_std, init, generator, steps, checkpoint, monitor, device):
    """Train one stack of particles with the job's update rule; returns the final params."""
    posterior = NetworkPosterior(model, "categorical", num_train=data_x.shape[0], prior_std=prior_std)
    eval_x, eval_y = monitor
    fit_x, fit_y = data_x[:1000], data_y[:1000]

    def progress(step: int, params: Tensor) -> dict[str, float]:
        """Loss on 1000 fixed training images, accuracy and NLL on 1000 held-out ones."""
        figures = {}
        for name, x, y in (("train", fit_x, fit_y), ("monitor", eval_x, eval_y)):
            probs, _ = predict_summary(model, params, x)
            labels = y.cpu()
            p_true = probs.gather(-1, labels.view(-1, 1)).clamp_min(1e-12)
            figures[f"{name}_nll"] = float(-p_true.log().mean())
            figures[f"{name}_acc"] = float((probs.argmax(-1) == labels).double().mean())
        return figures

    return fit_particles(job, posterior, init.to(device), train_settings(job, steps), generator,
                         next_batch=_batches(data_x, data_y, job.batch_size),
                         checkpoint=checkpoint, on_log=progress).params


def _split_validation(data: ImageData, fraction: float, generator: torch.Generator):
    n = data.x_train.shape[0]
    n_val = max(1, int(round(fraction * n)))
    perm = torch.randperm(n, generator=generator, device=generator.device).to(data.x_train.device)
    val, fit = perm[:n_val], perm[n_val:]
    return (data.x_train[fit], data.y_train[fit]), (data.x_train[val], data.y_train[val])


def l2_search(job: ImageJob, data: ImageData, model: StackedModel, generator: torch.Generator,
              checkpoint: Path | None, device: torch.device) -> dict[str, Any]:
    """Random search of the L2 strength (prior precision ``lambda``, log-uniform in
    ``l2_range``): every candidate is one member of a stack trained at once on the
    training set minus a validation split; ranked by validation NLL."""
    low, high = job.l2_range
    trials, top = job.search_trials, job.search_top
    (fit_x, fit_y), (val_x, val_y) = _split_validation(data, job.val_fraction, generator)
    strengths = torch.exp(math.log(low) + (math.log(high) - math.log(low))
                          * torch.rand(trials, generator=generator, dtype=torch.float64, device=generator.device))
    prior_std = (1.0 / strengths.sqrt()).float().view(-1, 1).to(device)
    init = _initial(model, job, trials, prior_std, generator)
    steps = job.steps if job.search_steps is None else job.search_steps
    params = _train_stack(job.replace(rule="ensemble", space="weight"), fit_x, fit_y, model,
                          prior_std.to(device), init, generator, steps, checkpoint, (val_x[:1000], val_y[:1000]),
                          device)
    nll = member_nll(model, params, val_x, val_y).tolist()
    order = np.argsort(nll, kind="stable")[:top]
    result = {"strengths": strengths.tolist(), "val_nll": nll, "best": [float(strengths[i]) for i in order]}
    log.info("L2 search: best strengths %s (validation NLL %s)", ["%.3g" % s for s in result["best"]],
             ["%.4f" % nll[i] for i in order])
    return result


def run_image(job: ImageJob | Mapping[str, Any], out: Path, checkpoint: Path | None = None, *,
              inputs: dict[str, str] | None = None, device: str = "auto") -> None:
    """Train one method with one seed on an image data set and write predictions and metrics.

    Args:
        job: the job (:class:`repens.job.ImageJob`) or its spec (``repens.config.resolve_job``).
        out: the metrics JSON; ``predictions.npz`` goes beside it.
        checkpoint: checkpoint file (a hyper-DE search uses ``<checkpoint>.search``).
        inputs: ``train`` (the data set's ``.npz``) and ``ood`` (the OOD set's).
        device: ``auto``, ``cpu`` or ``cuda``.
    """
    job = ImageJob.of(job)
    if not inputs or "train" not in inputs or "ood" not in inputs:
        raise ValueError("image jobs need inputs 'train' and 'ood' (the prepared .npz files)")
    started = time.time()
    dev = resolve_device(device)
    seed = job.seed
    torch.manual_seed(seed)
    data = load_image_data(inputs["train"], inputs["ood"], job.normalize, dev)
    net = build_model(job, data.input_shape, data.num_classes).to(dev)
    model = StackedModel(net, chunk_size=job.chunk_size)
    # the run's one random stream lives on the training device: batches, prior draws and
    # Langevin noise are drawn where they are used, with no host-to-device copy per step
    generator = torch.Generator(device=dev).manual_seed(seed)
    log.info("job %s", json.dumps(job.spec, sort_keys=True))
    log.info("device %s; %d parameters per particle; %d training images", dev, model.dim, data.x_train.shape[0])
    n = job.particles
    prior_std: Any = job.prior_std
    out.parent.mkdir(parents=True, exist_ok=True)
    if job.l2_search:
        search_file = out.with_name("l2_search.json")
        key = job.key()
        search = load_keyed_json(search_file, key, log, then="running the search again", what="L2 search")
        if search is not None:
            generator.set_state(torch.tensor(search["generator_state"], dtype=torch.uint8))
            log.info("L2 search: reusing %s (same settings)", search_file)
        else:
            search_ckpt = None if checkpoint is None else checkpoint.with_name(checkpoint.name + ".search")
            search = l2_search(job, data, model, generator, search_ckpt, dev)
            search["generator_state"] = generator.get_state().tolist()
            search["key"] = key
            write_json_atomic(search_file, search, indent=2, sort_keys=True)
            if search_ckpt is not None and search_ckpt.exists():
                search_ckpt.unlink()
        best = torch.tensor(search["best"], dtype=torch.float64)
        prior_std = (1.0 / best[torch.arange(n) % best.numel()].sqrt()).float().view(-1, 1)
    init = _initial(model, job, n, prior_std, generator)
    prior = prior_std.to(dev) if isinstance(prior_std, Tensor) else prior_std
    monitor = (data.x_test[:1000], data.y_test[:1000])
    t0 = time.perf_counter()
    params = _train_stack(job, data.x_train, data.y_train, model, prior, init, generator, job.steps,
                          checkpoint, monitor, dev)
    train_seconds = time.perf_counter() - t0
    test_probs, test_md, test_mi = predict_details(model, params, data.x_test)
    ood_probs, ood_md, ood_mi = predict_details(model, params, data.x_ood)
    labels = data.y_test.cpu()
    metrics = classification_metrics(test_probs, test_md, labels, ood_probs, ood_md, test_mi, ood_mi)
    save_npz_atomic(out.with_name("predictions.npz"), test_probs=test_probs.float().numpy(),
                    test_md=test_md.float().numpy(), test_labels=labels.numpy(),
                    ood_probs=ood_probs.float().numpy(), ood_md=ood_md.float().numpy(),
                    test_mi=test_mi.float().numpy(), ood_mi=ood_mi.float().numpy(),
                    job=np.array(json.dumps(job.spec, sort_keys=True)))
    record = {
        "metrics": metrics,
        "job": job.to_spec(),
        "device": str(dev) if dev.type == "cpu" else torch.cuda.get_device_name(dev),
        "train_seconds_this_run": train_seconds,
        "wall_seconds_this_run": time.time() - started,
    }
    write_json_atomic(out, record, indent=2, sort_keys=True)
    if checkpoint is not None and checkpoint.exists():
        checkpoint.unlink()
    log.info("metrics %s", json.dumps(metrics, sort_keys=True))
    log.info("wrote %s", out)
