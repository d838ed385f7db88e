"""Synthetic target densities of Appendix G.1 and Appendix F.

Each target has an exact sampler (for metrics) and known moments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

__all__ = ["Target", "Gaussian", "Funnel", "TARGETS", "make_target"]


class Target(Protocol):
    dim: int

    def log_prob(self, x: Tensor) -> Tensor: ...

    def sample(self, n: int, generator: torch.Generator) -> Tensor: ...

    def moments(self) -> tuple[Tensor, Tensor]: ...


@dataclass(frozen=True)
class Gaussian:
    """Multivariate normal N(mean, cov); G.1 uses mean (-0.6871, 0.8010)."""

    mean: tuple[float, ...] = (-0.6871, 0.8010)
    cov: tuple[tuple[float, ...], ...] = ((1.130, 0.826), (0.826, 3.389))
    dim: int = field(init=False, default=2)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dim", len(self.mean))

    def _dist(self, dtype: torch.dtype) -> torch.distributions.MultivariateNormal:
        return torch.distributions.MultivariateNormal(
            torch.tensor(self.mean, dtype=dtype), torch.tensor(self.cov, dtype=dtype)
        )

    def log_prob(self, x: Tensor) -> Tensor:
        return self._dist(x.dtype).log_prob(x)

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        mean, cov = self.moments()
        chol = torch.linalg.cholesky(cov)
        z = torch.randn(n, self.dim, generator=generator, dtype=torch.float64)
        return mean + z @ chol.T

    def moments(self) -> tuple[Tensor, Tensor]:
        return torch.tensor(self.mean, dtype=torch.float64), torch.tensor(self.cov, dtype=torch.float64)


@dataclass(frozen=True)
class Funnel:
    """Neal's funnel p(x, y) = N(y | 0, 3^2) N(x | 0, exp(y/2)^2) (Appendix F).

    Standard deviations as in Neal (2003): ``y`` has sd 3 and ``x`` has sd
    ``exp(y / 2)``. Columns are (x, y). Exact moments: E = 0, Var y = 9,
    Var x = E[exp(y)] = exp(4.5), Cov(x, y) = 0.
    """

    y_std: float = 3.0
    dim: int = 2

    def log_prob(self, xy: Tensor) -> Tensor:
        x, y = xy[..., 0], xy[..., 1]
        log_py = -0.5 * (y / self.y_std) ** 2 - math.log(self.y_std) - 0.5 * math.log(2 * math.pi)
        log_px = -0.5 * x**2 * torch.exp(-y) - 0.5 * y - 0.5 * math.log(2 * math.pi)
        return log_py + log_px

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        y = self.y_std * torch.randn(n, generator=generator, dtype=torch.float64)
        x = torch.exp(y / 2) * torch.randn(n, generator=generator, dtype=torch.float64)
        return torch.stack([x, y], dim=-1)

    def moments(self) -> tuple[Tensor, Tensor]:
        var_x = math.exp(self.y_std**2 / 2)
        cov = torch.tensor([[var_x, 0.0], [0.0, self.y_std**2]], dtype=torch.float64)
        return torch.zeros(2, dtype=torch.float64), cov


TARGETS: dict[str, type] = {"gaussian": Gaussian, "funnel": Funnel}


def make_target(name: str, **options) -> Target:
    """Build a target by name (``gaussian`` or ``funnel``)."""
    try:
        cls = TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; known: {sorted(TARGETS)}") from None
    return cls(**options)
