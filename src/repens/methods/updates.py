"""What the update rules share: the :class:`Update` a step returns, the :class:`StepContext`
a rule reads, the posterior's gradients, prior draws, the function-space machinery (the
network outputs on a batch, the function prior's score, the pull-back to weights) and the
repulsion diagnostics.

Each rule is one object of :mod:`repens.methods.rules` (built by
:func:`repens.methods.rule.build`); its direction is the ascent direction ``phi`` of the
paper (particles move as ``w <- w + eps * phi``), which the rule's optimizer ascends (Adam
in the paper). A repulsive rule also says what its drift and its repulsion are
(``Update.forces``), for the diagnostic :func:`repulsion_ratio`.

Equation numbers: D'Angelo & Fortuin (2021) unless stated; anchored ensembles:
Pearce et al. (2020), Eq. 11; DLE / DRLE: Wild et al. (2023).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from repens.models.kernels import RBF, squared_distances
from repens.models.posteriors import Batch, Posterior, softmax_classes
from repens.models.scores import ssge_score

__all__ = [
    "Update",
    "StepContext",
    "repulsion_ratio",
    "preconditioned_repulsion_ratio",
    "adam_preconditioner",
    "grad_log_likelihood",
    "grad_log_prior",
    "add_grad_log_prior",
    "grad_log_posterior",
    "prior_draws",
    "function_prior_score",
    "function_space",
    "FUNCTION_OUTPUTS",
]


@dataclass(frozen=True)
class Update:
    """What a step of a rule returns: the ascent direction (..., n, D), and for a repulsive
    rule its two forces."""

    direction: Tensor
    #: for a repulsive rule, ``() -> (drift, repulsion)``: the two terms of its direction in
    #: the space it works in (weights, or function values for the function-space rules),
    #: computed only when asked (the training loop asks at log steps; see :func:`repulsion_ratio`)
    forces: Callable[[], tuple[Tensor, Tensor]] | None = None
    #: for a function-space rule, the map of a function-space vector (its ``forces``' space)
    #: to weights (the Jacobian's transpose); ``None``: the rule works in weight space
    pull_back: Callable[[Tensor], Tensor] | None = None


def preconditioned_repulsion_ratio(
    update: Update, scale: Tensor, forces: tuple[Tensor, Tensor] | None = None
) -> Tensor | None:
    """``||scale * repulsion_w|| / ||scale * drift_w||`` with both terms in weight space
    (a function-space rule's pulled back): the repulsion's share of the step once an optimizer
    has rescaled each coordinate by ``scale`` (Adam's: :func:`adam_preconditioner`), one value
    per set of a stack; ``None`` for a rule with no repulsion. ``forces``: the update's
    ``forces()`` where the caller has them already."""
    if update.forces is None:
        return None
    drift, repulsion = forces if forces is not None else update.forces()
    if update.pull_back is not None:
        drift, repulsion = update.pull_back(drift), update.pull_back(repulsion)
    return _norm_ratio(scale * drift, scale * repulsion)


def repulsion_ratio(update: Update, forces: tuple[Tensor, Tensor] | None = None) -> Tensor | None:
    """``||repulsion|| / ||drift||`` of an update, one value per set of a stack (norms over
    the set's whole particle matrix); ``None`` for a rule with no repulsion (DE, anchored,
    DLE). Shows whether the repulsion moves the particles at all next to the posterior's pull.
    ``forces``: the update's ``forces()`` where the caller has them already."""
    if update.forces is None:
        return None
    return _norm_ratio(*(forces if forces is not None else update.forces()))


def _norm_ratio(drift: Tensor, repulsion: Tensor) -> Tensor:
    return repulsion.flatten(-2).norm(dim=-1) / drift.flatten(-2).norm(dim=-1)


@dataclass
class StepContext:
    """Everything a rule's equation may read besides the particles; rules never mutate it."""

    posterior: Posterior
    kernel: RBF
    generator: torch.Generator
    batch: Batch | None = None


# ---------------------------------------------------------------- gradients
def grad_log_likelihood(params: Tensor, ctx: StepContext) -> Tensor:
    """The likelihood's gradient, the posterior's own (networks: the closed-form output
    gradient pulled back; otherwise autograd of its log-likelihood)."""
    return ctx.posterior.grad_log_likelihood(params, ctx.batch)


def prior_draws(ctx: StepContext, like: Tensor, m: int) -> Tensor:
    """``m`` fresh prior draws for each set of particles: (..., m, D) for ``like`` (..., n, *)."""
    sets = like.shape[:-2]
    draws = ctx.posterior.sample_prior(m * math.prod(sets), ctx.generator)
    return draws.view(*sets, m, draws.shape[-1]).to(device=like.device, dtype=like.dtype)


def grad_log_prior(params: Tensor, ctx: StepContext) -> Tensor:
    """The prior's gradient (closed form for the Gaussian prior, else autograd)."""
    return ctx.posterior.grad_log_prior(params.detach())


def add_grad_log_prior(out: Tensor, params: Tensor, ctx: StepContext, scale: float = 1.0) -> Tensor:
    """``out + scale * grad log p(params)``, in place (the posterior's ``add_grad_log_prior_``)."""
    return ctx.posterior.add_grad_log_prior_(out, params.detach(), scale)


def grad_log_posterior(params: Tensor, ctx: StepContext) -> Tensor:
    return add_grad_log_prior(grad_log_likelihood(params, ctx), params, ctx)


def adam_preconditioner(optimizer: torch.optim.Optimizer | None, params: Tensor) -> Tensor | None:
    """Adam's per-coordinate scaling of a direction after its last step, ``1 / (sqrt(v_hat) +
    eps)`` (a new tensor), from its state for ``params``; ``None`` for another optimizer or
    before its first step. The Langevin noise (:func:`repens.methods.rules.langevin.langevin_noise_std`) and the logged
    repulsion share after Adam (:func:`preconditioned_repulsion_ratio`) both read it."""
    if not isinstance(optimizer, torch.optim.Adam) or "exp_avg_sq" not in optimizer.state.get(params, {}):
        return None
    state, group = optimizer.state[params], optimizer.param_groups[0]
    beta2, eps = group["betas"][1], group["eps"]
    step = state["step"]  # a tensor on the device for the fused Adam: no host round-trip
    v_hat = state["exp_avg_sq"] / (1.0 - torch.pow(beta2, step.to(state["exp_avg_sq"])))
    return v_hat.sqrt_().add_(eps).reciprocal_()


# ----------------------------------------------------------- function space
def function_prior_score(
    outputs: Tensor,
    ctx: StepContext,
    function_prior: str = "ssge",
    prior_samples: int | None = None,
    prior_eta: float = 0.01,
    gp_lengthscale: float = 1.0,
    gp_variance: float = 1.0,
    *,
    output_map: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """``grad_f log p(f)`` at the particles' outputs ``outputs`` (n, B*C) on the batch inputs.

    * ``ssge`` (Sec. 3.3): SSGE fitted on the outputs of ``prior_samples`` networks
      drawn from the weight prior, evaluated out of sample at the particles;
    * ``gp``: analytic GP prior with RBF covariance
      ``gp_variance * exp(-|x-x'|^2 / (2 gp_lengthscale^2))`` per output, score
      ``-K_X^{-1} f`` (jitter 1e-6 * variance).

    ``output_map``: what maps a network's outputs (..., B, C) to the values ``outputs`` holds
    (the softmax, for a rule on probabilities); ``None``: the outputs themselves.
    """
    x = ctx.batch.x
    sets = outputs.dim() - 2  # leading axes of a stack of sets (0 for one set)
    if function_prior == "ssge":
        m = prior_samples or outputs.shape[-2]
        draws = prior_draws(ctx, outputs, m)
        with torch.no_grad():
            prior_outputs = ctx.posterior.predict(draws, x)
            prior_outputs = (prior_outputs if output_map is None else output_map(prior_outputs)).flatten(sets + 1)
        return ssge_score(prior_outputs, RBF(), eta=prior_eta, query=outputs)
    if function_prior == "gp":
        flat_x = x.flatten(sets + 1).to(outputs.dtype)  # (..., B, features)
        cov = gp_variance * torch.exp(-squared_distances(flat_x, flat_x) / (2 * gp_lengthscale**2))
        cov = cov + 1e-6 * gp_variance * torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)
        f = outputs.reshape(*outputs.shape[:-1], cov.shape[-1], -1)  # (..., n, B, C)
        # solve_ex without its error check: the checked solve waits for the host on a GPU
        return -torch.linalg.solve_ex(cov.unsqueeze(-3), f, check_errors=False).result.reshape(outputs.shape)
    raise ValueError(f"unknown function prior {function_prior!r}; known: ['gp', 'ssge']")


#: which output of the network a function-space rule works on (option ``function_output``):
#: ``logits`` (the default), or ``softmax``, the class probabilities, as the authors' released
#: code does by default (``logit_soft=0``, ``utils/config.py``; ``methods/method_utils.py``)
FUNCTION_OUTPUTS = ("logits", "softmax")


def function_space(params: Tensor, ctx: StepContext, prior_options: dict, function_output: str = "logits"):
    """The particles' outputs on the batch flattened to (..., n, B*C), ``grad_f log p(f | D)``
    there, and the pull-back ``direction_f -> (df_i / dw_i)^T direction_f_i`` to weights.

    ``function_output="softmax"``: ``f`` is the softmax of the logits ``z``; the likelihood's
    score there is the released code's, ``d/dp [N/B sum_b log(p_b,y_b + 1e-15)]``
    (:meth:`repens.models.posteriors.NetworkPosterior.probability_grad_log_likelihood`), the
    function prior's draws are mapped to probabilities too, and the pull-back goes through
    the softmax's Jacobian, ``v -> p * (v - <p, v>)`` per example, then the network's."""
    if ctx.batch is None:
        raise ValueError("function-space rules need a data batch")
    if function_output not in FUNCTION_OUTPUTS:
        raise ValueError(f"function_output {function_output!r}; known: {list(FUNCTION_OUTPUTS)}")
    outputs, pull_back = ctx.posterior.outputs_with_pullback(params, ctx.batch.x)
    lead = params.dim() - 1
    if function_output == "logits":
        seen, output_map, to_network = outputs, None, pull_back
        lik_score = ctx.posterior.output_grad_log_likelihood(outputs, ctx.batch)
    else:
        seen, output_map = softmax_classes(outputs), softmax_classes
        lik_score = ctx.posterior.probability_grad_log_likelihood(seen, ctx.batch)

        def to_network(v: Tensor) -> Tensor:  # the softmax's Jacobian (symmetric), then the network's
            return pull_back(seen * (v - (seen * v).sum(-1, keepdim=True)))

    flat = seen.flatten(lead)  # (..., n, B * C)
    score = lik_score.flatten(lead) + function_prior_score(flat, ctx, output_map=output_map, **prior_options)
    return flat, score, lambda direction_f: to_network(direction_f.view_as(outputs))
