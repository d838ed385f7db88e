"""The anchored ensemble (Pearce et al. 2020, Algorithm 1 and Eq. 11): each member a MAP
fit whose prior is recentred on the member's own prior draw, its anchor."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from repens.methods.rule import Rule, RuleState
from repens.methods.updates import StepContext, Update, add_grad_log_prior, grad_log_likelihood

__all__ = ["Anchored", "AnchoredState", "anchored", "ANCHOR_DIVISORS", "build"]

REGISTRY_ENTRY = {"name": "anchored", "order": 3, "options": ["anchor_divisor"]}

#: what divides the anchoring term of the anchored ensemble's minibatch loss
ANCHOR_DIVISORS = ("n_train", "batch")


def anchored(params: Tensor, ctx: StepContext, anchors: Tensor | None, anchor_divisor: str = "n_train") -> Update:
    """Anchored ensemble (Pearce et al. 2020, Eq. 11): MAP with the prior recentred on each
    member's own prior draw ``w0_i`` (``anchors``, (..., n, D)).

    For the zero-mean Gaussian prior, ``grad log N(w; w0, S) = grad log p(w - w0)``.

    ``anchor_divisor``: ``"n_train"`` is Eq. 11, whose loss divides the anchoring term by N
    as it does the squared errors, so the anchor acts as the prior. ``"batch"`` is what
    Pearce et al.'s published code does (github TeaPearce/Bayesian_NN_Ensembles,
    ``regression/module_NN_ens.py``): the minibatch loss divides the anchoring term by the
    batch size B, a prior N / B times stronger than Eq. 11's.
    """
    if anchors is None:
        raise ValueError("the anchored rule needs anchors (one prior draw per member)")
    if anchor_divisor not in ANCHOR_DIVISORS:
        raise ValueError(f"anchor_divisor {anchor_divisor!r}; known: {list(ANCHOR_DIVISORS)}")
    scale = (
        ctx.posterior.num_train / ctx.batch.x.shape[-2] if anchor_divisor == "batch" and ctx.batch is not None else 1.0
    )
    return Update(add_grad_log_prior(grad_log_likelihood(params, ctx), params - anchors, ctx, scale))


@dataclass
class AnchoredState(RuleState):
    """A run of the anchored ensemble: besides the particles, each member's anchor."""

    #: (..., n, D): the particles the run started from, each member's prior draw
    anchors: Tensor | None = None


@dataclass(frozen=True, kw_only=True)
class Anchored(Rule):
    """Anchored ensemble (:func:`anchored`): the particles given to :meth:`init` are the
    members' prior draws and stay their anchors (Pearce et al.: anchor = initial draw)."""

    anchor_divisor: str = "n_train"

    def init(self, params: Tensor, generator: torch.Generator | None = None) -> AnchoredState:
        state = super().init(params, generator)
        return AnchoredState(state.params, state.optimizer, state.generator, anchors=params.detach().clone())

    def ascent(self, params: Tensor, ctx: StepContext, state: AnchoredState) -> Update:
        return anchored(params, ctx, state.anchors, self.anchor_divisor)


build = Anchored
