"""Minibatch samplers drawing from a run's random stream (so a checkpointed generator
resumes the same batches). Indices are drawn on the generator's device (a GPU run's stream
lives on the GPU: no host round-trip a step) and used on the data's."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from repens.models.posteriors import Batch

__all__ = ["batch_sampler", "stacked_batch_sampler", "EpochSampler", "gather_rows"]


def gather_rows(x: Tensor, y: Tensor, idx: Tensor) -> Batch:
    """Rows ``idx`` (G, B) of each split of a stack ``x`` (G, N, d), ``y`` (G, N): the same
    values as ``x[arange(G)[:, None], idx]``, through one ``index_select`` on the flattened
    rows (measured 2.4x faster than advanced indexing for 20 splits x 64 rows x 13 inputs)."""
    sets, n = y.shape
    flat = (idx + torch.arange(0, sets * n, n, device=idx.device).unsqueeze(-1)).reshape(-1)
    xb = x.reshape(sets * n, *x.shape[2:]).index_select(0, flat)
    return Batch(xb.view(sets, idx.shape[1], *x.shape[2:]), y.reshape(-1).index_select(0, flat).view(idx.shape))


def batch_sampler(data: Any, batch_size: int):
    """Minibatches of ``batch_size`` distinct training points, drawn from the run's generator."""
    n = data.x_train.shape[0]
    size = min(int(batch_size), n)

    def next_batch(generator: torch.Generator) -> Batch:
        idx = torch.randperm(n, generator=generator, device=generator.device)[:size].to(data.x_train.device)
        return Batch(data.x_train[idx], data.y_train[idx])

    return next_batch


def stacked_batch_sampler(x: Tensor, y: Tensor, batch_size: int):
    """Minibatches for a stack of splits (G, N, d), (G, N): each split its own ``batch_size``
    distinct rows, drawn split after split from the run's generator (a stack of one split
    draws exactly what one split's run drew before stacking; ``randperm`` per split
    measured 3-5x faster than one ``argsort`` of (G, N) uniforms)."""
    sets, n = y.shape
    size = min(int(batch_size), n)

    def next_batch(generator: torch.Generator) -> Batch:
        idx = torch.stack([torch.randperm(n, generator=generator, device=generator.device)[:size] for _ in range(sets)])
        return gather_rows(x, y, idx.to(x.device))

    return next_batch


class EpochSampler:
    """Minibatches in epochs for a stack of splits (G, N, d), (G, N) or one set (N, d), (N,):
    at each epoch's start every split draws its own permutation of its N rows (split after
    split, from the run's generator); the epoch's batches are consecutive slices of it,
    ``ceil(N / B)`` of them, the last one smaller when ``B`` does not divide ``N`` (every
    row seen once an epoch, as in Keras' shuffled ``fit``, which Pearce et al. 2020 used).

    The position in the epoch and its permutation are state: :meth:`state_dict` and
    :meth:`load_state_dict` let the training loop checkpoint them with the generator, so a
    resumed run draws exactly the batches of an uninterrupted one.
    """

    def __init__(self, x: Tensor, y: Tensor, batch_size: int) -> None:
        self.x, self.y = x, y
        self.stacked = y.dim() == 2
        self.n = y.shape[-1]
        self.batch_size = min(int(batch_size), self.n)
        self.order: Tensor | None = None
        self.position = 0

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.n // self.batch_size)

    def __call__(self, generator: torch.Generator) -> Batch:
        if self.order is None or self.position >= self.n:
            sets = self.y.shape[0] if self.stacked else 1
            self.order = torch.stack(
                [torch.randperm(self.n, generator=generator, device=generator.device) for _ in range(sets)]
            ).to(self.y.device)
            self.position = 0
        idx = self.order[:, self.position : self.position + self.batch_size]
        self.position += self.batch_size
        if self.stacked:
            return gather_rows(self.x, self.y, idx)
        return Batch(self.x[idx[0]], self.y[idx[0]])

    def state_dict(self) -> dict:
        return {"order": None if self.order is None else self.order.clone(), "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.order, self.position = state["order"], int(state["position"])
