"""Wasserstein gradient descent: the gradient flow of the KL divergence with the
particles' density ``rho`` estimated, in weight space (Eq. 13; ``grad log rho`` from KDE,
Eq. 15, SGE, Eq. 16, or SSGE, Eq. 17) and in function space (Eq. 5 with Eq. 20, f-WGD)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from repens.methods.rule import FunctionSpaceRule, Rule, RuleState
from repens.methods.updates import StepContext, Update, function_space, grad_log_posterior
from repens.models.scores import SCORE_ESTIMATORS

__all__ = ["WGD", "FunctionWGD", "wgd", "fwgd", "build", "build_function_space"]

REGISTRY_ENTRY = {
    "name": "wgd",
    "order": 2,
    "options": ["estimator"],
    "estimator": True,
    "repulsive": True,
    "function_space": "fwgd",
}


def wgd(params: Tensor, ctx: StepContext, estimator: str = "kde", **estimator_options) -> Update:
    """Weight-space WGD, Eq. 13: ``phi_i = grad log p(w_i|D) - grad log rho(w_i)``.

    ``grad log rho`` from KDE (Eq. 15), SGE (Eq. 16) or SSGE (Eq. 17).
    """
    score = grad_log_posterior(params, ctx)
    density_score = SCORE_ESTIMATORS[estimator](params.detach(), ctx.kernel, **estimator_options)
    return Update(score - density_score, forces=lambda: (score, -density_score))


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
    flat, score, pull_back = function_space(params, ctx, prior_options, function_output)
    density_score = SCORE_ESTIMATORS[estimator](flat, ctx.kernel, **_estimator_options(eta, num_eigs))
    return Update(pull_back(score - density_score), forces=lambda: (score, -density_score), pull_back=pull_back)


def _estimator_options(eta: float | None, num_eigs: int | None) -> dict:
    options = {} if eta is None else {"eta": eta}
    if num_eigs is not None:
        options["num_eigs"] = num_eigs
    return options


@dataclass(frozen=True, kw_only=True)
class _Estimated:
    """The estimator of ``grad log rho`` (:data:`repens.models.scores.SCORE_ESTIMATORS`) and
    its options (``eta``: SGE's and SSGE's ridge; ``num_eigs``: SSGE's eigenfunctions, all
    by default; None: the estimator's default)."""

    estimator: str = "kde"
    eta: float | None = None
    num_eigs: int | None = None

    @property
    def graph_safe(self) -> bool:
        """SSGE with ``num_eigs`` set is not: ``torch.linalg.eigh`` checks its result on the
        host; with every eigenpair (the default) a GPU takes it by an inverse
        (:func:`repens.models.scores.all_eigenpairs_weights`)."""
        return not (self.estimator == "ssge" and self.num_eigs is not None)


@dataclass(frozen=True, kw_only=True)
class WGD(_Estimated, Rule):
    """WGD in weight space, Eq. 13 (:func:`wgd`): ``grad log p(w_i|D) - grad log rho(w_i)``."""

    def ascent(self, params: Tensor, ctx: StepContext, state: RuleState) -> Update:  # noqa: ARG002
        return wgd(params, ctx, self.estimator, **_estimator_options(self.eta, self.num_eigs))


@dataclass(frozen=True, kw_only=True)
class FunctionWGD(_Estimated, FunctionSpaceRule):
    """f-WGD, Eq. 5 with Eq. 20 (:func:`fwgd`): WGD on the outputs over the batch, pulled
    back to weights; the function prior as :class:`repens.methods.rule.FunctionSpaceRule`'s."""

    def ascent(self, params: Tensor, ctx: StepContext, state: RuleState) -> Update:  # noqa: ARG002
        return fwgd(params, ctx, self.estimator, self.eta, self.num_eigs, self.function_output, **self.prior_options())


build = WGD
build_function_space = FunctionWGD
