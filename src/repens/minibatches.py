"""Minibatch samplers drawing from a run's random stream (so a checkpointed generator
resumes the same batches)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from repens.posteriors import Batch

__all__ = ["batch_sampler", "stacked_batch_sampler"]


def batch_sampler(data: Any, batch_size: int):
    """Minibatches of ``batch_size`` distinct training points, drawn from the run's generator."""
    n = data.x_train.shape[0]
    size = min(int(batch_size), n)

    def next_batch(generator: torch.Generator) -> Batch:
        idx = torch.randperm(n, generator=generator)[:size]
        return Batch(data.x_train[idx], data.y_train[idx])

    return next_batch


def stacked_batch_sampler(x: Tensor, y: Tensor, batch_size: int):
    """Minibatches for a stack of splits (G, N, d), (G, N): each split its own ``batch_size``
    distinct rows, drawn split after split from the run's generator (a stack of one split
    draws exactly what one split's run drew before stacking; ``randperm`` per split
    measured 3-5x faster than one ``argsort`` of (G, N) uniforms)."""
    sets, n = y.shape
    size = min(int(batch_size), n)
    rows = torch.arange(sets).unsqueeze(-1)

    def next_batch(generator: torch.Generator) -> Batch:
        idx = torch.stack([torch.randperm(n, generator=generator)[:size] for _ in range(sets)])
        return Batch(x[rows, idx], y[rows, idx])

    return next_batch
