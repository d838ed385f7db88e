"""The BNN toy problems of Appendix G.2 (1-D regression) and G.3 (2-D classification).

Both are generated deterministically from a seed, so a method's job and the HMC
reference of the same seed see the same training points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "ToyData",
    "regression_1d",
    "classification_2d",
    "ring_means",
    "classification_grid",
    "TOY_DATASETS",
    "make_toy",
    "REGRESSION_CLUSTERS",
    "REGRESSION_NOISE_STD",
]

#: the two input intervals of G.2, 45 points each
REGRESSION_CLUSTERS = ((1.5, 2.5), (4.5, 6.0))
#: eps ~ N(0, 0.25): variance 0.25, standard deviation 0.5
REGRESSION_NOISE_STD = 0.5


@dataclass(frozen=True)
class ToyData:
    """Training points and the inputs on which predictions are made and plotted."""

    x_train: Tensor  # (N, d_in)
    y_train: Tensor  # (N,) float targets or integer labels
    x_test: Tensor  # (T, d_in): the test grid
    task: str  # "regression" | "classification"
    num_outputs: int


def regression_1d(seed: int, points_per_cluster: int = 45, num_test: int = 100) -> ToyData:
    """G.2: x from U(1.5, 2.5) and U(4.5, 6.0), y = x sin x + eps, eps ~ N(0, 0.25);
    test inputs: ``num_test`` evenly spaced points on [0, 7]."""
    g = torch.Generator().manual_seed(int(seed))
    xs = [lo + (hi - lo) * torch.rand(points_per_cluster, generator=g) for lo, hi in REGRESSION_CLUSTERS]
    x = torch.cat(xs)
    y = x * torch.sin(x) + REGRESSION_NOISE_STD * torch.randn(x.shape, generator=g)
    x_test = torch.linspace(0.0, 7.0, num_test)
    return ToyData(x.unsqueeze(-1), y, x_test.unsqueeze(-1), "regression", 1)


def ring_means(num_classes: int = 5, radius: float = 5.0) -> Tensor:
    """Means equidistant on a circle of ``radius`` (the first on the positive x axis)."""
    angles = 2 * math.pi * torch.arange(num_classes) / num_classes
    return radius * torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)


def classification_grid(size: int = 60, half_width: float = 10.0) -> Tensor:
    """``size`` x ``size`` grid on [-half_width, half_width]^2, rows ordered y-major
    (``points.reshape(size, size, 2)[i, j] = (xs[j], ys[i])``, the layout of imshow)."""
    axis = torch.linspace(-half_width, half_width, size)
    yy, xx = torch.meshgrid(axis, axis, indexing="ij")
    return torch.stack([xx, yy], dim=-1).reshape(-1, 2)


def classification_2d(seed: int, num_points: int = 200, num_classes: int = 5, grid_size: int = 60) -> ToyData:
    """G.3: ``num_points`` points, an equal share from each of ``num_classes`` unit-covariance
    Gaussians with means on a ring of radius 5; the label is the component."""
    if num_points % num_classes:
        raise ValueError(f"num_points={num_points} is not a multiple of num_classes={num_classes}")
    g = torch.Generator().manual_seed(int(seed))
    labels = torch.arange(num_classes).repeat_interleave(num_points // num_classes)
    x = ring_means(num_classes)[labels] + torch.randn(num_points, 2, generator=g)
    return ToyData(x, labels, classification_grid(grid_size), "classification", num_classes)


TOY_DATASETS = {"regression": regression_1d, "classification": classification_2d}


def make_toy(name: str, seed: int) -> ToyData:
    try:
        return TOY_DATASETS[name](seed)
    except KeyError:
        raise ValueError(f"unknown toy dataset {name!r}; known: {sorted(TOY_DATASETS)}") from None
