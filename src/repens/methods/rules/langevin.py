"""Deep Langevin ensembles (DLE) and deep repulsive Langevin ensembles (DRLE, Wild et al.
2023): the ensemble's gradient flow with Gaussian noise after each step, DRLE with an MMD
repulsion towards the prior."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from repens.methods.rule import Rule, RuleState
from repens.methods.updates import (
    StepContext,
    Update,
    adam_preconditioner,
    add_grad_log_prior,
    grad_log_likelihood,
    prior_draws,
)
from repens.models.kernels import kernel_grad_sum, squared_distances
from repens.models.posteriors import Batch

__all__ = ["Langevin", "langevin", "mmd_force", "langevin_noise_std", "add_langevin_noise", "build"]

REGISTRY_ENTRY = {"name": "langevin", "order": 4, "options": ["temperature", "mmd_weight", "prior_samples"]}

log = logging.getLogger("repens.langevin")


def langevin(
    params: Tensor,
    ctx: StepContext,
    temperature: float = 1.0,
    mmd_weight: float = 0.0,
    prior_samples: int | None = None,
) -> Update:
    """Deep (repulsive) Langevin ensemble, Wild et al. (2023).

    Discretised SDE ``w <- w - eta (grad V + lambda_1/n sum_j grad_1 k(w, w_j)) + sqrt(2 eta lambda_2) Z``
    with ``V = l - lambda' log p - 2 lambda mu_P``, ``lambda_1 = 2 lambda``,
    ``lambda_2 = lambda'``, ``l`` the negative log-likelihood and
    ``mu_P(w) = E_{w'~p} k(w, w')`` the prior's kernel mean embedding, estimated
    with ``prior_samples`` fresh prior draws (default n).

    * DLE: ``mmd_weight = lambda = 0``, ``temperature = lambda' `` (1 is the posterior);
    * DRLE: ``mmd_weight = lambda > 0`` (MMD^2 repulsion towards the prior).

    The kernel's median-heuristic bandwidth is computed on particles and prior
    draws together, so both terms of the MMD use one kernel.
    """
    direction = add_grad_log_prior(grad_log_likelihood(params, ctx), params, ctx, temperature)
    forces = None
    if mmd_weight:
        drift, repulsion = direction, 2.0 * mmd_weight * mmd_force(params, ctx, prior_samples)
        direction = drift + repulsion
        forces = lambda: (drift, repulsion)  # noqa: E731
    return Update(direction, forces=forces)


def mmd_force(params: Tensor, ctx: StepContext, prior_samples: int | None = None) -> Tensor:
    """DRLE's repulsion per unit ``2 lambda``: ``grad mu_P(w_i) - 1/n sum_j grad_1 k(w_i, w_j)``,
    i.e. ``1/m sum_l grad_1 k(w_i, w'_l) - 1/n sum_j grad_1 k(w_i, w_j)`` with ``m = prior_samples``
    (default n) fresh prior draws ``w'``; the kernel's bandwidth is computed on particles and
    draws together, so both terms use one kernel."""
    w = params.detach()
    draws = prior_draws(ctx, w, prior_samples or w.shape[-2])
    both = torch.cat([w, draws], dim=-2)
    sq = squared_distances(both, both)
    h = ctx.kernel.bandwidth_for(both, sq)
    n, m = w.shape[-2], draws.shape[-2]
    # to_prior - to_self = sum_j grad_1 k(w_i, .) weighted +1/m on draws, -1/n on particles:
    # one kernel-gradient product over both sets (the sum is linear in the weights)
    weights = torch.cat([-torch.exp(-sq[..., :n, :n] / h) / n, torch.exp(-sq[..., :n, n:] / h) / m], dim=-1)
    return kernel_grad_sum(w, both, weights, h)


def langevin_noise_std(optimizer: torch.optim.Optimizer, params: Tensor, temperature: float) -> Tensor | float:
    """Standard deviation of the Langevin noise added after an optimizer step of size ``lr``
    (the optimizer's learning rate).

    SGD: ``sqrt(2 lr T)``, the unadjusted Langevin algorithm (Wild et al. 2023).
    Adam: ``sqrt(2 lr T g)`` with Adam's own diagonal preconditioner
    ``g = 1 / (sqrt(v_hat) + eps)``, so noise and drift are preconditioned alike as in
    preconditioned SGLD (Li et al. 2016; the drift keeps Adam's momentum and the
    divergence term of the preconditioner is dropped). Plain ULA noise next to an
    Adam drift would be orders of magnitude too large for a network. The Adam form does
    not sample the target (tests/test_langevin.py: +22 to +225 % variance on a Gaussian);
    use SGD at the step of :mod:`repens.methods.step_size` (``step_size: curvature``).
    """
    lr = optimizer.param_groups[0]["lr"]
    scale = adam_preconditioner(optimizer, params)
    if scale is not None:
        # sqrt(2 lr T / (sqrt(v_hat) + eps)) in place, op for op what the expression computes
        # (a number over a tensor is torch's reciprocal times the number): 4 fewer
        # temporaries, 124 -> 106 us on the UCI stack (75k weights)
        return scale.mul_(2.0 * lr * temperature).sqrt_()
    return math.sqrt(2.0 * lr * temperature)


def add_langevin_noise(params: Tensor, optimizer: torch.optim.Optimizer, noise: Tensor, temperature: float) -> None:
    """The Langevin rules' noise: ``params += langevin_noise_std * Z`` for standard normal
    draws ``noise`` (moved to the particles' device), after the optimizer step."""
    params.add_(noise.to(params.device).mul_(langevin_noise_std(optimizer, params, temperature)))


@dataclass(frozen=True, kw_only=True)
class Langevin(Rule):
    """DLE (``mmd_weight`` 0) or DRLE (:func:`langevin`): the optimizer's step along the
    drift, then the noise ``sqrt(2 lr T) Z`` (SGD: the unadjusted Langevin algorithm;
    Adam: preconditioned alike, :func:`langevin_noise_std`), ``Z`` drawn by ``noise``."""

    temperature: float = 1.0
    mmd_weight: float = 0.0
    prior_samples: int | None = None

    def init(self, params: Tensor, generator: torch.Generator | None = None) -> RuleState:
        state = super().init(params, generator)
        if self.temperature and isinstance(state.optimizer, torch.optim.Adam):
            log.warning(
                "Langevin noise preconditioned by Adam (no correction term) does not sample the target: "
                "it over-disperses a Gaussian by tens of percent; ULA is SGD at the curvature step "
                "(repens.langevin_step_size; in config.yaml optimizer: sgd, step_size: curvature)"
            )
        return state

    def ascent(self, params: Tensor, ctx: StepContext, state: RuleState) -> Update:  # noqa: ARG002
        return langevin(params, ctx, self.temperature, self.mmd_weight, self.prior_samples)

    def update(self, state: RuleState, batch: Batch | None = None) -> tuple[RuleState, Update]:
        """The step along the drift, then the noise (none at temperature 0)."""
        state, result = super().update(state, batch)
        if self.temperature:
            with torch.no_grad():
                noise = self.noise(state.params, state.generator)
                add_langevin_noise(state.params, state.optimizer, noise, self.temperature)
        return state, result

    def potential(self) -> tuple[float, float]:
        """``V``'s prior weight is the temperature; DRLE adds its MMD term."""
        return float(self.temperature), float(self.mmd_weight or 0.0)


build = Langevin
