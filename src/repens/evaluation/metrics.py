"""Sample-quality metrics for particle approximations of a known target.

All functions accept numpy arrays or (CPU) torch tensors, compute in float64
and return plain Python floats or numpy arrays.

Conventions chosen here (they matter when comparing numbers):

* **Covariance of a particle set** is the *population* covariance (``ddof=0``,
  divide by ``n``). A particle method represents the target by the empirical
  measure ``(1/n) sum_i delta_{x_i}``; the particles are not i.i.d. draws, so the
  unbiased-estimator correction ``n / (n - 1)`` has no justification and we
  report the covariance of that measure itself. ``ddof`` can be overridden.
* **Energy distance** follows Szekely & Rizzo's definition
  ``D^2(P, Q) = 2 E||X - Y|| - E||X - X'|| - E||Y - Y'||`` and is computed as
  the V-statistic, i.e. the exact energy distance between the two empirical
  measures (within-sample means include the zero diagonal). It is therefore
  always >= 0 and exactly 0 for identical samples. It is the *squared* form
  (no square root); for 1-D point masses at ``a`` and ``b`` it equals ``2|a - b|``.
* **MMD** is the biased (V-statistic) estimate of ``MMD^2`` with the Gaussian
  kernel ``k(x, y) = exp(-||x - y||^2 / (2 sigma^2))`` where ``sigma`` is the
  ``bandwidth`` argument (a length scale). Note that ``repens.models.kernels.RBF`` uses
  ``exp(-d^2 / h)``; the two agree for ``h = 2 sigma^2``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = [
    "as_array",
    "mean_error",
    "sample_covariance",
    "covariance_relative_errors",
    "mean_pairwise_distance",
    "energy_distance",
    "mmd_rbf",
]

# Upper bound on the number of entries of one block of the distance matrix.
_BLOCK_ENTRIES = 2_000_000
_ROW_BLOCK = 1000
_EXACT = "donot_use_mm_for_euclid_dist"


def as_array(x: Any) -> np.ndarray:
    """Convert a numpy array, torch tensor or nested sequence to a float64 array.

    Args:
        x: Array-like; a torch tensor is detached and moved to the CPU.

    Returns:
        A float64 numpy array (a 1-D input of samples stays 1-D).
    """
    if hasattr(x, "detach"):  # torch.Tensor without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _samples(x: Any, name: str = "samples") -> np.ndarray:
    """Samples as an (n, d) float64 array; a 1-D input is treated as n scalars."""
    arr = as_array(x)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"{name} must have shape (n, d) with n >= 1, got {arr.shape}")
    return arr


def mean_error(samples: Any, mean: Any) -> float:
    """Euclidean norm of the difference between the sample mean and the true mean.

    Args:
        samples: (n, d) samples or particles.
        mean: (d,) true mean.

    Returns:
        ``|| (1/n) sum_i x_i - mean ||_2``.
    """
    x = _samples(samples)
    mu = as_array(mean).reshape(-1)
    if mu.shape[0] != x.shape[1]:
        raise ValueError(f"mean has dimension {mu.shape[0]}, samples have {x.shape[1]}")
    return float(np.linalg.norm(x.mean(axis=0) - mu))


def sample_covariance(samples: Any, ddof: int = 0) -> np.ndarray:
    """Covariance matrix of a sample set (rows are samples).

    Args:
        samples: (n, d) samples or particles.
        ddof: Delta degrees of freedom; ``0`` (default) gives the covariance of the
            empirical measure ``(1/n) sum_i delta_{x_i}`` (see module docstring).

    Returns:
        (d, d) covariance matrix.
    """
    x = _samples(samples)
    return np.atleast_2d(np.cov(x, rowvar=False, ddof=ddof))


def covariance_relative_errors(samples: Any, cov: Any, ddof: int = 0) -> np.ndarray:
    """Entry-wise error of the sample covariance against the true covariance.

    For entries whose true value is nonzero the error is relative,
    ``|hat_ij - cov_ij| / |cov_ij|``; for entries whose true value is exactly zero
    (e.g. the funnel's ``Cov(x, y)``) a relative error is undefined and the
    *absolute* error ``|hat_ij - cov_ij|`` is returned instead. Callers that need
    to tell the two apart can test ``cov == 0``.

    Args:
        samples: (n, d) samples or particles.
        cov: (d, d) true covariance.
        ddof: Passed to :func:`sample_covariance` (default 0, population covariance).

    Returns:
        (d, d) array of errors (relative where ``cov != 0``, absolute where ``cov == 0``).
    """
    true = np.atleast_2d(as_array(cov))
    hat = sample_covariance(samples, ddof=ddof)
    if hat.shape != true.shape:
        raise ValueError(f"cov has shape {true.shape}, sample covariance has {hat.shape}")
    diff = np.abs(hat - true)
    scale = np.where(true != 0.0, np.abs(true), 1.0)
    return diff / scale


def mean_pairwise_distance(x: Any, y: Any = None) -> float:
    """Mean Euclidean distance over all pairs, ``(1/(n m)) sum_ij ||x_i - y_j||``.

    Computed in blocks (``torch.cdist`` with exact differences, not the
    matrix-product shortcut) so that large sample sets (e.g. 20000 x 20000) fit
    in memory. With ``y=None`` the self term ``(1/n^2) sum_ij ||x_i - x_j||`` is
    computed (diagonal zeros included, V-statistic) using the symmetry of the
    distance matrix, which halves the cost.

    Args:
        x: (n, d) samples.
        y: (m, d) samples, or ``None`` for ``y = x``.

    Returns:
        The mean pairwise distance.
    """
    a = torch.tensor(_samples(x, "x"))  # a copy: inputs may be read-only arrays
    b = a if y is None else torch.tensor(_samples(y, "y"))
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"x has dimension {a.shape[1]}, y has {b.shape[1]}")
    block = _ROW_BLOCK
    total = 0.0
    for i in range(0, a.shape[0], block):
        rows = a[i : i + block]
        if y is None:
            # diagonal block once, blocks right of it twice (symmetry)
            total += float(torch.cdist(rows, rows, compute_mode=_EXACT).sum())
            if i + block < b.shape[0]:
                total += 2.0 * _blocked_sum(rows, b[i + block :])
        else:
            total += _blocked_sum(rows, b)
    return total / (a.shape[0] * b.shape[0])


def _blocked_sum(rows: torch.Tensor, b: torch.Tensor) -> float:
    """Sum of ``||r - b_j||`` over ``rows`` and columns of ``b``, in column blocks."""
    cols = max(1, _BLOCK_ENTRIES // max(1, rows.shape[0]))
    return sum(float(torch.cdist(rows, b[j : j + cols], compute_mode=_EXACT).sum()) for j in range(0, b.shape[0], cols))


def energy_distance(x: Any, y: Any) -> float:
    """Energy distance (Szekely's squared form, V-statistic) between two sample sets.

    ``D^2 = 2 E||X - Y|| - E||X - X'|| - E||Y - Y'||`` with every expectation
    replaced by the mean over all pairs of the empirical measures (diagonal
    included), i.e. the exact energy distance between ``(1/n) sum delta_{x_i}``
    and ``(1/m) sum delta_{y_j}``. It is >= 0 (up to rounding; clipped at 0),
    zero iff the two empirical measures coincide, and for 1-D point masses at
    ``a`` and ``b`` equals ``2 |a - b|``.

    Args:
        x: (n, d) samples (a 1-D array is n scalars).
        y: (m, d) samples.

    Returns:
        The energy distance ``D^2`` (not its square root).
    """
    a = _samples(x, "x")
    b = _samples(y, "y")
    value = 2.0 * mean_pairwise_distance(a, b) - mean_pairwise_distance(a) - mean_pairwise_distance(b)
    return max(value, 0.0)


def mmd_rbf(x: Any, y: Any, bandwidth: float) -> float:
    """Biased (V-statistic) squared MMD with a fixed Gaussian kernel.

    ``MMD^2 = mean_ij k(x_i, x_j) + mean_ij k(y_i, y_j) - 2 mean_ij k(x_i, y_j)``
    with ``k(u, v) = exp(-||u - v||^2 / (2 bandwidth^2))``; diagonal terms are
    included, so the value is >= 0 and exactly 0 for identical sets.

    Args:
        x: (n, d) samples.
        y: (m, d) samples.
        bandwidth: Kernel length scale ``sigma > 0``.

    Returns:
        The biased estimate of ``MMD^2``.
    """
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth}")
    a = _samples(x, "x")
    b = _samples(y, "y")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"x has dimension {a.shape[1]}, y has {b.shape[1]}")

    def mean_kernel(u: np.ndarray, v: np.ndarray) -> float:
        diff = u[:, None, :] - v[None, :, :]
        sq = np.einsum("ijk,ijk->ij", diff, diff)
        return float(np.exp(-sq / (2.0 * bandwidth**2)).mean())

    value = mean_kernel(a, a) + mean_kernel(b, b) - 2.0 * mean_kernel(a, b)
    return max(value, 0.0)
