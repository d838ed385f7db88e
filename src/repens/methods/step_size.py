"""A stable step size for the unadjusted Langevin algorithm (ULA) from the curvature of ``V``.

DLE and DRLE (Wild et al. 2023) discretise ``d theta = -grad V dt + sqrt(2 T) dB`` as

    theta <- theta - eta grad V(theta) + sqrt(2 eta T) Z,        Z ~ N(0, I)

(plain SGD ascending ``phi = -grad V`` plus the noise of :func:`repens.methods.updates.add_langevin_noise`).
On a Gaussian ``V = x^2 / (2 s^2)`` (times ``T``) this is an AR(1) chain
``x <- (1 - a) x + sqrt(2 eta T) Z`` with ``a = eta / s^2``, whose stationary variance is

    Var = 2 eta T / (1 - (1 - a)^2) = T s^2 / (1 - a / 2),

the target's ``T s^2`` inflated by ``1 / (1 - a / 2)``. The inflation is worst in the stiffest
direction, where ``a = eta L`` with ``L`` the largest eigenvalue of the Hessian of ``V``. So

    eta = c / L,    c = 2 (1 - 1 / (1 + r))

keeps every direction's variance within a relative error ``r`` of the target's
(:func:`fraction_for_inflation`; ``r = 0.1`` gives ``c <= 0.18``; the default ``c = 0.1`` gives
+5.3 %, :func:`ula_variance_inflation`). Softer directions (curvature ``l < L``) are sampled more
accurately but relax slowly: their autocorrelation time is ``1 / (eta l)`` steps, so a run of
``k`` steps reaches the stationary law in directions with ``l >> 1 / (eta k)`` only
(:func:`relaxation_steps`).

``L`` is estimated by power iteration on Hessian-vector products of ``V`` (double backward through
the log-density; exact for ReLU networks, whose second derivative is zero almost everywhere), one
iteration per particle at once (:func:`top_curvature`). For a network, ``V`` is the full-data scaled
likelihood plus ``T`` times the prior; its Hessian is averaged over a few fixed minibatches
(:func:`langevin_step_size`). The MMD term of DRLE adds at most ``8 lambda / h`` to the curvature
(:func:`mmd_curvature_bound`), which the step includes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "ula_variance_inflation",
    "fraction_for_inflation",
    "curvature_step_size",
    "relaxation_steps",
    "hessian_vector_product",
    "top_curvature",
    "mmd_curvature_bound",
    "StepSize",
    "langevin_step_size",
    "DEFAULT_FRACTION",
]

#: ``c = eta L`` of the step-size rule: ULA over-disperses the stiffest direction by 5.3 %
DEFAULT_FRACTION = 0.1


def ula_variance_inflation(fraction: float) -> float:
    """Stationary variance of ULA over the target's in a direction of curvature ``l`` with
    ``fraction = eta l``: ``1 / (1 - fraction / 2)`` (stable for ``0 < fraction < 2``)."""
    if not 0 < fraction < 2:
        raise ValueError(f"ULA is unstable unless 0 < eta * L < 2; got {fraction}")
    return 1.0 / (1.0 - fraction / 2.0)


def fraction_for_inflation(max_inflation: float) -> float:
    """The largest ``c = eta L`` whose ULA variance is within ``max_inflation`` (relative) of
    the target's in every direction: ``2 (1 - 1 / (1 + max_inflation))`` (0.1 -> 0.1818)."""
    if max_inflation <= 0:
        raise ValueError(f"max_inflation must be positive, got {max_inflation}")
    return 2.0 * (1.0 - 1.0 / (1.0 + max_inflation))


def curvature_step_size(curvature: float, fraction: float = DEFAULT_FRACTION) -> float:
    """``eta = fraction / L`` for the largest curvature ``L`` of ``V``."""
    if not curvature > 0 or not math.isfinite(curvature):
        raise ValueError(f"the curvature must be positive and finite, got {curvature}")
    ula_variance_inflation(fraction)  # checks 0 < fraction < 2
    return fraction / curvature


def relaxation_steps(step: float, curvature: float) -> float:
    """Autocorrelation time (steps) of ULA in a direction of curvature ``l``: ``1 / (eta l)``
    (the chain contracts by ``1 - eta l`` per step; its variance by the square)."""
    return 1.0 / (step * curvature)


def hessian_vector_product(log_density: Callable[[Tensor], Tensor], params: Tensor, vector: Tensor) -> Tensor:
    """``H v`` per particle for ``H`` the Hessian of ``V = -log_density`` at ``params`` (..., n, D).

    ``log_density(params)`` returns one value per particle (..., n); particles are independent,
    so the gradient of the sum has row ``i`` depending on ``params[i]`` only, and a second
    backward of ``sum(grad * vector)`` gives each row's own ``H_i v_i`` (Pearlmutter 1994).
    """
    with torch.enable_grad():
        p = params.detach().requires_grad_(True)
        value = log_density(p).sum()
        if not value.requires_grad:
            return torch.zeros_like(p)
        (grad,) = torch.autograd.grad(value, p, create_graph=True)
        if not grad.requires_grad:  # linear log-density: zero Hessian
            return torch.zeros_like(p)
        (hv,) = torch.autograd.grad(grad, p, grad_outputs=vector.detach(), allow_unused=True)
    return torch.zeros_like(p) if hv is None else hv.neg()


