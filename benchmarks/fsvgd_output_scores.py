"""f-SVGD at the authors' code's protocol on softmax outputs and on logits: does it fit, and
what drives its step.

The code-protocol f-SVGD row (softmax outputs, the released code's default) plateaus at a
training NLL of about 0.55 from step 2,500 on, where every other method fits. The hypothesis
this script measures: on probabilities the likelihood's score at the label is
``N/B / (p_y + 1e-15)``, unbounded as ``p_y -> 0``, and f-SVGD's driving term ``K score / n``
hands every particle the kernel-weighted *sum* of all particles' scores, so a few
(particle, example) entries where one particle is badly wrong can set every particle's step
(the fWGDs take each particle's own score and fit). On logits the score
``N/B (onehot - p)`` is bounded by N/B per entry.

Both runs start from the same particles (PyTorch's default initialisation, as the job does)
and draw the same batches; each is the pipeline's job (``resolve_job`` of
``fsvgd-code-protocol`` at the paper's scale) trained by ``fit_particles``, the logits run
differing in ``function_output`` alone. Every ``--every`` steps it prints, on a fixed batch
of 256 training images: the ensemble's NLL and accuracy there; the largest score entry in
units of N/B (at most about 1 on logits, ``1 / (p_y + 1e-15)`` on softmax); the fraction of
(particle, example) pairs whose probability of the label is below 1e-15; the share of the
score's L1 mass held by its largest 0.1 % of entries; the kernel's mean off-diagonal value
and its median bandwidth;
and, in weight space, the norm of the driving term's part from the other particles' scores
over the part from each particle's own (``K_ii = 1``). Pulled back through the softmax, a
particle's own score at the label is the logits' score ``N/B (onehot - p)`` times
``p_y / (p_y + 1e-15)``: the same where ``p_y >> 1e-15``, vanishing where ``p_y`` falls
below the code's guard, where the score itself is capped at ``1e15 N/B``.

It also prints the members' mean accuracy on that batch, the largest |logit| there and the
particles' mean weight norm: f-SVGD on logits degrades late in a full-length run, and these
say whether its members stay classifiers of their own or their logits grow without bound.
``--driving own`` is the control for that: the same f-SVGD job with the kernel in the
driving term replaced by the identity (``K = I``: each particle's step is its own score
``/ n``, pulled back; with ``K = I`` the kernel's gradient is zero too, and the repulsion
it removes is at most 1e-6 of the drift in every logged f-SVGD run), everything else equal.

    python benchmarks/fsvgd_output_scores.py --steps 2500 --every 250
    python benchmarks/fsvgd_output_scores.py --steps 7500 --every 500 --outputs logits --driving kernel own

``--checkpoint FILE`` trains nothing: it prints the figures for the particles a run of
``--method`` (seed ``--seed``) checkpointed, read with the pipeline's checks
(:func:`repens.core.jobkey.read_checkpoint`: checksum, tensors only, finite) and refused
unless its key is that job's.

    python benchmarks/fsvgd_output_scores.py --method fsvgd-code-logits \
        --checkpoint results/image/fashionmnist/fsvgd-code-logits/seed38/metrics.json.ckpt
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from repens.core.jobkey import read_checkpoint  # noqa: E402
from repens.experiments.image import _batches, _initial, load_image_data  # noqa: E402
from repens.jobs.job import ImageJob  # noqa: E402
from repens.methods.updates import StepContext, function_space  # noqa: E402
from repens.models.kernels import RBF  # noqa: E402
from repens.models.networks import build_model  # noqa: E402
from repens.models.particles import StackedModel  # noqa: E402
from repens.models.posteriors import Batch, NetworkPosterior  # noqa: E402
from repens.pipeline.budget import load_config  # noqa: E402
from repens.pipeline.config import resolve_job  # noqa: E402
from repens.training import fitting  # noqa: E402
from repens.training.fitting import fit_particles, train_settings  # noqa: E402
from repens.training.train import _state_key as state_key  # noqa: E402


def score_figures(posterior, params, batch, output, generator, shared: bool = True) -> dict[str, float]:
    """The figures above for particles ``params`` (n, D) on ``batch``, from the rule's own
    function-space quantities (:func:`repens.methods.updates.function_space`)."""
    ctx = StepContext(posterior=posterior, kernel=RBF(), generator=generator, batch=batch)
    flat, score, pull_back = function_space(params, ctx, {}, output)
    with torch.no_grad():
        logits = posterior.predict(params, batch.x)  # (n, B, C)
        members = logits.softmax(-1)
        label_probs = members.gather(-1, batch.y.view(1, -1, 1).expand(members.shape[0], -1, 1))
        member_acc = (members.argmax(-1) == batch.y).float().mean()
        probs = members.mean(0)
        nll = -probs.gather(-1, batch.y.view(-1, 1)).clamp_min(1e-12).log().mean()
        acc = (probs.argmax(-1) == batch.y).float().mean()
        gram, bandwidth = ctx.kernel.self_gram(flat)
        n = gram.shape[0]
        cross = gram - torch.eye(n, dtype=gram.dtype)
        absolute = score.abs().flatten()
        top = absolute.topk(max(1, absolute.numel() // 1000)).values
    figures = {
        "batch_nll": float(nll),
        "batch_acc": float(acc),
        "score_max/(N/B)": float(absolute.max() * batch.y.shape[0] / posterior.num_train),
        "p_y<1e-15": float((label_probs < 1e-15).float().mean()),
        "top0.1%_share": float(top.sum() / absolute.sum()),
        "kernel_offdiag": float(cross.sum() / (n * (n - 1))),
        "bandwidth": float(bandwidth),
        "member_acc": float(member_acc),
        "max|logit|": float(logits.abs().max()),
        "weight_norm": float(params.detach().norm(dim=-1).mean()),
    }
    if shared:  # f-SVGD: its driving term K score / n split into each particle's own score
        # (K_ii = 1) and the other particles' kernel-weighted scores, each pulled back to weights
        own, others = pull_back(score / n), pull_back(cross @ score / n)
        figures["others/own"] = float(others.norm() / own.norm())
    return figures


class OwnScoreKernel(RBF):
    """The median-bandwidth RBF kernel with its Gram matrix replaced by the identity: in
    f-SVGD's direction ``K (score - (2/h) xc) / n + (2/h) (K 1) xc / n`` this leaves
    ``score / n``, each particle's own score (the ``--driving own`` control)."""

    def self_gram(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gram, h = super().self_gram(x)
        return torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device).expand_as(gram), h


