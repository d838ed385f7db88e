"""Table 1 (Appendix G.4 / G.5): ensembles on FashionMNIST (OOD: MNIST) and CIFAR-10
(OOD: SVHN).

One job trains one method's particles with one seed and writes

* ``predictions.npz``: the ensemble's predictive probabilities and model disagreement
  on the test and OOD inputs (``test_probs`` (N, C), ``test_md`` (N,), ``test_labels``,
  ``ood_probs``, ``ood_md``), the mutual information (``test_mi``, ``ood_mi``), enough
  to recompute every metric, and ``job``;
* ``metrics.json`` (the path ``out``): the Table 1 metrics
  (:func:`repens.evaluation.predictive.classification_metrics`), the job, the device, wall time
  and training speed.

The metrics file is written last and atomically: it exists only for a finished run.
Hyper-deep ensembles (Wenzel et al. 2020, as in G.4/G.5) first run a random search of
the L2 strength on a validation split carved from the training set (all candidates
trained at once as one stack), then train the ensemble with the five best strengths.
The search's result (``l2_search.json``) and checkpoint (``<checkpoint>.search``) carry
the job's key (:func:`repens.core.jobkey.job_key`): a rerun under other settings (say, a
new ``l2_range``) sets them aside and searches again.

Several seeds of one method train as one stack with :func:`run_image_stack`
(``python -m repens train-stack``): each seed its own random stream, minibatches, kernel
and optimizer block, so on one CPU thread each seed's files are bit for bit its one-seed
job's; one step then launches the kernels of all seeds at once (on a GPU, a small job's
step is bound by kernel launches, ``benchmarks/estimate_gpu_block.py``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.func import vmap

from repens.core.atomic import save_npz_atomic, write_json_atomic
from repens.core.jobkey import load_keyed_json
from repens.data.images import load_arrays
from repens.evaluation.predictive import classification_metrics, ensemble_summary, member_std, mutual_information
from repens.jobs.job import ImageJob, SpecError
from repens.models.networks import build_model
from repens.models.particles import StackedModel
from repens.models.posteriors import Batch, NetworkPosterior
from repens.training.fitting import Streams, fit_particles, train_settings

log = logging.getLogger("repens.image")

__all__ = [
    "run_image",
    "run_image_stack",
    "stack_settings",
    "stack_checkpoint",
    "SeedStackModel",
    "SeedStreams",
    "SeedStackPosterior",
    "NOT_STACKABLE",
    "ImageData",
    "load_image_data",
    "resolve_device",
    "predict_summary",
    "progress_figures",
    "predict_details",
    "member_scores",
    "l2_search",
]


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


def set_matmul_precision(precision: str) -> bool:
    """Set this process's float32 matmuls and cuDNN convolutions together: ``highest`` turns
    TF32 off for both, ``high`` allows it for both (as PyTorch 1.7-1.11 did by default on
    Ampere GPUs, the authors' code's torch 1.8.1). Returns whether TF32 is now allowed. No
    effect on a CPU."""
    if precision not in ("high", "highest"):
        raise ValueError(f"matmul_precision: expected 'high' or 'highest', got {precision!r}")
    allow = precision == "high"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    return allow


def apply_matmul_precision(job: ImageJob) -> None:
    """The job's ``matmul_precision`` (:func:`set_matmul_precision`); unset leaves torch's
    defaults (TF32 matmuls off, TF32 convolutions on)."""
    if job.matmul_precision is None:
        return
    allow = set_matmul_precision(job.matmul_precision)
    log.info(
        "float32 matmuls and convolutions: TF32 %s (matmul_precision %s)",
        "allowed" if allow else "off",
        job.matmul_precision,
    )


def _to_float(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> Tensor:
    out = torch.from_numpy(x).float().div_(255.0)
    return (out - torch.from_numpy(mean).view(1, -1, 1, 1)) / torch.from_numpy(std).view(1, -1, 1, 1)


def load_image_data(
    train_file: Path | str, ood_file: Path | str, normalize: str = "unit", device: torch.device | str = "cpu"
) -> ImageData:
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
        _to_float(x_train, mean, std).to(device),
        torch.from_numpy(y_train).to(device),
        _to_float(x_test, mean, std).to(device),
        torch.from_numpy(y_test).to(device),
        _to_float(x_ood, mean, std).to(device),
    )


@torch.no_grad()
def predict_details(
    model: StackedModel, params: Tensor, x: Tensor, batch: int = 1000
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Predictive probabilities (N, C), model disagreement (N,), mutual information (N,)
    and the members' class-averaged sd (N,, the released code's MD) on ``x``, in chunks so
    memory stays ``n x batch x C``."""
    probs, md, mi, sd = [], [], [], []
    for i in range(0, x.shape[0], batch):
        member = torch.softmax(model(params, x[i : i + batch]).double(), dim=-1)
        p, d = ensemble_summary(member)
        probs.append(p)
        md.append(d)
        mi.append(mutual_information(member))
        sd.append(member_std(member))
    return torch.cat(probs).cpu(), torch.cat(md).cpu(), torch.cat(mi).cpu(), torch.cat(sd).cpu()


