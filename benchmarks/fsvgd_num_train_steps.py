"""Where f-SVGD with its repulsion times N leaves f-SVGD: the two jobs of one seed side by
side, logged densely.

At the authors' code's protocol (softmax outputs), f-SVGD with the repulsion times N
(``fsvgd-code-num-train``, the code's ``--num_train``) ends 2.6 points above f-SVGD
(``fsvgd-code-protocol``) at seeds 38 and 39, and its training NLL is lower already at step
2,500, although the training logs put its repulsion at 1e-14 of the drift and, after Adam's
per-coordinate scaling, below 1e-4 of the step at 39 of their 40 points (every 2,500 steps).
The question: does the repulsion act at steps the logs do not show, or does a negligible
difference grow?

Both jobs start from the same particles and draw the same batches (the pipeline's job,
``resolve_job`` at the paper's scale, made by ``fsvgd_output_scores.start`` and trained by
``fit_particles``). Every ``--every`` steps
the training loop's own diagnostics give, for each job, ||repulsion|| / ||drift|| before Adam
and after Adam's scaling (``repulsion=`` / ``repulsion_adam=`` of the pipeline's progress
line); this script adds, on a fixed batch of 256 training images, each ensemble's NLL and the
two runs' distance: the mean over particles of ||theta_N - theta_1|| / ||theta_1|| and the
mean absolute difference of the members' probabilities. It prints one line per logged step
and, at the end, the steps where the ratio after Adam exceeded ``--above``.

    python benchmarks/fsvgd_num_train_steps.py --steps 2500 --every 10 --params-every 100 --seed 39
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fsvgd_output_scores import start  # noqa: E402  (the job's posterior and particles, as the pipeline makes them)

from repens.experiments.image import _batches, load_image_data  # noqa: E402
from repens.jobs.job import ImageJob  # noqa: E402
from repens.models.posteriors import Batch  # noqa: E402
from repens.pipeline.budget import load_config  # noqa: E402
from repens.pipeline.config import resolve_job  # noqa: E402
from repens.training.fitting import fit_particles, train_settings  # noqa: E402

PROGRESS = re.compile(r"step (\d+)/\d+ .*?repulsion=(\S+)(?: repulsion_adam=(\S+))?")


class Progress(logging.Handler):
    """The training loop's progress lines: step -> (ratio before Adam, after Adam's scaling)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.ratios: dict[int, tuple[float, float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        found = PROGRESS.search(record.getMessage())
        if found:
            after = float(found.group(3)) if found.group(3) else float("nan")
            self.ratios[int(found.group(1))] = (float(found.group(2)), after)


def train(job: ImageJob, data, probe: Batch, every: int, params_every: int) -> tuple[dict, dict]:
    """Train ``job`` as the pipeline does; returns {step: (particles or None, members'
    probabilities on ``probe``)} and {step: (ratio before Adam, after)} for every ``every``
    steps (the particles every ``params_every``: 20 MB each)."""
    posterior, init, generator = start(job, data)
    states: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def on_log(step: int, params: torch.Tensor) -> dict:
        with torch.no_grad():
            states[step] = (
                params.clone() if step % params_every == 0 else None,
                posterior.predict(params, probe.x).softmax(-1),
            )
        return {}

    progress = Progress()
    logger = logging.getLogger("repens.train")
    logger.addHandler(progress)
    logger.setLevel(logging.INFO)
    t0 = time.perf_counter()
    try:
        settings = dataclasses.replace(train_settings(job), log_every=every)
        fit_particles(
            job,
            posterior,
            init,
            settings,
            generator,
            _batches(data.x_train, data.y_train, job.batch_size),
            on_log=on_log,
        )
    finally:
        logger.removeHandler(progress)
    print(f"{job.method}: {job.steps} steps in {time.perf_counter() - t0:.0f} s", flush=True)
    if not progress.ratios:
        raise SystemExit(f"{job.method}: no 'step ... repulsion=' progress line parsed: has its format changed?")
    return states, progress.ratios


def nll(probs: torch.Tensor, y: torch.Tensor) -> float:
    return float(-probs.mean(0).gather(-1, y.view(-1, 1)).clamp_min(1e-12).log().mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--params-every", type=int, default=100, help="compare the particles every this many steps")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--above", type=float, default=1e-3, help="list the steps whose ratio after Adam exceeds this")
    ap.add_argument("--train", default=str(ROOT / "data/images/fashionmnist.npz"))
    ap.add_argument("--ood", default=str(ROOT / "data/images/mnist.npz"))
    ap.add_argument(
        "--methods",
        nargs=2,
        default=["fsvgd-code-num-train", "fsvgd-code-protocol"],
        help="the job and its control, at the paper's scale",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(ROOT / "config.yaml", "paper")
    specs = [resolve_job(config, "image", "fashionmnist", m, args.seed) for m in args.methods]
    for spec in specs:
        print(f"job: {json.dumps(spec, sort_keys=True)}; {args.steps} steps; torch {torch.__version__}", flush=True)
    data = load_image_data(args.train, args.ood, specs[0]["normalize"])
    probe = Batch(data.x_train[:256], data.y_train[:256])
    (run, ratios), (control, control_ratios) = (
        train(ImageJob.of({**spec, "steps": args.steps}), data, probe, args.every, args.params_every) for spec in specs
    )
    print("step  ratio_N  ratio_N_adam  ratio_1  ratio_1_adam  |dtheta|/|theta|  |dp|  nll_N  nll_1")
    for step in sorted(set(run) & set(control)):
        (p_n, q_n), (p_1, q_1) = run[step], control[step]
        rel = float(((p_n - p_1).norm(dim=-1) / p_1.norm(dim=-1)).mean()) if p_n is not None else float("nan")
        r_n, r_n_adam = ratios.get(step, (float("nan"),) * 2)
        r_1, r_1_adam = control_ratios.get(step, (float("nan"),) * 2)
        print(
            f"{step:5d}  {r_n:.3g}  {r_n_adam:.3g}  {r_1:.3g}  {r_1_adam:.3g}  {rel:.3g}  "
            f"{float((q_n - q_1).abs().mean()):.3g}  {nll(q_n, probe.y):.4f}  {nll(q_1, probe.y):.4f}",
            flush=True,
        )
    for name, found in ((args.methods[0], ratios), (args.methods[1], control_ratios)):
        high = [(s, a) for s, (_, a) in sorted(found.items()) if a > args.above]
        print(
            f"{name}: {len(high)} of {len(found)} logged steps with the ratio after Adam above {args.above:g}: "
            + ", ".join(f"{s} ({a:.3g})" for s, a in high),
            flush=True,
        )


if __name__ == "__main__":
    main()
