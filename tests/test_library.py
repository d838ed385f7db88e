"""The library's front door: ``import repens`` stays light, ``repens.ensemble`` wraps any
module, and a likelihood or a prior given as a plain callable gives the posterior its
closed forms would."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import repens
from repens.models.wrap import ModulePosterior, categorical_log_likelihood, gaussian_log_likelihood

ROOT = Path(__file__).resolve().parents[1]


def test_import_repens_imports_no_torch_until_a_name_is_used():
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'src')!r}); import repens; "
        "assert 'torch' not in sys.modules; repens.SVGD; assert 'torch' in sys.modules; print(repens.__version__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        repens.nothing  # noqa: B018


def _data(outputs: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(12, 3, generator=g, dtype=torch.float64)
    y = torch.randn(12, generator=g, dtype=torch.float64) if outputs == 1 else torch.randint(0, outputs, (12,))
    return repens.Batch(x, y), g


@pytest.mark.parametrize("likelihood,outputs", [("gaussian", 1), ("categorical", 4)])
def test_a_callable_likelihood_gives_the_closed_forms_posterior(likelihood, outputs):
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, outputs)).double()
    closed = repens.ensemble(net, likelihood=likelihood, num_train=40, prior=0.7, noise_std=0.3)
    per_example = gaussian_log_likelihood(0.3) if likelihood == "gaussian" else categorical_log_likelihood
    own = repens.ensemble(net, likelihood=per_example, num_train=40, prior=0.7)
    assert type(closed) is repens.NetworkPosterior and type(own) is ModulePosterior
    batch, g = _data(outputs)
    params = closed.sample_prior(5, g).double()
    torch.testing.assert_close(own.log_likelihood(params, batch), closed.log_likelihood(params, batch))
    torch.testing.assert_close(own.grad_log_likelihood(params, batch), closed.grad_log_likelihood(params, batch))
    torch.testing.assert_close(own.grad_log_prior(params), closed.grad_log_prior(params))


def test_a_callable_prior_is_differentiated_and_drawn_from_its_sampler():
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)).double()
    dim = sum(p.numel() for p in net.parameters())

    def laplace(params):  # log density of iid Laplace(0, 0.5) weights, up to a constant
        return -params.abs().sum(-1) / 0.5

    def draw(n, generator):
        u = torch.rand(n, dim, generator=generator, dtype=torch.float64) - 0.5
        return -0.5 * u.sign() * torch.log1p(-2 * u.abs())

    posterior = repens.ensemble(net, likelihood="gaussian", num_train=12, prior=laplace, prior_sample=draw)
    batch, g = _data(1)
    params = posterior.sample_prior(6, g)
    assert params.shape == (6, dim)
    torch.testing.assert_close(posterior.grad_log_prior(params), -params.sign() / 0.5)
    out = params.new_ones(params.shape)
    torch.testing.assert_close(posterior.add_grad_log_prior_(out, params, 2.0), 1 - 2 * params.sign() / 0.5)
    drle = repens.Langevin(posterior, temperature=1.0, mmd_weight=1.0, optimizer="sgd", lr=1e-4)
    state, step = drle.update(drle.init(params, g), batch)  # draws from the prior (the MMD term)
    assert torch.isfinite(state.params).all() and step.forces is not None
    without = repens.ensemble(net, likelihood="gaussian", num_train=12, prior=laplace)
    with pytest.raises(TypeError, match="prior_sample"):
        without.sample_prior(2, g)


def test_a_network_other_than_an_mlp_runs_through_vmap_and_its_gradient_is_each_particles_own():
    net = nn.Sequential(nn.Conv1d(1, 2, 3), nn.Tanh(), nn.Flatten(), nn.Linear(2 * 3, 3)).double()
    posterior = repens.ensemble(net, likelihood="categorical", num_train=10, prior=1.0)
    assert not posterior.model.is_mlp
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 1, 5, generator=g, dtype=torch.float64)
    batch = repens.Batch(x, torch.tensor([0, 2, 1, 1]))
    params = posterior.sample_prior(3, g).double()
    grads = posterior.grad_log_likelihood(params, batch)
    for i in range(3):
        row = params[i].clone().requires_grad_(True)
        logp = posterior.log_likelihood(row.unsqueeze(0), batch).sum()
        torch.testing.assert_close(grads[i], torch.autograd.grad(logp, row)[0])


def test_a_rule_step_from_the_front_door_is_the_optimizers_step_along_its_direction():
    posterior = repens.ensemble(nn.Linear(3, 1).double(), likelihood="gaussian", num_train=12, noise_std=0.5)
    batch, g = _data(1)
    rule = repens.SVGD(posterior, optimizer="sgd", lr=0.01)
    state = rule.init(posterior.sample_prior(4, g).double(), g)
    before = state.params.detach().clone()
    state, step = rule.update(state, batch)
    torch.testing.assert_close(state.params.detach(), before + 0.01 * step.direction)
    assert math.isfinite(float(step.direction.sum()))