def predict_summary(model: StackedModel, params: Tensor, x: Tensor, batch: int = 1000) -> tuple[Tensor, Tensor]:
    """Predictive probabilities (N, C) and model disagreement (N,) on ``x``."""
    probs, md, _, _ = predict_details(model, params, x, batch)
    return probs, md


def progress_figures(
    model: StackedModel, params: Tensor, fit: tuple[Tensor, Tensor], monitor: tuple[Tensor, Tensor]
) -> dict[str, float]:
    """A progress line's figures: the ensemble's NLL and accuracy on ``fit`` (1000 fixed
    training images: the objective's data term) and on ``monitor`` (1000 held-out ones),
    and ``monitor_md``, the particles' mean model disagreement (Appendix B) on the held-out
    images: how far apart they are in function space."""
    figures = {}
    for name, (x, y) in (("train", fit), ("monitor", monitor)):
        probs, md = predict_summary(model, params, x)
        labels = y.cpu()
        p_true = probs.gather(-1, labels.view(-1, 1)).clamp_min(1e-12)
        figures[f"{name}_nll"] = float(-p_true.log().mean())
        figures[f"{name}_acc"] = float((probs.argmax(-1) == labels).double().mean())
    figures["monitor_md"] = float(md.mean())
    return figures


@torch.no_grad()
def member_scores(
    model: StackedModel, params: Tensor, x: Tensor, y: Tensor, batch: int = 1000
) -> tuple[Tensor, Tensor]:
    """Every particle on its own, all at once in chunks of ``batch`` inputs: its mean NLL
    ``-log p(y|x, w_i)`` (probabilities floored at 1e-12) and its accuracy, each (n,)."""
    logp, hits = [], []
    for i in range(0, x.shape[0], batch):
        probs = torch.softmax(model(params, x[i : i + batch]).double(), dim=-1)  # (n, b, C)
        labels = y[i : i + batch].view(1, -1, 1).expand(probs.shape[0], -1, 1)
        logp.append(probs.gather(-1, labels).squeeze(-1).clamp_min(1e-12).log().cpu())
        hits.append((probs.argmax(-1) == labels.squeeze(-1)).double().cpu())
    return -torch.cat(logp, dim=1).mean(1), torch.cat(hits, dim=1).mean(1)


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
    if job.init == "torch":  # the released code's FashionMNIST particles (exp_fmnist.py)
        return model.sample_torch_default(n, generator)
    return model.sample_he(n, generator)  # G.5: He initialisation


def _train_stack(job, data_x, data_y, model, prior_std, init, generator, steps, checkpoint, monitor, device):
    """Train one stack of particles with the job's update rule; returns the final params."""
    posterior = NetworkPosterior(model, "categorical", num_train=data_x.shape[0], prior_std=prior_std)
    fit = (data_x[:1000], data_y[:1000])

    def progress(step: int, params: Tensor) -> dict[str, float]:  # noqa: ARG001
        return progress_figures(model, params, fit, monitor)

    return fit_particles(
        job,
        posterior,
        init.to(device),
        train_settings(job, steps),
        generator,
        next_batch=_batches(data_x, data_y, job.batch_size),
        checkpoint=checkpoint,
        on_log=progress,
    ).params


def _split_validation(data: ImageData, fraction: float, generator: torch.Generator):
    n = data.x_train.shape[0]
    n_val = max(1, int(round(fraction * n)))
    perm = torch.randperm(n, generator=generator, device=generator.device).to(data.x_train.device)
    val, fit = perm[:n_val], perm[n_val:]
    return (data.x_train[fit], data.y_train[fit]), (data.x_train[val], data.y_train[val])


