"""The HMC sampler's iteration, part by part: the trajectory length of an iteration, one
transition, the kept draws, the working state stored back for a checkpoint."""

import math

import torch

from repens.training.hmc import (
    HMCSettings,
    _Chains,
    _fresh_state,
    _keep_draw,
    _trajectory,
    _transition,
    van_der_corput,
)


def standard_normal(q):
    return -0.5 * (q * q).sum(-1), -q


def fresh(**settings):
    s = HMCSettings.from_dict({"chains": 3, "warmup": 4, "samples": 6, **settings})
    init = torch.randn(3, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return s, _fresh_state(standard_normal, init, s, seed=1)


def test_trajectory_learns_at_full_length_then_jitters():
    s, state = fresh()
    T, u, adapt = _trajectory(state, s, 0)
    assert (T, u, adapt) == (math.exp(state["log_T"]), 1.0, True)
    state["T_final"] = 2.5
    assert _trajectory(state, s, 4) == (2.5, van_der_corput(5), False)
    s, state = fresh(trajectory_length=2.0)
    assert _trajectory(state, s, 1) == (2.0, van_der_corput(2), False)


def test_transition_moves_the_chains_and_counts_the_gradients():
    s, state = fresh()
    chains = _Chains.of(state)
    before = state["stats"]["gradient_calls"]
    gen = torch.Generator()
    gen.set_state(state["generator"])
    tr = _transition(chains, state, s, 0, standard_normal, gen)
    assert tr.steps.shape == (3,) and tr.accept.shape == (3,) and tr.adapt_T
    assert state["stats"]["gradient_calls"] == before + int(tr.steps.max())
    logp, grad = standard_normal(chains.q)
    torch.testing.assert_close(chains.logp, logp)  # the accepted points' density and gradient
    torch.testing.assert_close(chains.grad, grad)


def test_keep_draw_follows_the_thinning():
    s, state = fresh(thin=2)
    chains = _Chains.of(state)
    tr = _transition(chains, state, s, 0, standard_normal, torch.Generator().manual_seed(0))
    kept = []
    for it in range(s.warmup, s.warmup + s.samples):
        chains.q = torch.full_like(chains.q, float(it))
        _keep_draw(chains, tr, state, s, it)
        kept.append(state["draws"][0, :, 0].tolist())
    assert s.kept == 3 and state["draws"][0, :, 0].tolist() == [5.0, 7.0, 9.0]
    assert int(state["stats"]["divergences"].sum()) == 6 * int(tr.divergent.sum())


def test_chains_are_stored_back_as_the_checkpointed_state():
    s, state = fresh()
    chains = _Chains.of(state)
    chains.q = chains.q + 1.0
    chains.store(state, 7)
    assert state["iteration"] == 7 and torch.equal(state["q"], chains.q)
    again = _Chains.of(state)
    assert again.da == chains.da and torch.equal(again.welford.mean, chains.welford.mean)
