"""Appendix G.1: particles sampling a 2-D Gaussian and Neal's funnel."""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from repens.config import method_options
from repens.kernels import RBF
from repens.posteriors import TargetPosterior
from repens.targets import make_target
from repens.train import TrainSettings, TrainState, train
from repens.updates import StepContext, make_update

log = logging.getLogger("repens.synthetic")

__all__ = ["run_synthetic", "initial_particles", "kernel_from_job", "save_npz_atomic"]


def kernel_from_job(job: dict[str, Any]) -> RBF:
    """RBF kernel with the job's ``bandwidth``: ``"median"`` or a fixed ``h``."""
    bandwidth = job.get("bandwidth", "median")
    return RBF(None if bandwidth == "median" else float(bandwidth))


def initial_particles(job: dict[str, Any], generator: torch.Generator) -> torch.Tensor:
    """``particles`` draws from N(0, init_std^2 I) in float64."""
    return job["init_std"] * torch.randn(job["particles"], 2, generator=generator, dtype=torch.float64)


def save_npz_atomic(path: Path, **arrays: Any) -> None:
    """Write an ``.npz`` so that a reader never sees a partial file."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(buffer.getvalue())
    os.replace(tmp, path)


def run_synthetic(job: dict[str, Any], out: Path, checkpoint: Path | None = None) -> None:
    """Train one method on one synthetic target and save the particles to ``out`` (.npz).

    The file holds ``particles`` (n, 2), ``initial`` (n, 2) and ``job`` (the JSON spec,
    including the scale), so plots and tables never need the config.
    """
    generator = torch.Generator().manual_seed(int(job["seed"]))
    target = make_target(job["dataset"])
    init = initial_particles(job, generator)
    posterior = TargetPosterior(target)
    kernel = kernel_from_job(job)
    update = make_update(job["rule"], job.get("space", "weight"), **method_options(job))
    settings = TrainSettings(
        steps=int(job["steps"]),
        lr=float(job["lr"]),
        optimizer=job.get("optimizer", "adam"),
        log_every=int(job.get("log_every", max(1, int(job["steps"]) // 10))),
    )
    log.info("job %s", json.dumps(job, sort_keys=True))

    def progress(step: int, params: torch.Tensor) -> dict[str, float]:
        mean = params.mean(0)
        return {"mean_x": float(mean[0]), "mean_y": float(mean[1]),
                "log_p": float(target.log_prob(params).mean())}

    state = train(
        TrainState(init),
        update,
        lambda batch, anchors: StepContext(posterior, kernel, generator, batch, anchors),
        settings,
        generator,
        checkpoint=checkpoint,
        on_log=progress,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    save_npz_atomic(out, particles=state.params.numpy(), initial=init.numpy(),
                    job=np.array(json.dumps(job, sort_keys=True)))
    if checkpoint is not None and checkpoint.exists():
        checkpoint.unlink()
    log.info("wrote %s", out)