def l2_search(
    job: ImageJob,
    data: ImageData,
    model: StackedModel,
    generator: torch.Generator,
    checkpoint: Path | None,
    device: torch.device,
) -> dict[str, Any]:
    """Random search of the L2 strength (prior precision ``lambda``, log-uniform in
    ``l2_range``): every candidate is one member of a stack trained at once on the
    training set minus a validation split; ranked by validation NLL (``search_rank: nll``)
    or accuracy (``accuracy``)."""
    low, high = job.l2_range
    trials, top = job.search_trials, job.search_top
    (fit_x, fit_y), (val_x, val_y) = _split_validation(data, job.val_fraction, generator)
    strengths = torch.exp(
        math.log(low)
        + (math.log(high) - math.log(low))
        * torch.rand(trials, generator=generator, dtype=torch.float64, device=generator.device)
    )
    prior_std = (1.0 / strengths.sqrt()).float().view(-1, 1).to(device)
    init = _initial(model, job, trials, prior_std, generator)
    steps = job.steps if job.search_steps is None else job.search_steps
    params = _train_stack(
        job.replace(rule="ensemble", space="weight"),
        fit_x,
        fit_y,
        model,
        prior_std.to(device),
        init,
        generator,
        steps,
        checkpoint,
        (val_x[:1000], val_y[:1000]),
        device,
    )
    nll, accuracy = (t.tolist() for t in member_scores(model, params, val_x, val_y))
    # lowest NLL first; or highest accuracy first, ties broken by the lower NLL
    keys = (nll,) if job.search_rank == "nll" else (nll, [-a for a in accuracy])
    order = np.lexsort(keys)[:top]
    result = {
        "strengths": strengths.tolist(),
        "val_nll": nll,
        "val_accuracy": accuracy,
        "rank": job.search_rank,
        "best": [float(strengths[i]) for i in order],
    }
    log.info(
        "L2 search: best strengths by validation %s %s (validation NLL %s, accuracy %s)",
        job.search_rank,
        [f"{s:.3g}" for s in result["best"]],
        [f"{nll[i]:.4f}" for i in order],
        [f"{accuracy[i]:.4f}" for i in order],
    )
    return result


def _search_prior(
    job: ImageJob,
    data: ImageData,
    model: StackedModel,
    generator: torch.Generator,
    out: Path,
    checkpoint: Path | None,
    device: torch.device,
) -> Tensor:
    """A hyper-deep ensemble's prior sds (n, 1): the L2 search's best strengths, members
    cycling through them. The search runs (:func:`l2_search`) unless ``l2_search.json``
    beside ``out`` holds one of the job's key, whose end state of the random stream is then
    put back into ``generator``, so the ensemble draws what it drew after that search."""
    search_file = out.with_name("l2_search.json")
    key = job.key()
    search = load_keyed_json(search_file, key, log, then="running the search again", what="L2 search")
    if search is not None:
        generator.set_state(torch.tensor(search["generator_state"], dtype=torch.uint8))
        log.info("L2 search: reusing %s (same settings)", search_file)
    else:
        search_ckpt = None if checkpoint is None else checkpoint.with_name(checkpoint.name + ".search")
        search = l2_search(job, data, model, generator, search_ckpt, device)
        search["generator_state"] = generator.get_state().tolist()
        search["key"] = key
        write_json_atomic(search_file, search, indent=2, sort_keys=True)
        if search_ckpt is not None and search_ckpt.exists():
            search_ckpt.unlink()
    best = torch.tensor(search["best"], dtype=torch.float64)
    return (1.0 / best[torch.arange(job.particles) % best.numel()].sqrt()).float().view(-1, 1).to(device)


