"""The deep ensemble, Eq. 2: every member ascends its own log-posterior (MAP per member)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from repens.methods.rule import Rule, RuleState
from repens.methods.updates import StepContext, Update, grad_log_posterior

__all__ = ["DeepEnsemble", "ensemble", "build"]

REGISTRY_ENTRY = {"name": "ensemble", "order": 0}


def ensemble(params: Tensor, ctx: StepContext) -> Update:
    """Deep ensemble, Eq. 2: ``phi_i = grad log p(w_i | D)`` (MAP per member)."""
    return Update(grad_log_posterior(params, ctx))


@dataclass(frozen=True, kw_only=True)
class DeepEnsemble(Rule):
    """Deep ensemble, Eq. 2: ``phi_i = grad log p(w_i | D)``."""

    def ascent(self, params: Tensor, ctx: StepContext, state: RuleState) -> Update:  # noqa: ARG002
        return ensemble(params, ctx)


build = DeepEnsemble
