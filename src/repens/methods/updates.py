"""Update rules: one pure function per rule, picked by name from :data:`UPDATE_RULES`
(each rule, its options and its function-space form declared in :mod:`repens.core.registry`).

Each rule maps stacked particles ``params`` (n, D) and a :class:`StepContext` to an
:class:`Update` whose ``direction`` is the ascent direction ``phi`` of the paper
(particles move as ``w <- w + eps * phi``). The training loop hands ``phi`` to a
standard optimizer ascending it (Adam in the paper) and then calls the update's
``after_step``: the Langevin rules' Gaussian noise (:func:`add_langevin_noise`).
A repulsive rule also says what its drift and its repulsion are (``Update.forces``),
for the diagnostic :func:`repulsion_ratio`.

Equation numbers: D'Angelo & Fortuin (2021) unless stated; anchored ensembles:
Pearce et al. (2020), Eq. 11; DLE / DRLE: Wild et al. (2023).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from repens.core import registry
from repens.core.registry import LiveMapping, load_function
from repens.models.kernels import RBF, kernel_grad_sum, squared_distances
from repens.models.posteriors import Batch, Posterior, softmax_classes
from repens.models.scores import SCORE_ESTIMATORS, ssge_score

__all__ = [
    "Update",
    "repulsion_ratio",
    "preconditioned_repulsion_ratio",
    "adam_preconditioner",
    "FUNCTION_OUTPUTS",
    "REPULSION_SCALES",
    "StepContext",
    "UPDATE_RULES",
    "FUNCTION_SPACE_RULES",
    "resolve_rule",
    "make_update",
    "graph_safe",
    "ensemble",
    "svgd",
    "wgd",
    "fsvgd",
    "fwgd",
    "anchored",
    "langevin",
    "mmd_force",
    "langevin_noise_std",
    "add_langevin_noise",
]


@dataclass(frozen=True)
class Update:
    """Ascent direction (n, D); for a Langevin rule also its temperature (0: deterministic)
    and ``after_step(params, optimizer, generator)``, which the training loop calls after
    the optimizer has moved the particles (the rule's noise)."""

    direction: Tensor
    temperature: float = 0.0
    after_step: Callable[[Tensor, torch.optim.Optimizer, torch.Generator], None] | None = None
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
    """Everything a rule may read besides the particles; rules never mutate it."""

    posterior: Posterior
    kernel: RBF
    generator: torch.Generator
    batch: Batch | None = None
    anchors: Tensor | None = None


UpdateRule = Callable[..., Update]


# ---------------------------------------------------------------- gradients
def _grad(fn: Callable[[Tensor], Tensor], params: Tensor) -> Tensor:
    """Gradient of ``fn(params).sum()``; particles are independent so row i is grad_i."""
    with torch.enable_grad():
        p = params.detach().requires_grad_(True)
        value = fn(p).sum()
        if not value.requires_grad:  # a constant (e.g. the flat prior of a synthetic target)
            return torch.zeros_like(p)
        return torch.autograd.grad(value, p)[0]


def grad_log_likelihood(params: Tensor, ctx: StepContext) -> Tensor:
    """The likelihood's gradient: the posterior's own (networks: closed-form output gradient
    pulled back), else autograd of its log-likelihood (synthetic targets)."""
    own = getattr(ctx.posterior, "grad_log_likelihood", None)
    if own is not None:
        return own(params, ctx.batch)
    return _grad(lambda p: ctx.posterior.log_likelihood(p, ctx.batch), params)


def prior_draws(ctx: StepContext, like: Tensor, m: int) -> Tensor:
    """``m`` fresh prior draws for each set of particles: (..., m, D) for ``like`` (..., n, *)."""
    sets = like.shape[:-2]
    draws = ctx.posterior.sample_prior(m * math.prod(sets), ctx.generator)
    return draws.view(*sets, m, draws.shape[-1]).to(device=like.device, dtype=like.dtype)


def grad_log_prior(params: Tensor, ctx: StepContext) -> Tensor:
    """The prior's gradient in closed form where the posterior has one, else by autograd."""
    closed_form = getattr(ctx.posterior, "grad_log_prior", None)
    if closed_form is not None:
        return closed_form(params.detach())
    return _grad(ctx.posterior.log_prior, params)


def add_grad_log_prior(out: Tensor, params: Tensor, ctx: StepContext, scale: float = 1.0) -> Tensor:
    """``out + scale * grad log p(params)``: in place in one pass where the posterior can
    (``add_grad_log_prior_``), else through :func:`grad_log_prior`."""
    in_place = getattr(ctx.posterior, "add_grad_log_prior_", None)
    if in_place is not None:
        return in_place(out, params.detach(), scale)
    prior = grad_log_prior(params, ctx)
    return out.add_(prior if scale == 1.0 else scale * prior)


def grad_log_posterior(params: Tensor, ctx: StepContext) -> Tensor:
    return add_grad_log_prior(grad_log_likelihood(params, ctx), params, ctx)


# ------------------------------------------------------------- weight space
def ensemble(params: Tensor, ctx: StepContext) -> Update:
    """Deep ensemble, Eq. 2: ``phi_i = grad log p(w_i | D)`` (MAP per member)."""
    return Update(grad_log_posterior(params, ctx))


#: what SVGD's and f-SVGD's ``repulsion_scale`` may be besides a number: ``"num_train"``, the
#: posterior's N, as the authors' released code does with ``--num_train``
#: (``methods/SVGD.py``, ``methods/f_SVGD.py``: ``num_t * grad_K``)
REPULSION_SCALES = ("num_train",)


def _repulsion_scale(scale: float | str, ctx: StepContext) -> float:
    """The factor on SVGD's kernel-gradient term: a number, or ``"num_train"`` (N)."""
    if isinstance(scale, str):
        if scale not in REPULSION_SCALES:
            raise ValueError(f"repulsion_scale {scale!r}; use a number or one of {list(REPULSION_SCALES)}")
        return float(ctx.posterior.num_train)
    return float(scale)


def svgd(params: Tensor, ctx: StepContext, repulsion_scale: float | str = 1.0) -> Update:
    """SVGD, Eq. 6: ``phi_i = 1/n sum_j [k(w_j, w_i) grad log p(w_j|D) + s grad_{w_j} k(w_j, w_i)]``
    with ``s = repulsion_scale`` (1 in Eq. 6; ``"num_train"``: N, the released code's
    ``--num_train``).

    For the RBF kernel ``sum_j grad_{w_j} k(w_j, w_i) = -sum_j grad_{w_i} k(w_i, w_j)``.
    """
    w = params.detach()
    gram, h = ctx.kernel.self_gram(w)
    score = grad_log_posterior(w, ctx)
    direction = _svgd_direction(w, score, gram, h, _repulsion_scale(repulsion_scale, ctx))
    return Update(direction, forces=partial(_svgd_forces, score, gram, direction))


def wgd(params: Tensor, ctx: StepContext, estimator: str = "kde", **estimator_options) -> Update:
    """Weight-space WGD, Eq. 13: ``phi_i = grad log p(w_i|D) - grad log rho(w_i)``.

    ``grad log rho`` from KDE (Eq. 15), SGE (Eq. 16) or SSGE (Eq. 17).
    """
    score = grad_log_posterior(params, ctx)
    density_score = SCORE_ESTIMATORS[estimator](params.detach(), ctx.kernel, **estimator_options)
    return Update(score - density_score, forces=lambda: (score, -density_score))


#: what divides the anchoring term of the anchored ensemble's minibatch loss
ANCHOR_DIVISORS = ("n_train", "batch")


def anchored(params: Tensor, ctx: StepContext, anchor_divisor: str = "n_train") -> Update:
    """Anchored ensemble (Pearce et al. 2020, Eq. 11): MAP with the prior recentred on each
    member's own prior draw ``w0_i`` (``ctx.anchors``).

    For the zero-mean Gaussian prior, ``grad log N(w; w0, S) = grad log p(w - w0)``.

    ``anchor_divisor``: ``"n_train"`` is Eq. 11, whose loss divides the anchoring term by N
    as it does the squared errors, so the anchor acts as the prior. ``"batch"`` is what
    Pearce et al.'s published code does (github TeaPearce/Bayesian_NN_Ensembles,
    ``regression/module_NN_ens.py``): the minibatch loss divides the anchoring term by the
    batch size B, a prior N / B times stronger than Eq. 11's.
    """
    if ctx.anchors is None:
        raise ValueError("the anchored rule needs anchors (one prior draw per member)")
    if anchor_divisor not in ANCHOR_DIVISORS:
        raise ValueError(f"anchor_divisor {anchor_divisor!r}; known: {list(ANCHOR_DIVISORS)}")
    scale = (
        ctx.posterior.num_train / ctx.batch.x.shape[-2] if anchor_divisor == "batch" and ctx.batch is not None else 1.0
    )
    return Update(add_grad_log_prior(grad_log_likelihood(params, ctx), params - ctx.anchors, ctx, scale))


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
    return Update(
        direction, temperature, partial(add_langevin_noise, temperature=temperature) if temperature else None, forces
    )


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


def adam_preconditioner(optimizer: torch.optim.Optimizer | None, params: Tensor) -> Tensor | None:
    """Adam's per-coordinate scaling of a direction after its last step, ``1 / (sqrt(v_hat) +
    eps)`` (a new tensor), from its state for ``params``; ``None`` for another optimizer or
    before its first step. The Langevin noise (:func:`langevin_noise_std`) and the logged
    repulsion share after Adam (:func:`preconditioned_repulsion_ratio`) both read it."""
    if not isinstance(optimizer, torch.optim.Adam) or "exp_avg_sq" not in optimizer.state.get(params, {}):
        return None
    state, group = optimizer.state[params], optimizer.param_groups[0]
    beta2, eps = group["betas"][1], group["eps"]
    step = state["step"]  # a tensor on the device for the fused Adam: no host round-trip
    v_hat = state["exp_avg_sq"] / (1.0 - torch.pow(beta2, step.to(state["exp_avg_sq"])))
    return v_hat.sqrt_().add_(eps).reciprocal_()


def add_langevin_noise(
    params: Tensor, optimizer: torch.optim.Optimizer, generator: torch.Generator, temperature: float
) -> None:
    """The Langevin rules' noise: ``params += langevin_noise_std * Z`` with ``Z ~ N(0, I)``
    drawn from the run's generator (on its device), after the optimizer step."""
    noise = torch.randn(params.shape, generator=generator, dtype=params.dtype, device=generator.device)
    params.add_(noise.to(params.device).mul_(langevin_noise_std(optimizer, params, temperature)))


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


def _function_space(params: Tensor, ctx: StepContext, prior_options: dict, function_output: str = "logits"):
    """The particles' outputs on the batch flattened to (..., n, B*C), ``grad_f log p(f | D)``
    there, and the pull-back ``direction_f -> (df_i / dw_i)^T direction_f_i`` to weights.

    ``function_output="softmax"``: ``f`` is the softmax of the logits ``z``; the likelihood's
    score there is the released code's, ``d/dp [N/B sum_b log(p_b,y_b + 1e-15)]``
    (:meth:`repens.models.posteriors.NetworkPosterior.probability_grad_log_likelihood`), the
    function prior's draws are mapped to probabilities too, and the pull-back goes through
    the softmax's Jacobian, ``v -> p * (v - <p, v>)`` per example, then the network's."""
    if ctx.batch is None or not hasattr(ctx.posterior, "outputs_with_pullback"):
        raise ValueError("function-space rules need a network posterior and a data batch")
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


def _svgd_direction(x: Tensor, score: Tensor, gram: Tensor, h: Tensor, repulsion_scale: float = 1.0) -> Tensor:
    """Eq. 6 for particles ``x`` (..., n, d) with scores ``score``:
    ``1/n sum_j [k(x_j, x_i) score_j + s grad_{x_j} k(x_j, x_i)]`` (``s = repulsion_scale``,
    the factor folded into ``2/h`` below). With ``xc = x - x_0`` the
    repulsion is ``(2/h) (diag(K 1) xc - K xc)`` (:func:`repens.models.kernels.kernel_grad_sum`), so
    the whole direction is one GEMM, ``K (score - (2/h) xc) + (2/h) (K 1) * xc``, over n:
    exactly ``score`` for one particle and exactly ``K score / n`` for coincident ones."""
    xc = x - x[..., :1, :]
    two_over_h = 2.0 / h if repulsion_scale == 1.0 else 2.0 * repulsion_scale / h
    pushed = torch.addcmul(score, xc, two_over_h, value=-1.0) if torch.is_tensor(h) else score - two_over_h * xc
    direction = torch.matmul(gram, pushed)
    direction.addcmul_(gram.sum(-1, keepdim=True) * two_over_h, xc)
    return direction.div_(x.shape[-2])


def _svgd_forces(score: Tensor, gram: Tensor, direction: Tensor) -> tuple[Tensor, Tensor]:
    """SVGD's driving term ``K score / n`` and its repulsion, the rest of ``direction``."""
    drift = torch.matmul(gram, score).div_(score.shape[-2])
    return drift, direction - drift


def fsvgd(
    params: Tensor,
    ctx: StepContext,
    repulsion_scale: float | str = 1.0,
    function_output: str = "logits",
    **prior_options,
) -> Update:
    """Function-space SVGD, Eq. 7, on outputs over the batch (``function_output``: the logits
    or their softmax), pulled back with the Jacobian; ``repulsion_scale`` as :func:`svgd`'s."""
    flat, score, pull_back = _function_space(params, ctx, prior_options, function_output)
    gram, h = ctx.kernel.self_gram(flat)
    direction_f = _svgd_direction(flat, score, gram, h, _repulsion_scale(repulsion_scale, ctx))
    return Update(pull_back(direction_f), forces=partial(_svgd_forces, score, gram, direction_f), pull_back=pull_back)


def fwgd(
    params: Tensor,
    ctx: StepContext,
    estimator: str = "kde",
    eta: float | None = None,
    num_eigs: int | None = None,
    function_output: str = "logits",
    **prior_options,
) -> Update:
    """Function-space WGD, Eq. 5 with Eq. 20 (KDE) or the SGE/SSGE analogues:
    ``phi_f = grad_f log p(f|D) - grad_f log rho(f)`` on the logits or their softmax
    (``function_output``), pulled back with the Jacobian."""
    flat, score, pull_back = _function_space(params, ctx, prior_options, function_output)
    density_score = SCORE_ESTIMATORS[estimator](flat, ctx.kernel, **_estimator_options(eta, num_eigs))
    return Update(pull_back(score - density_score), forces=lambda: (score, -density_score), pull_back=pull_back)


def _estimator_options(eta: float | None, num_eigs: int | None) -> dict:
    options = {} if eta is None else {"eta": eta}
    if num_eigs is not None:
        options["num_eigs"] = num_eigs
    return options


#: every rule's forms by name (a rule's config name; ``fsvgd``, ``fwgd`` for the function-space
#: forms) -> its function: a view of :data:`repens.core.registry.RULES`, where each rule is declared
UPDATE_RULES: Mapping[str, UpdateRule] = LiveMapping(
    lambda: {name: load_function(fn) for name, fn in registry.implementations().items()}
)

#: config ``rule`` + ``space: function`` -> registry name
FUNCTION_SPACE_RULES: Mapping[str, str] = LiveMapping(registry.function_space_rules)


def resolve_rule(rule: str, space: str = "weight") -> str:
    """Registry name for a config entry's ``rule`` and ``space``."""
    if space == "weight":
        name = rule
    elif space == "function":
        if rule not in FUNCTION_SPACE_RULES:
            raise ValueError(f"rule {rule!r} has no function-space form; only {sorted(FUNCTION_SPACE_RULES)} do")
        name = FUNCTION_SPACE_RULES[rule]
    else:
        raise ValueError(f"unknown space {space!r}; use 'weight' or 'function'")
    if name not in UPDATE_RULES:
        raise ValueError(f"unknown update rule {rule!r}; known: {sorted(UPDATE_RULES)}")
    return name


def graph_safe(rule: str, space: str = "weight", **options) -> bool:
    """Whether a step of the rule can be captured as a CUDA graph (:mod:`repens.training.step_graph`):
    nothing in it waits for the host. SSGE with ``num_eigs`` set is not (``torch.linalg.eigh``
    checks its result on the host); with every eigenpair (the default, and the function
    prior's) a GPU takes it by an inverse (:func:`repens.models.scores.all_eigenpairs_weights`).
    Every rule's other host-side decisions depend on shapes only; the GP prior's solve and
    SGE's inverse skip their error checks (a singular system shows as a non-finite update)."""
    resolve_rule(rule, space)  # an unknown rule is an error here too
    return not (options.get("estimator") == "ssge" and options.get("num_eigs") is not None)


def make_update(rule: str, space: str = "weight", **options) -> Callable[[Tensor, StepContext], Update]:
    """The update function for a method entry: the registered rule with its options bound;
    its ``graph_safe`` attribute says whether a step can be captured (:func:`graph_safe`)."""
    update = partial(UPDATE_RULES[resolve_rule(rule, space)], **options)
    update.graph_safe = graph_safe(rule, space, **options)
    return update
