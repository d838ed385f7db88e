"""Estimators of the score ``grad log rho`` of the particles' own density.

All three take samples ``x`` (n, d), or stacks of independent sample sets (..., n, d),
and return the estimated score at the samples
(KDE and SSGE also at other ``query`` points). Equation numbers refer to
D'Angelo & Fortuin (2021). Writing ``G_i = sum_j grad_{x_i} k(x_i, x_j)`` (the KDE
numerator) and ``K`` for the Gram matrix, the estimators are

* KDE  (Eq. 14):  ``g_i = G_i / sum_j K_ij``;
* SGE  (Eq. 16, Li & Turner 2018):  ``g = (K + eta I)^{-1} G``, because for a
  stationary kernel ``sum_k grad_{x_k} k(x_k, x_j) = -G_j``;
* SSGE (Eq. 17, Shi et al. 2018):  ``g(q) = k(q, X) U diag(lambda^-2) U^T G`` with
  ``(lambda, U)`` the top-J eigenpairs of ``K`` (``eigh``, as K is symmetric);
  at the samples and with all eigenvalues this is ``K^{-1} G``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from repens.models.kernels import RBF, gpu_path, kernel_grad_sum, set_matmul, squared_distances

__all__ = [
    "kde_score",
    "sge_score",
    "ssge_score",
    "all_eigenpairs_weights",
    "ridge_inverse",
    "SCORE_ESTIMATORS",
    "ScoreEstimator",
]


class ScoreEstimator(Protocol):
    def __call__(self, x: Tensor, kernel: RBF, **options) -> Tensor: ...


def kde_score(x: Tensor, kernel: RBF, query: Tensor | None = None) -> Tensor:
    """Gradient of the log kernel density estimate (Eq. 14), at ``query`` (default ``x``)."""
    sq = squared_distances(x, x)
    h = kernel.bandwidth_for(x, sq)
    if query is None:
        query, gram = x, torch.exp(-sq / h)
    else:
        gram = kernel.gram(query, x, h)
    return kernel_grad_sum(query, x, gram, h, row_scale=gram.sum(-1, keepdim=True).reciprocal())


def sge_score(x: Tensor, kernel: RBF, eta: float = 0.01) -> Tensor:
    """Stein gradient estimator (Eq. 16) at the samples, ridge ``eta``.

    The default ``eta = 0.01`` is the value in the authors' released code.
    """
    gram, h = kernel.self_gram(x)
    grads = kernel_grad_sum(x, x, gram, h)
    # the n x n system in float64, then one GEMM: solve() with d ~ 1e5 right-hand
    # sides was 4x slower than inverse-times-matrix on a CPU
    return set_matmul(ridge_inverse(gram, eta).to(x.dtype), grads)


def ssge_score(
    x: Tensor,
    kernel: RBF,
    num_eigs: int | None = None,
    eta: float = 0.01,
    query: Tensor | None = None,
) -> Tensor:
    """Spectral Stein gradient estimator (Eq. 17), at ``query`` (default ``x``).

    Args:
        x: samples (M, d) that define the density.
        kernel: RBF kernel; its bandwidth is computed on ``x``.
        num_eigs: number J of largest eigenvalues kept; ``None`` keeps all M.
        eta: ridge added to the Gram matrix before ``eigh``. ``eta = 0`` is Eq. 17
            verbatim, but with all eigenvalues it inverts K's near-zero spectrum
            (on the G.1 Gaussian the particle covariance came out 4x too large);
            0.01 is the value in the authors' released code.
        query: points (N, d) at which the score is wanted (out-of-sample allowed).
    """
    sq = squared_distances(x, x)
    h = kernel.bandwidth_for(x, sq)
    gram = torch.exp(-sq / h)
    grads = kernel_grad_sum(x, x, gram, h)
    cross = gram if query is None else kernel.gram(query, x, h)
    if num_eigs is None and gpu_path(x):
        weights = all_eigenpairs_weights(cross, gram, eta)
    else:
        eye = torch.eye(x.shape[-2], dtype=x.dtype, device=x.device)
        eigvals, eigvecs = torch.linalg.eigh(gram + eta * eye)  # ascending order
        if num_eigs is not None:
            eigvals, eigvecs = eigvals[..., -num_eigs:], eigvecs[..., -num_eigs:]
        # the (N, M) weights first, then a single product with the (M, d) gradients; a stack
        # of sets multiplies as each set alone would (set_matmul: torch's bmm rounds small
        # products otherwise, e.g. these (n, n) @ (n, n) for n <= 7)
        weights = set_matmul(set_matmul(cross, eigvecs) / eigvals.pow(2).unsqueeze(-2), eigvecs.mT)
    return set_matmul(weights, grads)


def all_eigenpairs_weights(cross: Tensor, gram: Tensor, eta: float) -> Tensor:
    """SSGE's weights ``k(q, X) U diag(lambda^-2) U^T`` with every eigenpair kept, which is
    ``k(q, X) (K + eta I)^-2``: two products with one inverse, in float64 (as
    :func:`sge_score`), without an error check. The GPU path: ``eigh`` checks its result
    on the host, a round-trip that keeps a step from being captured as a CUDA graph
    (:mod:`repens.training.step_graph`); the CPU keeps ``eigh`` (its results stay as they were)."""
    inverse = ridge_inverse(gram, eta)
    return ((cross.double() @ inverse) @ inverse).to(cross.dtype)


def ridge_inverse(gram: Tensor, eta: float) -> Tensor:
    """``(K + eta I)^-1`` in float64 (a stack of sets: each set's), by LU without an error
    check: ``K + eta I`` is symmetric positive definite, and skipping the check keeps a GPU
    step free of host round-trips (:func:`sge_score`, :func:`all_eigenpairs_weights`)."""
    eye = torch.eye(gram.shape[-1], dtype=torch.float64, device=gram.device)
    return torch.linalg.inv_ex(gram.double() + eta * eye).inverse


SCORE_ESTIMATORS: dict[str, Callable[..., Tensor]] = {
    "kde": kde_score,
    "sge": sge_score,
    "ssge": ssge_score,
}