def _write_results(
    job: ImageJob,
    out: Path,
    model: StackedModel,
    params: Tensor,
    data: ImageData,
    device: torch.device,
    train_seconds: float,
    started: float,
    **extra: Any,
) -> None:
    """``predictions.npz`` beside ``out``, then the metrics file ``out`` (last, atomically)
    for the trained particles ``params`` (n, D) of ``job``; ``extra``: further record fields."""
    test_probs, test_md, test_mi, test_sd = predict_details(model, params, data.x_test)
    ood_probs, ood_md, ood_mi, ood_sd = predict_details(model, params, data.x_ood)
    labels = data.y_test.cpu()
    metrics = classification_metrics(test_probs, test_md, labels, ood_probs, ood_md, test_mi, ood_mi, test_sd, ood_sd)
    save_npz_atomic(
        out.with_name("predictions.npz"),
        test_probs=test_probs.float().numpy(),
        test_md=test_md.float().numpy(),
        test_labels=labels.numpy(),
        ood_probs=ood_probs.float().numpy(),
        ood_md=ood_md.float().numpy(),
        test_mi=test_mi.float().numpy(),
        ood_mi=ood_mi.float().numpy(),
        test_sd=test_sd.float().numpy(),
        ood_sd=ood_sd.float().numpy(),
        job=np.array(json.dumps(job.spec, sort_keys=True)),
    )
    record = {
        "metrics": metrics,
        "job": job.to_spec(),
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "train_seconds_this_run": train_seconds,
        "wall_seconds_this_run": time.time() - started,
        **extra,
    }
    write_json_atomic(out, record, indent=2, sort_keys=True)
    log.info("metrics %s", json.dumps(metrics, sort_keys=True))
    log.info("wrote %s", out)


def _check_inputs(inputs: Mapping[str, str] | None) -> None:
    if not inputs or "train" not in inputs or "ood" not in inputs:
        raise ValueError("image jobs need inputs 'train' and 'ood' (the prepared .npz files)")


def run_image(
    job: ImageJob | Mapping[str, Any],
    out: Path,
    checkpoint: Path | None = None,
    *,
    inputs: dict[str, str] | None = None,
    device: str = "auto",
) -> None:
    """Train one method with one seed on an image data set and write predictions and metrics.

    Args:
        job: the job (:class:`repens.jobs.job.ImageJob`) or its spec (``repens.pipeline.config.resolve_job``).
        out: the metrics JSON; ``predictions.npz`` goes beside it.
        checkpoint: checkpoint file (a hyper-DE search uses ``<checkpoint>.search``).
        inputs: ``train`` (the data set's ``.npz``) and ``ood`` (the OOD set's).
        device: ``auto``, ``cpu`` or ``cuda``.
    """
    job = ImageJob.of(job)
    _check_inputs(inputs)
    started = time.time()
    dev = resolve_device(device)
    apply_matmul_precision(job)
    seed = job.seed
    torch.manual_seed(seed)
    data = load_image_data(inputs["train"], inputs["ood"], job.normalize, dev)
    net = build_model(job, data.input_shape, data.num_classes).to(dev)
    model = StackedModel(net, chunk_size=job.chunk_size, input_shape=data.input_shape)
    # the run's one random stream lives on the training device: batches, prior draws and
    # Langevin noise are drawn where they are used, with no host-to-device copy per step
    generator = torch.Generator(device=dev).manual_seed(seed)
    log.info("job %s", json.dumps(job.spec, sort_keys=True))
    log.info("device %s; %d parameters per particle; %d training images", dev, model.dim, data.x_train.shape[0])
    n = job.particles
    prior_std: Any = job.prior_std
    out.parent.mkdir(parents=True, exist_ok=True)
    if job.l2_search:
        prior_std = _search_prior(job, data, model, generator, out, checkpoint, dev)
    init = _initial(model, job, n, prior_std, generator)
    prior = prior_std.to(dev) if isinstance(prior_std, Tensor) else prior_std
    monitor = (data.x_test[:1000], data.y_test[:1000])
    t0 = time.perf_counter()
    params = _train_stack(
        job, data.x_train, data.y_train, model, prior, init, generator, job.steps, checkpoint, monitor, dev
    )
    train_seconds = time.perf_counter() - t0
    _write_results(job, out, model, params, data, dev, train_seconds, started)
    if checkpoint is not None and checkpoint.exists():
        checkpoint.unlink()


# ------------------------------------------------------------------ seeds stacked
#: why a job's seeds do not train as one stack (they then run one by one, each as
#: :func:`run_image` runs it): the curvature step is measured at each seed's own initial
#: particles (the seeds would need learning rates of their own in one optimizer); a ResNet's
#: convolutions under a vmap over seeds take other kernels than the one-seed job's (measured:
#: metrics 1e-7 apart after 4 steps, where the MLP's are equal), and its steps are large
#: enough to fill a GPU on their own
NOT_STACKABLE = {
    "step_size: curvature": lambda job: job.step_size == "curvature",
    "model: resnet": lambda job: job.model == "resnet",
}