def top_curvature(
    hvp: Callable[[Tensor], Tensor],
    params: Tensor,
    generator: torch.Generator | None = None,
    iters: int = 200,
    tol: float = 1e-3,
) -> Tensor:
    """Largest eigenvalue magnitude of each particle's Hessian (..., n), by power iteration.

    ``hvp(v)`` returns ``H v`` row by row (e.g. :func:`hessian_vector_product`). Every row is
    iterated at once from its own random start, ``v <- H v / |H v|``, until every row's estimate
    ``|H v|`` changes by less than ``tol`` (relative) or after ``iters`` products. For unit ``v``,
    ``|H v|`` is at least the Rayleigh quotient and converges to ``max |eigenvalue|`` from below at
    the rate ``(lambda_2 / lambda_1)^k``; a step from it bounds negative curvature as well.
    """
    v = torch.randn(params.shape, generator=generator, dtype=params.dtype, device=params.device)
    v = v / torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    estimate = torch.zeros(params.shape[:-1], dtype=params.dtype, device=params.device)
    for _ in range(iters):
        hv = hvp(v)
        norm = torch.linalg.vector_norm(hv, dim=-1)
        converged = bool(((norm - estimate).abs() <= tol * norm).all())
        estimate = norm
        if converged or not bool((norm > 0).all()):
            break
        v = hv / norm.unsqueeze(-1)
    return estimate


def mmd_curvature_bound(mmd_weight: float, bandwidth: float) -> float:
    """Bound on the curvature DRLE's MMD term adds to ``V``: ``8 lambda / h``.

    The term is ``2 lambda (1/n sum_j k(theta, theta_j) - 1/m sum_l k(theta, theta'_l))`` for
    ``k(x, y) = exp(-|x - y|^2 / h)``, whose Hessian ``k (4 d d^T / h^2 - 2 I / h)`` has
    eigenvalues within ``[-2 / h, 2 / h]`` (``4 r^2 / h^2 e^{-r^2 / h} <= 4 / (e h)``); each of the
    two averages adds at most ``2 / h`` times ``2 lambda``."""
    return 8.0 * mmd_weight / bandwidth


@dataclass(frozen=True)
class StepSize:
    """The step of :func:`langevin_step_size` and what it came from."""

    lr: float
    #: largest curvature of ``V`` over the particles (likelihood + T prior, plus the MMD bound)
    curvature: float
    #: the MMD term's share of ``curvature`` (0 for DLE)
    mmd_curvature: float
    #: per-particle curvatures (..., n) of likelihood + T prior
    per_particle: Tensor
    fraction: float


def langevin_step_size(
    posterior,
    params: Tensor,
    batches: Sequence,
    temperature: float = 1.0,
    fraction: float = DEFAULT_FRACTION,
    mmd_weight: float = 0.0,
    bandwidth: float | None = None,
    generator: torch.Generator | None = None,
    iters: int = 200,
    tol: float = 1e-3,
) -> StepSize:
    """``eta = fraction / L`` for ``V = -log p(D | w) - T log p(w)`` (+ DRLE's MMD term) at ``params``.

    ``L`` is the largest over the particles (and stacked sets) of the top eigenvalue of the
    Hessian of ``V``, averaged over ``batches`` (each scaled to the full data by the posterior);
    with ``mmd_weight`` the MMD bound :func:`mmd_curvature_bound` at ``bandwidth`` is added.

    MLP stacks are evaluated with inputs that require a gradient, which makes
    :class:`repens.models.particles.StackedModel` build its forward from plain autograd operations (its
    fused node has a first derivative only).
    """
    batches = list(batches) or [None]
    prepared = [
        b
        if b is None or not torch.is_tensor(getattr(b, "x", None))
        else type(b)(b.x.detach().requires_grad_(True), b.y)
        for b in batches
    ]

    def hvp(v: Tensor) -> Tensor:
        total = None
        for batch in prepared:

            def log_density(p: Tensor, batch=batch) -> Tensor:
                return posterior.log_likelihood(p, batch) + temperature * posterior.log_prior(p)

            hv = hessian_vector_product(log_density, params, v)
            total = hv if total is None else total.add_(hv)
        return total.div_(len(prepared))

    per_particle = top_curvature(hvp, params, generator, iters=iters, tol=tol)
    curvature = float(per_particle.max())
    if mmd_weight and bandwidth is None:
        raise ValueError("the MMD curvature bound needs the kernel bandwidth")
    mmd = mmd_curvature_bound(mmd_weight, bandwidth) if mmd_weight else 0.0
    total = curvature + mmd
    return StepSize(curvature_step_size(total, fraction), total, mmd, per_particle, fraction)
