"""Unnormalised posteriors seen by the update rules.

An update rule needs, for stacked particles ``params`` (n, D) and a minibatch:
the log-likelihood (scaled to the whole data set, N / B times the batch sum),
the log-prior, prior draws, and for function-space rules the network outputs and
the likelihood as a function of those outputs. :class:`TargetPosterior` wraps a
synthetic density (no data, no prior); :class:`NetworkPosterior` a Bayesian
neural network with an isotropic Gaussian prior.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from repens.models.kernels import gpu_path
from repens.models.particles import StackedModel
from repens.models.targets import Target

__all__ = [
    "Batch",
    "Posterior",
    "autograd_gradient",
    "AutogradPosterior",
    "TargetPosterior",
    "NetworkPosterior",
    "gaussian_log_likelihood",
    "categorical_log_likelihood",
    "LIKELIHOODS",
    "OUTPUT_GRADS",
]


@dataclass(frozen=True)
class Batch:
    x: Tensor
    y: Tensor


class Posterior(Protocol):
    """Everything an update rule reads of the posterior ``p(w | D)`` of stacked particles
    ``params`` (..., n, D): log-densities (..., n) and their gradients (..., n, D).

    The weight-space rules use the likelihood's and the prior's gradients; the rules that
    draw from the prior (DRLE's MMD term, the SSGE function prior) :meth:`sample_prior`;
    the function-space rules the network's outputs on a batch (:meth:`predict`,
    :meth:`outputs_with_pullback`) and the likelihood's gradient there. A posterior that
    cannot answer one (a synthetic target has no network) raises ``TypeError`` saying so.
    :class:`repens.models.wrap.ModulePosterior` makes one of any module with a likelihood
    and a prior given as plain callables.
    """

    #: N, the training set's size (a batch's log-likelihood is scaled by N / B)
    num_train: int

    def log_likelihood(self, params: Tensor, batch: Batch | None) -> Tensor:
        """``log p(D | w_i)`` (..., n), a batch's scaled to the whole data set."""

    def grad_log_likelihood(self, params: Tensor, batch: Batch | None) -> Tensor:
        """Its gradient (..., n, D)."""

    def log_prior(self, params: Tensor) -> Tensor:
        """``log p(w_i)`` (..., n)."""

    def grad_log_prior(self, params: Tensor) -> Tensor:
        """Its gradient (..., n, D)."""

    def add_grad_log_prior_(self, out: Tensor, params: Tensor, scale: float = 1.0) -> Tensor:
        """``out += scale * grad log p(params)`` in place; returns ``out``."""

    def sample_prior(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` draws (n, D) from the prior, from ``generator``."""

    def predict(self, params: Tensor, x: Tensor) -> Tensor:
        """The networks' outputs (..., n, B, C) on inputs ``x``."""

    def outputs_with_pullback(self, params: Tensor, x: Tensor) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        """The outputs on ``x`` and their vector-Jacobian product ``v -> (df/dw)^T v`` (..., n, D)."""

    def output_grad_log_likelihood(self, outputs: Tensor, batch: Batch) -> Tensor:
        """``d/df log p(y | f)`` at ``outputs`` (scaled as :meth:`log_likelihood`)."""

    def probability_grad_log_likelihood(self, probs: Tensor, batch: Batch) -> Tensor:
        """The categorical likelihood's score with respect to the class probabilities."""


def autograd_gradient(fn: Callable[[Tensor], Tensor], params: Tensor) -> Tensor:
    """Gradient of ``fn(params).sum()``; particles are independent so row i is grad_i."""
    with torch.enable_grad():
        p = params.detach().requires_grad_(True)
        value = fn(p).sum()
        if not value.requires_grad:  # a constant (e.g. the flat prior of a synthetic target)
            return torch.zeros_like(p)
        return torch.autograd.grad(value, p)[0]


def _no_network(what: str) -> TypeError:
    return TypeError(f"a density without a network has no {what}: function-space rules need a network posterior")


class AutogradPosterior:
    """A posterior known by its log-densities alone (``log_likelihood``, ``log_prior``, from
    the subclass): their gradients by autograd, no network, no training set, no prior draws."""

    @property
    def num_train(self) -> int:
        raise TypeError(f"{type(self).__name__} has no training set (num_train)")

    def grad_log_likelihood(self, params: Tensor, batch: Batch | None = None) -> Tensor:
        return autograd_gradient(lambda p: self.log_likelihood(p, batch), params)

    def grad_log_prior(self, params: Tensor) -> Tensor:
        return autograd_gradient(self.log_prior, params)

    def add_grad_log_prior_(self, out: Tensor, params: Tensor, scale: float = 1.0) -> Tensor:
        prior = self.grad_log_prior(params)
        return out.add_(prior if scale == 1.0 else scale * prior)

    def sample_prior(self, n: int, generator: torch.Generator) -> Tensor:
        raise TypeError(f"{type(self).__name__} has no prior to draw from; use a rule without prior draws")

    def predict(self, params: Tensor, x: Tensor) -> Tensor:
        raise _no_network("outputs")

    def outputs_with_pullback(self, params: Tensor, x: Tensor) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        raise _no_network("outputs")

    def output_grad_log_likelihood(self, outputs: Tensor, batch: Batch) -> Tensor:
        raise _no_network("outputs")

    def probability_grad_log_likelihood(self, probs: Tensor, batch: Batch) -> Tensor:
        raise _no_network("outputs")


@dataclass(frozen=True)
class TargetPosterior(AutogradPosterior):
    """A synthetic density treated as the 'likelihood' with a flat prior (no data, no network)."""

    target: Target

    def log_likelihood(self, params: Tensor, batch: Batch | None = None) -> Tensor:
        return self.target.log_prob(params)

    def log_prior(self, params: Tensor) -> Tensor:
        return params.new_zeros(params.shape[:-1])

    def grad_log_prior(self, params: Tensor) -> Tensor:
        return torch.zeros_like(params)

    def add_grad_log_prior_(self, out: Tensor, params: Tensor, scale: float = 1.0) -> Tensor:
        return out

    def sample_prior(self, n: int, generator: torch.Generator) -> Tensor:
        raise TypeError("a synthetic target has no prior; use a weight-space rule without one")


def _targets(y: Tensor, outputs: Tensor) -> Tensor:
    """Targets (B,), (B, 1) or one row per set of a stack (..., B), as (..., 1, B) against
    outputs (..., n, B, C)."""
    sets = outputs.dim() - 3  # leading axes before (n, B, C)
    y = y.reshape(*y.shape[:sets], -1) if sets and y.dim() > sets else y.reshape(-1)
    return y.unsqueeze(-2)


def gaussian_log_likelihood(outputs: Tensor, y: Tensor, noise_std: float) -> Tensor:
    """Sum over the batch of log N(y | f, noise_std^2); outputs (..., n, B, 1), y (B,), (B, 1)
    or (..., B)."""
    resid = outputs.squeeze(-1) - _targets(y, outputs)
    return (-0.5 * (resid / noise_std) ** 2 - math.log(noise_std) - 0.5 * math.log(2 * math.pi)).sum(-1)


def categorical_log_likelihood(outputs: Tensor, y: Tensor, noise_std: float | None = None) -> Tensor:
    """Sum over the batch of the softmax log-probability of the labels; outputs (..., n, B, C) logits."""
    logp = log_softmax_classes(outputs)
    labels = _targets(y, outputs).long().expand(outputs.shape[:-1]).unsqueeze(-1)
    return logp.gather(-1, labels).squeeze(-1).sum(-1)


LIKELIHOODS = {"gaussian": gaussian_log_likelihood, "categorical": categorical_log_likelihood}


def gaussian_output_grad(outputs: Tensor, y: Tensor, noise_std: float) -> Tensor:
    """``d/df`` of :func:`gaussian_log_likelihood`: ``(y - f) / noise_std^2``, shaped like ``outputs``."""
    return (_targets(y, outputs).unsqueeze(-1) - outputs).div_(noise_std**2)


#: Below this many classes, softmax over the last dimension is computed across a transposed copy
#: (CPU kernels vectorise the last dimension only from a SIMD width of classes: measured with
#: torch 2.14 on AVX-512, (100, 64, C) took 570 us at C = 5 and 1020 us at C = 10 over the last
#: dimension, 90 us over the other; from C = 16 on the last dimension is as fast or faster).
_SMALL_SOFTMAX = 16


def _over_classes(op: Callable[..., Tensor], logits: Tensor) -> Tensor:
    """``op(logits, dim=-1)``; below :data:`_SMALL_SOFTMAX` classes on the CPU across a
    transposed copy (the same values to float rounding)."""
    if logits.shape[-1] >= _SMALL_SOFTMAX or logits.dim() < 2 or gpu_path(logits):
        return op(logits, dim=-1)
    return op(logits.transpose(-1, -2).contiguous(), dim=-2).transpose(-1, -2)


def softmax_classes(logits: Tensor) -> Tensor:
    """``softmax(logits, dim=-1)``, fast for few classes (see :data:`_SMALL_SOFTMAX`)."""
    return _over_classes(torch.softmax, logits)


def log_softmax_classes(logits: Tensor) -> Tensor:
    """``log_softmax(logits, dim=-1)``, fast for few classes as :func:`softmax_classes`."""
    return _over_classes(F.log_softmax, logits)


def categorical_output_grad(outputs: Tensor, y: Tensor, noise_std: float | None = None) -> Tensor:
    """``d/dlogits`` of :func:`categorical_log_likelihood`: ``onehot(y) - softmax(logits)``."""
    grad = softmax_classes(outputs).neg_()
    labels = _targets(y, outputs).long().expand(outputs.shape[:-1]).unsqueeze(-1)
    return grad.scatter_add_(-1, labels, torch.ones_like(labels, dtype=grad.dtype))


#: what the released code adds to a probability inside its log (``log(p + 1e-15)``)
PROBABILITY_FLOOR = 1e-15

#: each likelihood's gradient with respect to the network outputs, in closed form
OUTPUT_GRADS = {"gaussian": gaussian_output_grad, "categorical": categorical_output_grad}


@dataclass(frozen=True)
class NetworkPosterior:
    """p(w | D) for a network with likelihood ``likelihood`` and prior N(0, prior_std^2 I).

    Args:
        model: the stacked network.
        likelihood: ``"gaussian"`` (regression, noise sd ``noise_std``) or ``"categorical"``.
        num_train: N, used to scale a batch log-likelihood by N / B.
        prior_std: standard deviation of the Gaussian weight prior: a number (isotropic),
            a tensor (n, 1) giving each particle its own (hyper-deep ensembles' L2
            strengths) or a tensor (D,) giving each weight its own (a per-layer prior).
        noise_std: observation noise sd of the Gaussian likelihood.
    """

    model: StackedModel
    likelihood: str
    num_train: int
    prior_std: float | Tensor = 1.0
    noise_std: float = 1.0
    #: ``prior_std ** 2`` by (dtype, device), see :meth:`_variance`
    _variances: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.likelihood not in LIKELIHOODS:
            raise ValueError(f"unknown likelihood {self.likelihood!r}; known: {sorted(LIKELIHOODS)}")

    def predict(self, params: Tensor, x: Tensor) -> Tensor:
        return self.model(params, x)

    def log_likelihood_outputs(self, outputs: Tensor, batch: Batch) -> Tensor:
        """Full-data-scaled log-likelihood from network outputs (..., n, B, C)."""
        scale = self.num_train / outputs.shape[-2]
        return scale * LIKELIHOODS[self.likelihood](outputs, batch.y, self.noise_std)

    def log_likelihood(self, params: Tensor, batch: Batch) -> Tensor:
        return self.log_likelihood_outputs(self.predict(params, batch.x), batch)

    def outputs_with_pullback(self, params: Tensor, x: Tensor) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        """The outputs (..., n, B, C) on ``x`` and their vector-Jacobian product
        ``v -> sum_b (d f_i(x_b) / d w_i)^T v_ib`` (..., n, D): written out for an MLP stack
        (:meth:`StackedModel.backward`, no autograd graph), by autograd otherwise."""
        params = params.detach()
        if self.model.is_mlp:
            outputs, inputs = self.model.forward_saving_inputs(params, x)
            return outputs, lambda v: self.model.backward(params, inputs, v)
        # copies of the particles and the batch: the step updates the particles in place, and a
        # captured step's replay refills its batch buffer in place (repens.training.step_graph),
        # so the graph's saved tensors would be stale; a copy is the step's own, also after it
        p = params.clone().requires_grad_(True)
        with torch.enable_grad():
            outputs = self.model(p, x.clone())
        # retain_graph: the pull-back may be called again for a diagnostic after the step
        # (repens.methods.updates.preconditioned_repulsion_ratio); the graph goes with the update
        return outputs.detach(), lambda v: torch.autograd.grad(outputs, p, grad_outputs=v, retain_graph=True)[0]

    def output_grad_log_likelihood(self, outputs: Tensor, batch: Batch) -> Tensor:
        """``d/df`` of :meth:`log_likelihood_outputs` (full-data scaled) in closed form (:data:`OUTPUT_GRADS`)."""
        scale = self.num_train / outputs.shape[-2]
        return OUTPUT_GRADS[self.likelihood](outputs, batch.y, self.noise_std).mul_(scale)

    def probability_grad_log_likelihood(self, probs: Tensor, batch: Batch) -> Tensor:
        """The categorical likelihood's score with respect to the class probabilities ``probs``
        (..., n, B, C), as the authors' released code computes it on softmax outputs
        (``utils/distributions.py``, ``pred_idx=0``): ``d/dp [N/B sum_b log(p_b,y_b + 1e-15)]``,
        ``N/B / (p_b,y_b + 1e-15)`` at each example's label and 0 elsewhere."""
        if self.likelihood != "categorical":
            raise ValueError(f"a rule on softmax outputs needs the categorical likelihood, not {self.likelihood!r}")
        scale = self.num_train / probs.shape[-2]
        labels = _targets(batch.y, probs).long().expand(probs.shape[:-1]).unsqueeze(-1)
        at_label = probs.gather(-1, labels).add_(PROBABILITY_FLOOR).reciprocal_().mul_(scale)
        return torch.zeros_like(probs).scatter_(-1, labels, at_label)

    def grad_log_likelihood(self, params: Tensor, batch: Batch) -> Tensor:
        """The full-data-scaled log-likelihood's gradient (..., D): the likelihood's output
        gradient in closed form, pulled back through the network (one vector-Jacobian product)."""
        outputs, pull_back = self.outputs_with_pullback(params, batch.x)
        return pull_back(self.output_grad_log_likelihood(outputs, batch))

    def log_prior(self, params: Tensor) -> Tensor:
        std = torch.as_tensor(self.prior_std, dtype=params.dtype, device=params.device)
        if std.dim() == 0:
            d = params.shape[-1]
            return -0.5 * (params / std).pow(2).sum(-1) - d * (std.log() + 0.5 * math.log(2 * math.pi))
        # per-particle (n, 1) or per-weight (D,) scales broadcast against params (n, D)
        return (-0.5 * (params / std).pow(2) - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)

    def grad_log_prior(self, params: Tensor) -> Tensor:
        """``-params / std^2``, the gradient of :meth:`log_prior` in closed form (no autograd
        graph: one elementwise pass over the particle matrix)."""
        return params / -self._variance(params)

    def add_grad_log_prior_(self, out: Tensor, params: Tensor, scale: float = 1.0) -> Tensor:
        """``out += scale * grad log p(params)`` in place, one pass and no temporary
        (``addcdiv``: ``out + (-scale * params) / std^2``; for ``scale`` 1 the very rounding of
        ``out + grad_log_prior(params)``, since only the sign differs before the division)."""
        return out.addcdiv_(params, self._variance(params), value=-scale)

    def _variance(self, params: Tensor) -> Tensor:
        """``std^2`` in ``params``' dtype on its device, squared there (as :meth:`log_prior`
        rounds it). Made at the first call for a dtype and device and kept: a number's
        tensor is a host-to-device copy (``lift_fresh``), which a CUDA graph's capture cannot
        hold, and the first step of a run is eager (:data:`repens.training.step_graph.WARMUP_STEPS`)."""
        key = (params.dtype, params.device)
        variance = self._variances.get(key)
        if variance is None:
            std = torch.as_tensor(self.prior_std, dtype=params.dtype, device=params.device)
            variance = self._variances[key] = std * std
        return variance

    def sample_prior(self, n: int, generator: torch.Generator) -> Tensor:
        std = self.prior_std
        if isinstance(std, Tensor) and std.dim() == 2 and std.shape[0] != n:
            raise ValueError(f"{std.shape[0]} per-particle prior scales but {n} draws requested")
        if isinstance(std, Tensor):
            std = std.to(generator.device)
        return self.model.sample_gaussian(n, std, generator)