def start(job: ImageJob, data) -> tuple[NetworkPosterior, torch.Tensor, torch.Generator]:
    """``job``'s posterior, first particles and generator, made in the pipeline's order (the
    global seed, the network, the job's generator, the particles' draw from it)."""
    torch.manual_seed(job.seed)
    model = StackedModel(build_model(job, data.input_shape, data.num_classes), input_shape=data.input_shape)
    generator = torch.Generator().manual_seed(job.seed)
    init = _initial(model, job, job.particles, job.prior_std, generator)
    posterior = NetworkPosterior(model, "categorical", num_train=data.x_train.shape[0], prior_std=job.prior_std)
    return posterior, init, generator


def run(job: ImageJob, data, probe: Batch, every: int, driving: str = "kernel") -> None:
    """Train ``job`` as the pipeline does, printing :func:`score_figures` every ``every`` steps;
    ``driving="own"``: with f-SVGD's Gram matrix replaced by the identity (:class:`OwnScoreKernel`)."""
    posterior, init, generator = start(job, data)
    probe_stream = torch.Generator().manual_seed(0)  # the function prior's draws for the figures
    t0 = time.perf_counter()

    def on_log(step: int, params: torch.Tensor) -> dict:
        figures = score_figures(posterior, params, probe, job.function_output, probe_stream, job.rule == "svgd")
        shown = f"{job.method} " + " ".join(f"{k}={v:.4g}" for k, v in figures.items())
        elapsed = time.perf_counter() - t0
        print(f"{job.function_output:7s} {driving:6s} step {step:5d} ({elapsed:6.0f} s) {shown}", flush=True)
        return {}

    on_log(0, init)
    settings = dataclasses.replace(train_settings(job), log_every=every)
    batches = _batches(data.x_train, data.y_train, job.batch_size)
    kernel = fitting.kernel_from_job
    if driving == "own":
        fitting.kernel_from_job = lambda _job: OwnScoreKernel()
    try:
        fit_particles(job, posterior, init, settings, generator, batches, on_log=on_log)
    finally:
        fitting.kernel_from_job = kernel


def inspect(job: ImageJob, data, probe: Batch, path: Path) -> None:
    """Print :func:`score_figures` for the particles of ``job``'s checkpoint ``path``."""
    saved = read_checkpoint(path)
    if saved.get("key") != state_key(job.key(), train_settings(job), saved["params"]):
        raise SystemExit(f"{path}: its key is not job {job.method} seed {job.seed}'s")
    model = StackedModel(build_model(job, data.input_shape, data.num_classes), input_shape=data.input_shape)
    posterior = NetworkPosterior(model, "categorical", num_train=data.x_train.shape[0], prior_std=job.prior_std)
    stream = torch.Generator().manual_seed(0)
    figures = score_figures(posterior, saved["params"], probe, job.function_output, stream, job.rule == "svgd")
    shown = " ".join(f"{k}={v:.4g}" for k, v in figures.items())
    print(f"{job.function_output:7s} checkpoint step {saved['step']:5d} {job.method} {shown}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--every", type=int, default=250)
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--train", default=str(ROOT / "data/images/fashionmnist.npz"))
    ap.add_argument("--ood", default=str(ROOT / "data/images/mnist.npz"))
    ap.add_argument("--outputs", nargs="+", default=["softmax", "logits"])
    ap.add_argument(
        "--driving",
        nargs="+",
        default=["kernel"],
        choices=["kernel", "own"],
        help="f-SVGD's driving term: K score / n (the rule) or, as a control, each particle's own score / n",
    )
    ap.add_argument("--checkpoint", type=Path, help="a checkpoint of --method's run: its figures, no training")
    ap.add_argument("--method", default="fsvgd-code-protocol", help="a function-space rule's job at the paper's scale")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(ROOT / "config.yaml", "paper")
    spec = resolve_job(config, "image", "fashionmnist", args.method, args.seed)
    print(f"job: {json.dumps(spec, sort_keys=True)}; {args.steps} steps; torch {torch.__version__}")
    data = load_image_data(args.train, args.ood, spec["normalize"])
    probe = Batch(data.x_train[:256], data.y_train[:256])
    if args.checkpoint is not None:
        inspect(ImageJob.of(spec), data, probe, args.checkpoint)
        return
    for output in args.outputs:
        for driving in args.driving:
            job = ImageJob.of({**spec, "function_output": output, "steps": args.steps})
            run(job, data, probe, args.every, driving)


if __name__ == "__main__":
    main()