class SeedStackModel(StackedModel):
    """A :class:`StackedModel` that also takes a stack of seeds: params (G, n, D) with one
    input batch per seed (G, B, ...) gives outputs (G, n, B, ...). The image MLP (built with
    its ``input_shape``) runs on the MLP path, one batched GEMM per layer for all seeds; a
    network that is not an MLP (the ResNet) runs under a ``vmap`` over the seeds of
    the one-seed ``vmap`` over particles, which on the CPU computes every seed's outputs and
    their gradient bit for bit as the one-seed forward does
    (``tests/experiments/test_image_stack.py``); (n, D) params run as in the parent."""

    def forward(self, params: Tensor, x: Tensor) -> Tensor:
        if params.dim() == 2 or self.is_mlp:
            return super().forward(params, x)
        return vmap(lambda rows, inputs: StackedModel.forward(self, rows, inputs))(params, x)

    __call__ = forward


class SeedStreams:
    """The random streams of a stack of seeds, one :class:`torch.Generator` per seed, each
    seeded and drawn from exactly as the seed's one-seed job draws its run's stream
    (:func:`run_image`): per step its minibatch (:meth:`__call__`, the training loop's
    sampler), then any prior draws of the update (:class:`SeedStackPosterior`), then any
    Langevin noise (:meth:`add_langevin_noise`). The streams are independent, so drawing
    seed after seed keeps each seed's order. Their states are the sampler's state, which
    :func:`repens.training.train.train` checkpoints and resumes with the run."""

    def __init__(self, generators: list[torch.Generator], x: Tensor, y: Tensor, batch_size: int) -> None:
        self.generators = list(generators)
        self.x, self.y = x, y
        self.size = min(int(batch_size), x.shape[0])

    def __len__(self) -> int:
        return len(self.generators)

    def _check_not_capturing(self) -> None:
        """The minibatch is drawn outside the captured step (its indices feed the static
        batch the graph reads); a draw here inside a capture would be replayed forever."""
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("a seed stack's minibatch cannot be drawn inside a CUDA graph")

    def __call__(self, generator: torch.Generator) -> Batch:  # noqa: ARG002 (the stack's own streams)
        """Every seed's minibatch, as :func:`_batches` draws it from the seed's stream:
        (G, B, ...) images and (G, B) labels."""
        self._check_not_capturing()
        n = self.x.shape[0]
        idx = torch.stack([torch.randint(n, (self.size,), generator=g, device=g.device) for g in self.generators])
        idx = idx.to(self.x.device)
        return Batch(self.x[idx], self.y[idx])

    def prior_draws(self, model: StackedModel, per_seed: int, std: float | Tensor) -> Tensor:
        """``per_seed`` prior draws from each seed's stream, (G * per_seed, D), as
        :meth:`repens.models.posteriors.NetworkPosterior.sample_prior` draws them (``std``: a
        number, or one (n, 1) or (D,) tensor per seed, (G, ...)); inside a captured step too
        (every seed's stream is registered with the graph: :func:`_stack_update`)."""
        rows = []
        for g, generator in enumerate(self.generators):
            scale = std[g] if isinstance(std, Tensor) and std.dim() == 3 else std
            if isinstance(scale, Tensor):
                scale = scale.to(generator.device)
            rows.append(model.sample_gaussian(per_seed, scale, generator))
        return torch.cat(rows)

    def standard_normal(self, params: Tensor, generator: torch.Generator) -> Tensor:  # noqa: ARG002
        """Each seed's standard normal draws (n, D) from its stream, (G, n, D), as
        :func:`repens.methods.rule.standard_normal` draws them for a one-seed job (a Langevin
        rule's noise); inside a captured step too, as :meth:`prior_draws`."""
        return torch.stack(
            [torch.randn(params.shape[1:], generator=g, dtype=params.dtype, device=g.device) for g in self.generators]
        )

    def state_dict(self) -> dict:
        return {"generators": [g.get_state() for g in self.generators]}

    def load_state_dict(self, state: dict) -> None:
        for g, saved in zip(self.generators, state["generators"], strict=True):
            g.set_state(saved)


