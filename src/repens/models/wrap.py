"""Any ``torch.nn.Module`` as the posterior of a particle ensemble, in one call.

:func:`ensemble` wraps a module functionally (:class:`repens.models.particles.StackedModel`:
each particle is one row of a (n, D) matrix, cut into the module's parameters and run
through ``torch.func.functional_call`` under ``torch.func.vmap``; a plain MLP takes a
faster batched path) and gives it a likelihood and a prior: the built-in Gaussian and
categorical likelihoods and the isotropic Gaussian prior in closed form
(:class:`repens.models.posteriors.NetworkPosterior`), or plain callables
(:class:`ModulePosterior`), whose gradients are taken by autograd. The result is a
:class:`repens.models.posteriors.Posterior`, what every update rule takes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from repens.models.particles import StackedModel
from repens.models.posteriors import Batch, NetworkPosterior, autograd_gradient, log_softmax_classes

__all__ = ["ensemble", "ModulePosterior", "gaussian_log_likelihood", "categorical_log_likelihood"]

#: ``likelihood(outputs, y) -> log p(y_b | f_b)``: outputs (..., n, B, C), labels or targets
#: (B,) or (B, ...), one log-likelihood per particle and example (..., n, B)
Likelihood = Callable[[Tensor, Tensor], Tensor]


def gaussian_log_likelihood(noise_std: float) -> Likelihood:
    """``log N(y_b | f_b, noise_std^2)`` per example, for one output (a regression)."""

    def log_likelihood(outputs: Tensor, y: Tensor) -> Tensor:
        resid = (outputs.squeeze(-1) - y.reshape(y.shape[0], -1).squeeze(-1)) / noise_std
        return -0.5 * resid**2 - math.log(noise_std) - 0.5 * math.log(2 * math.pi)

    return log_likelihood


def categorical_log_likelihood(outputs: Tensor, y: Tensor) -> Tensor:
    """``log softmax(f_b)[y_b]`` per example (a classification on logits)."""
    labels = y.long().reshape(1, -1, 1).expand(*outputs.shape[:-1], 1)
    return log_softmax_classes(outputs).gather(-1, labels).squeeze(-1)


_PER_EXAMPLE = {"categorical": lambda noise_std: categorical_log_likelihood, "gaussian": gaussian_log_likelihood}


@dataclass(frozen=True)
class ModulePosterior(NetworkPosterior):
    """``p(w | D)`` for a stacked module with a likelihood and, optionally, a prior given as
    plain callables; what is not given is :class:`NetworkPosterior`'s (the Gaussian prior
    ``N(0, prior_std^2 I)``).

    Args:
        likelihood: ``(outputs, y) -> log p(y_b | f_b)`` per particle and example (..., n, B);
            a batch's sum is scaled to the data set by ``num_train / B``. Its gradient with
            respect to the outputs is taken by autograd.
        prior: ``params (..., n, D) -> log p(w)`` (..., n); its gradient by autograd. None:
            the Gaussian prior of ``prior_std``.
        prior_sample: ``(n, generator) -> (n, D)`` draws from ``prior`` (for a rule that draws
            from it: DRLE, the SSGE function prior; and the initial particles).
    """

    prior: Callable[[Tensor], Tensor] | None = None
    prior_sample: Callable[[int, torch.Generator], Tensor] | None = None

    def __post_init__(self) -> None:
        if not callable(self.likelihood):
            raise TypeError(f"likelihood must be a callable (outputs, y) -> log p(y | f), not {self.likelihood!r}")

    def log_likelihood_outputs(self, outputs: Tensor, batch: Batch) -> Tensor:
        return (self.num_train / outputs.shape[-2]) * self.likelihood(outputs, batch.y).sum(-1)

    def output_grad_log_likelihood(self, outputs: Tensor, batch: Batch) -> Tensor:
        return autograd_gradient(lambda f: self.log_likelihood_outputs(f, batch), outputs)

    def log_prior(self, params: Tensor) -> Tensor:
        return super().log_prior(params) if self.prior is None else self.prior(params)

    def grad_log_prior(self, params: Tensor) -> Tensor:
        return super().grad_log_prior(params) if self.prior is None else autograd_gradient(self.prior, params)

    def add_grad_log_prior_(self, out: Tensor, params: Tensor, scale: float = 1.0) -> Tensor:
        if self.prior is None:
            return super().add_grad_log_prior_(out, params, scale)
        prior = self.grad_log_prior(params)
        return out.add_(prior if scale == 1.0 else scale * prior)

    def sample_prior(self, n: int, generator: torch.Generator) -> Tensor:
        if self.prior is None:
            return super().sample_prior(n, generator)
        if self.prior_sample is None:
            raise TypeError("this prior has no sampler: give prior_sample=(n, generator) -> (n, D) draws")
        return self.prior_sample(n, generator)


def ensemble(
    module: nn.Module,
    *,
    likelihood: str | Likelihood,
    num_train: int,
    prior: float | Tensor | Callable[[Tensor], Tensor] = 1.0,
    prior_sample: Callable[[int, torch.Generator], Tensor] | None = None,
    noise_std: float = 1.0,
    input_shape: tuple[int, ...] | None = None,
    chunk_size: int | None = None,
) -> NetworkPosterior:
    """The posterior of particles that are copies of ``module``'s parameters, each a row
    (D,) of the particle matrix; draw the particles from it (``sample_prior(n, generator)``)
    and hand it to a rule.

    Args:
        module: any network; its own parameter values are never used (the rows replace them).
        likelihood: ``"categorical"`` (logits), ``"gaussian"`` (one output, noise sd
            ``noise_std``), or a callable ``(outputs, y) -> log p(y_b | f_b)`` per example.
        num_train: N, the training set's size.
        prior: the sd of an isotropic Gaussian prior (a number, or a tensor (D,) per weight),
            or a callable log-density ``params -> log p(w)`` (then ``prior_sample`` draws from it).
        input_shape: one example's shape; lets a ``Sequential(Flatten(), MLP)`` take the
            batched MLP path.
        chunk_size: ``vmap``'s chunk size over particles (bounds memory on large modules).
    """
    model = StackedModel(module, chunk_size=chunk_size, input_shape=input_shape)
    if isinstance(likelihood, str) and not callable(prior):
        return NetworkPosterior(model, likelihood, num_train, prior_std=prior, noise_std=noise_std)
    if isinstance(likelihood, str):
        if likelihood not in _PER_EXAMPLE:
            raise ValueError(f"unknown likelihood {likelihood!r}; known: {sorted(_PER_EXAMPLE)} or a callable")
        likelihood = _PER_EXAMPLE[likelihood](noise_std)
    if callable(prior):
        return ModulePosterior(model, likelihood, num_train, prior=prior, prior_sample=prior_sample)
    return ModulePosterior(model, likelihood, num_train, prior_std=prior)
