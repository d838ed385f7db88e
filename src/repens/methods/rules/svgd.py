"""Stein variational gradient descent (Liu & Wang 2016) in weight space, Eq. 6, and in
function space on the network's outputs, Eq. 7 (f-SVGD)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from repens.methods.rule import FunctionSpaceRule, Rule, RuleState
from repens.methods.updates import StepContext, Update, function_space, grad_log_posterior
from repens.models.kernels import set_matmul

__all__ = ["SVGD", "FunctionSVGD", "svgd", "fsvgd", "REPULSION_SCALES", "build", "build_function_space"]

REGISTRY_ENTRY = {
    "name": "svgd",
    "order": 1,
    "options": ["repulsion_scale"],
    "repulsive": True,
    "function_space": "fsvgd",
}

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
    direction = set_matmul(gram, pushed)
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
    flat, score, pull_back = function_space(params, ctx, prior_options, function_output)
    gram, h = ctx.kernel.self_gram(flat)
    direction_f = _svgd_direction(flat, score, gram, h, _repulsion_scale(repulsion_scale, ctx))
    return Update(pull_back(direction_f), forces=partial(_svgd_forces, score, gram, direction_f), pull_back=pull_back)


@dataclass(frozen=True, kw_only=True)
class SVGD(Rule):
    """SVGD, Eq. 6 (:func:`svgd`): the kernel-weighted scores of the particles plus the
    kernel's gradient, ``repulsion_scale`` times (1 in Eq. 6; ``"num_train"``: N)."""

    repulsion_scale: float | str = 1.0

    def ascent(self, params: Tensor, ctx: StepContext, state: RuleState) -> Update:  # noqa: ARG002
        return svgd(params, ctx, self.repulsion_scale)


@dataclass(frozen=True, kw_only=True)
class FunctionSVGD(FunctionSpaceRule):
    """f-SVGD, Eq. 7 (:func:`fsvgd`): SVGD on the outputs over the batch, pulled back to
    weights; the function prior as :class:`repens.methods.rule.FunctionSpaceRule`'s."""

    repulsion_scale: float | str = 1.0

    def ascent(self, params: Tensor, ctx: StepContext, state: RuleState) -> Update:  # noqa: ARG002
        return fsvgd(params, ctx, self.repulsion_scale, self.function_output, **self.prior_options())


build = SVGD
build_function_space = FunctionSVGD
