"""An update rule as one object: built from its options, then ``init(params) -> state`` and
``update(state, batch) -> (state, step)``, the shape of the transforms of ``posteriors``
(normal-computing).

A rule holds what does not change during a run: the posterior, the kernel, the optimizer
that ascends its direction (Adam in the paper; ``maximize=True``, so the ascent direction
``phi`` is its gradient as is) and the rule's own options. Its state holds what a run
moves: the particles, a leaf tensor (..., n, D) that the optimizer steps in place, the
optimizer's state, the random stream, and whatever else the rule keeps (an anchored
ensemble's anchors). ``update`` computes the direction ``phi`` at the particles
(:meth:`Rule.ascent`, the rule's equation), steps the optimizer and adds any noise of the
rule (the Langevin rules'); it returns the state and the :class:`repens.methods.updates.Update`
(the direction, and a repulsive rule's two forces for diagnostics).

Every rule of the registry (:mod:`repens.core.registry`) lives in one module of
:mod:`repens.methods.rules` that builds it: :func:`build` finds it from the rule's config
name and space.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

import torch
from torch import Tensor

from repens.core import registry
from repens.methods.optimizers import make_optimizer
from repens.methods.updates import StepContext, Update, function_space
from repens.models.kernels import RBF
from repens.models.posteriors import Batch, Posterior

__all__ = ["Rule", "FunctionSpaceRule", "RuleState", "build", "builder", "standard_normal", "OptimizerFactory"]

#: makes the optimizer of a run from its particles (a leaf tensor)
OptimizerFactory = Callable[[Tensor], torch.optim.Optimizer]


def standard_normal(params: Tensor, generator: torch.Generator) -> Tensor:
    """``Z ~ N(0, I)`` shaped like ``params``, drawn from ``generator`` on its device (then
    moved to the particles' device by the caller)."""
    return torch.randn(params.shape, generator=generator, dtype=params.dtype, device=generator.device)


@dataclass
class RuleState:
    """What a run of a rule moves: the particles (a leaf tensor the optimizer steps in
    place), their optimizer and the run's random stream (minibatches, prior draws, noise)."""

    params: Tensor
    optimizer: torch.optim.Optimizer
    generator: torch.Generator


@dataclass(frozen=True)
class Rule:
    """An update rule bound to a posterior (the base of every rule of :mod:`repens.methods.rules`).

    Args:
        posterior: what the particles sample (:class:`repens.models.posteriors.Posterior`).
        kernel: the kernel of a repulsive rule (RBF with the median heuristic by default).
        optimizer: ``"adam"`` or ``"sgd"`` (:func:`repens.methods.optimizers.make_optimizer`,
            fused, ascending), or a factory ``params -> torch.optim.Optimizer`` that ascends.
        lr: the optimizer's learning rate (a string ``optimizer`` only).
        noise: standard normal draws shaped like the particles, ``(params, generator) -> Z``,
            for a rule's noise (default :func:`standard_normal` from the state's stream).
    """

    posterior: Posterior
    _: KW_ONLY
    kernel: RBF = field(default_factory=RBF)
    optimizer: str | OptimizerFactory = "adam"
    lr: float = 1e-3
    noise: Callable[[Tensor, torch.Generator], Tensor] = standard_normal

    # ------------------------------------------------------------------ the rule's own part
    def ascent(self, params: Tensor, ctx: StepContext, state: RuleState) -> Update:  # noqa: ARG002
        """The ascent direction ``phi`` (..., n, D) at ``params``: the rule's equation."""
        raise NotImplementedError

    @property
    def graph_safe(self) -> bool:
        """Whether a step can be captured as a CUDA graph (:mod:`repens.training.step_graph`):
        nothing in it waits for the host."""
        return True

    def potential(self) -> tuple[float, float]:
        """The weights of the prior and of DRLE's MMD term in the potential ``V`` whose
        curvature sets a Langevin step (:func:`repens.methods.step_size.langevin_step_size`):
        likelihood plus prior, no MMD, for every rule but the Langevin ones."""
        return 1.0, 0.0

    # ------------------------------------------------------------------ the run
    def init(self, params: Tensor, generator: torch.Generator | None = None) -> RuleState:
        """The state of a run from the particles ``params`` (..., n, D), copied into a leaf
        tensor, with their optimizer; ``generator``: the run's random stream (default: a new
        one seeded 0 on the particles' device)."""
        leaf = params.detach().clone().requires_grad_(True)
        if generator is None:
            generator = torch.Generator(device=params.device).manual_seed(0)
        return RuleState(leaf, self.make_optimizer(leaf), generator)

    def make_optimizer(self, params: Tensor) -> torch.optim.Optimizer:
        if isinstance(self.optimizer, str):
            return make_optimizer(self.optimizer, params, self.lr)
        return self.optimizer(params)

    def context(self, state: RuleState, batch: Batch | None) -> StepContext:
        return StepContext(self.posterior, self.kernel, state.generator, batch)

    def direction(self, state: RuleState, batch: Batch | None = None) -> Update:
        """The rule's :class:`Update` at the state's particles on ``batch``; nothing moves."""
        return self.ascent(state.params.detach(), self.context(state, batch), state)

    def update(self, state: RuleState, batch: Batch | None = None) -> tuple[RuleState, Update]:
        """One step: the direction on ``batch``, then the optimizer's step along it (the
        particles move in place). Returns the state and the update."""
        result = self.direction(state, batch)
        state.params.grad = result.direction
        state.optimizer.step()
        return state, result


def builder(rule: str, space: str = "weight") -> Callable[..., Rule]:
    """What builds rule ``rule`` (a config ``rule``) in ``space``: its module's ``build``
    (``build_function_space`` for ``space: function``), or the builder it was registered with."""
    if space not in registry.SPACES:
        raise ValueError(f"unknown space {space!r}; use 'weight' or 'function'")
    spec = registry.rule(rule)
    if space == "function" and spec.function_space is None:
        raise ValueError(f"rule {rule!r} has no function-space form; only {sorted(registry.function_space_rules())} do")
    if spec.module is None:
        return spec.builders[space]
    module = importlib.import_module(f"repens.methods.rules.{spec.module}")
    return getattr(module, "build_function_space" if space == "function" else "build")


def build(rule: str, space: str = "weight", /, posterior: Posterior | None = None, **options) -> Rule:
    """Rule ``rule`` in ``space`` bound to ``posterior`` with ``options`` (its own, as a
    method entry of the config gives them, and :class:`Rule`'s: ``kernel``, ``optimizer``,
    ``lr``, ``noise``)."""
    return builder(rule, space)(posterior, **options)


@dataclass(frozen=True, kw_only=True)
class FunctionSpaceRule(Rule):
    """A rule on the network's outputs on the batch (Sec. 3.3): its kernel and scores see
    ``f`` (..., n, B*C), its direction is pulled back to weights with the Jacobian
    (:func:`repens.methods.updates.function_space`). The function prior's options are those
    of :func:`repens.methods.updates.function_prior_score`."""

    #: ``ssge``: SSGE on the outputs of networks drawn from the weight prior; ``gp``: a GP prior
    function_prior: str = "ssge"
    #: prior draws per step (default: as many as particles)
    prior_samples: int | None = None
    #: the SSGE prior's ridge
    prior_eta: float = 0.01
    #: the GP prior's RBF lengthscale and variance
    gp_lengthscale: float = 1.0
    gp_variance: float = 1.0
    #: which output the kernel and scores see: the ``logits`` or their ``softmax``
    #: (:data:`repens.methods.updates.FUNCTION_OUTPUTS`)
    function_output: str = "logits"

    def prior_options(self) -> dict:
        return {
            "function_prior": self.function_prior,
            "prior_samples": self.prior_samples,
            "prior_eta": self.prior_eta,
            "gp_lengthscale": self.gp_lengthscale,
            "gp_variance": self.gp_variance,
        }

    def outputs(self, params: Tensor, ctx: StepContext):
        """The outputs (..., n, B*C), ``grad_f log p(f | D)`` there and the pull-back to weights."""
        return function_space(params, ctx, self.prior_options(), self.function_output)
