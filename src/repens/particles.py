"""A set of particles as one stacked parameter tensor.

Every method in this package works on a tensor ``params`` of shape (n, D): row i
is particle i. For a 2-D sampling problem D = 2 and the row *is* the sample; for a
network, :class:`StackedModel` maps each row to the module's named parameters
(views into the row, no copies) and evaluates all n networks at once with
``torch.func.functional_call`` under ``torch.func.vmap``, never a Python loop over
members.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

__all__ = ["StackedModel", "ParamSlot"]


@dataclass(frozen=True)
class ParamSlot:
    name: str
    shape: tuple[int, ...]
    start: int
    stop: int


class StackedModel:
    """Functional, vectorised view of ``module`` for n stacked parameter rows.

    Args:
        module: a template network; its own parameter values are never used by
            :meth:`forward` (they are replaced by the rows of ``params``).
        chunk_size: optional ``vmap`` chunk size to bound memory on large models.
    """

    def __init__(self, module: nn.Module, chunk_size: int | None = None) -> None:
        self.module = module
        self.chunk_size = chunk_size
        slots, start = [], 0
        for name, p in module.named_parameters():
            slots.append(ParamSlot(name, tuple(p.shape), start, start + p.numel()))
            start += p.numel()
        self.slots: tuple[ParamSlot, ...] = tuple(slots)
        self.dim = start
        self.buffers = dict(module.named_buffers())

    def unflatten(self, row: Tensor) -> dict[str, Tensor]:
        """Named parameter views into one row (D,) of the stacked tensor."""
        return {s.name: row[s.start : s.stop].view(s.shape) for s in self.slots}

    def flatten(self, module: nn.Module | None = None) -> Tensor:
        """The parameters of ``module`` (default: the template) as one row (D,)."""
        module = self.module if module is None else module
        return torch.cat([p.detach().reshape(-1) for p in module.parameters()])

    def forward(self, params: Tensor, x: Tensor) -> Tensor:
        """Outputs of all particles on the same inputs: (n, D), (B, ...) -> (n, B, ...)."""

        def one(row: Tensor) -> Tensor:
            return functional_call(self.module, {**self.unflatten(row), **self.buffers}, (x,))

        return vmap(one, chunk_size=self.chunk_size)(params)

    __call__ = forward

    def sample_gaussian(
        self, n: int, std: float, generator: torch.Generator, dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """``n`` rows drawn from N(0, std^2 I) (e.g. the prior)."""
        return std * torch.randn(n, self.dim, generator=generator, dtype=dtype)

    def sample_he(self, n: int, generator: torch.Generator, dtype: torch.dtype = torch.float32) -> Tensor:
        """``n`` rows with He (Kaiming-normal) weights and zero biases (He et al. 2015).

        1-D ``weight`` s (the affine scales of normalisation layers) start at one.
        """
        rows = torch.zeros(n, self.dim, dtype=dtype)
        for s in self.slots:
            if len(s.shape) < 2:
                if s.name.endswith("weight"):
                    rows[:, s.start : s.stop] = 1.0
                continue
            fan_in = math.prod(s.shape[1:])
            size = s.stop - s.start
            rows[:, s.start : s.stop] = math.sqrt(2.0 / fan_in) * torch.randn(
                n, size, generator=generator, dtype=dtype
            )
        return rows