@dataclass(frozen=True)
class SeedStackPosterior(NetworkPosterior):
    """The posterior of a stack of seeds (params (G, n, D)): the one-seed posterior, whose
    prior draws come ``m`` per seed from each seed's stream (:meth:`SeedStreams.prior_draws`)
    instead of ``G m`` from one."""

    streams: SeedStreams | None = None

    def sample_prior(self, n: int, generator: torch.Generator) -> Tensor:  # noqa: ARG002
        sets = len(self.streams)
        if n % sets:
            raise ValueError(f"{n} prior draws for a stack of {sets} seeds")
        return self.streams.prior_draws(self.model, n // sets, self.prior_std)


def _fit_seed_stack(
    job: ImageJob,
    posterior: SeedStackPosterior,
    init: Tensor,
    streams: SeedStreams,
    checkpoint: Path | None,
    checkpoint_key: str,
    on_log,
    device: torch.device,
) -> Tensor:
    """:func:`repens.training.fitting.fit_particles` for a stack of seeds (params (G, n, D)):
    the seeds' own streams for every draw (minibatches, prior draws, a Langevin rule's
    noise, each registered with a captured step), each seed's block stepped by the optimizer
    as a tensor of its own. The loop's own generator is never drawn from (checked at the
    end: a draw there would have broken the equality with the one-seed jobs)."""
    unused = torch.Generator(device=device).manual_seed(0)
    before = unused.get_state()
    state = fit_particles(
        job,
        posterior,
        init,
        train_settings(job, job.steps),
        unused,
        next_batch=streams,
        checkpoint=checkpoint,
        on_log=on_log,
        checkpoint_key=checkpoint_key,
        streams=Streams(tuple(streams.generators), streams.standard_normal, blocks=True),
    )
    if not torch.equal(unused.get_state(), before):
        raise RuntimeError("a step drew from the loop's generator, not from the seeds' streams")
    return state.params


def stack_settings(jobs: list[ImageJob]) -> None:
    """Refuse jobs that are not one method's seeds: every setting but ``seed`` equal, the
    seeds distinct (a :class:`repens.jobs.job.SpecError` naming the first difference)."""
    first = jobs[0]
    names = sorted(first.setting_names() - {"seed"})
    for job in jobs[1:]:
        for name in names:
            if getattr(job, name) != getattr(first, name):
                raise SpecError(
                    f"the stacked jobs differ in {name!r} ({getattr(first, name)!r} for seed "
                    f"{first.seed}, {getattr(job, name)!r} for seed {job.seed}); a stack takes one "
                    "method's jobs on one data set that differ only in seed"
                )
    seeds = [job.seed for job in jobs]
    if len(set(seeds)) != len(seeds):
        raise SpecError(f"the stacked jobs repeat a seed: {seeds}")


def stack_checkpoint(outs: list[Path]) -> Path:
    """The default checkpoint of a stack: ``<first out>.stack.ckpt`` (keyed by the seeds)."""
    return outs[0].with_name(outs[0].name + ".stack.ckpt")


def run_image_stack(
    jobs: list[ImageJob | Mapping[str, Any]],
    outs: list[Path],
    checkpoint: Path | None = None,
    *,
    inputs: dict[str, str] | None = None,
    device: str = "auto",
) -> None:
    """Train one method on several seeds of one image data set as one stack, and write
    each seed's ``predictions.npz`` and metrics file ``outs[k]`` as :func:`run_image`
    writes them for ``jobs[k]`` (its spec; ``seed_stack`` in the record names the stack).

    Each seed is a set of the stack (params (G, n, D)) with its own stream, seeded and drawn
    as its one-seed job draws (:class:`SeedStreams`: initial particles, minibatches, prior
    draws, Langevin noise), its own minibatch and its own kernel: repulsion acts within a
    seed's particles only. On the CPU every seed's particles and metrics equal its one-seed
    job's bit for bit (``tests/experiments/test_image_stack.py``). A hyper-deep ensemble's
    searches run seed after seed, each as :func:`run_image` runs it (``l2_search.json``
    beside the seed's output, its checkpoint ``<out>.ckpt.search``); its ensembles stack.
    A job of :data:`NOT_STACKABLE` runs its seeds one by one with :func:`run_image`
    (checkpoints ``<out>.ckpt``).

    Args:
        jobs: the seeds' jobs (:class:`repens.jobs.job.ImageJob` or specs), equal but for ``seed``.
        outs: each seed's metrics JSON, in the order of ``jobs``.
        checkpoint: the stack's checkpoint (default :func:`stack_checkpoint`), keyed by the
            job and the seeds: a stack of other seeds or settings sets it aside.
        inputs, device: as :func:`run_image`.
    """
    jobs = [ImageJob.of(job) for job in jobs]
    outs = [Path(out) for out in outs]
    if not jobs or len(jobs) != len(outs):
        raise ValueError(f"a stack needs one output per job, got {len(jobs)} jobs and {len(outs)} outputs")
    stack_settings(jobs)
    _check_inputs(inputs)
    first = jobs[0]
    refused = [why for why, applies in NOT_STACKABLE.items() if applies(first)]
    if refused or len(jobs) == 1:
        if refused:
            log.info("%s: the seeds run one by one (%s)", first.method, "; ".join(refused))
        for job, out in zip(jobs, outs):
            run_image(job, out, out.with_name(out.name + ".ckpt"), inputs=inputs, device=device)
        return
    _run_stacked(jobs, outs, stack_checkpoint(outs) if checkpoint is None else checkpoint, inputs, device)


def _run_stacked(jobs: list[ImageJob], outs: list[Path], checkpoint: Path, inputs: dict[str, str], device: str) -> None:
    """:func:`run_image_stack` for stackable jobs: the seeds' set-up as :func:`run_image`'s,
    one training of the stack, each seed's results."""
    started = time.time()
    first, seeds = jobs[0], [job.seed for job in jobs]
    dev = resolve_device(device)
    apply_matmul_precision(first)
    torch.manual_seed(first.seed)
    data = load_image_data(inputs["train"], inputs["ood"], first.normalize, dev)
    net = build_model(first, data.input_shape, data.num_classes).to(dev)
    model = SeedStackModel(net, chunk_size=first.chunk_size, input_shape=data.input_shape)
    log.info("seed stack %s of job %s", seeds, json.dumps(first.spec, sort_keys=True))
    log.info(
        "device %s; %d seeds x %d particles of %d parameters; %d training images",
        dev,
        len(jobs),
        first.particles,
        model.dim,
        data.x_train.shape[0],
    )
    generators, inits, priors = [], [], []
    for job, out in zip(jobs, outs):
        out.parent.mkdir(parents=True, exist_ok=True)
        generator = torch.Generator(device=dev).manual_seed(job.seed)  # as run_image seeds its stream
        prior_std: Any = job.prior_std
        if job.l2_search:
            prior_std = _search_prior(job, data, model, generator, out, out.with_name(out.name + ".ckpt"), dev)
        inits.append(_initial(model, job, job.particles, prior_std, generator))
        priors.append(prior_std)
        generators.append(generator)
    prior = torch.stack(priors).to(dev) if isinstance(priors[0], Tensor) else priors[0]
    streams = SeedStreams(generators, data.x_train, data.y_train, first.batch_size)
    posterior = SeedStackPosterior(
        model, "categorical", num_train=data.x_train.shape[0], prior_std=prior, streams=streams
    )
    t0 = time.perf_counter()
    params = _fit_seed_stack(
        first,
        posterior,
        torch.stack(inits).to(dev),
        streams,
        checkpoint,
        first.key("seed-stack", seeds),
        _stack_progress(model, data, len(jobs)),
        dev,
    )
    train_seconds = time.perf_counter() - t0
    stack = {"seeds": seeds, "train_seconds": train_seconds}
    for g, (job, out) in enumerate(zip(jobs, outs)):
        _write_results(job, out, model, params[g], data, dev, train_seconds / len(jobs), started, seed_stack=stack)
    if checkpoint.exists():
        checkpoint.unlink()


def _stack_progress(model: StackedModel, data: ImageData, sets: int):
    """The progress figures of :func:`_train_stack` for each seed, averaged over the seeds."""
    fit = (data.x_train[:1000], data.y_train[:1000])
    monitor = (data.x_test[:1000], data.y_test[:1000])

    def progress(step: int, params: Tensor) -> dict[str, float]:  # noqa: ARG001
        each = [progress_figures(model, params[g], fit, monitor) for g in range(sets)]
        return {name: sum(f[name] for f in each) / sets for name in each[0]}

    return progress
