"""Batched HMC reference sampler: its pieces, the Vehtari et al. (2021) diagnostics, a
known Gaussian, non-mixing chains, bit-identical resume, and toy end-to-end runs."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from repens.data.toy import make_toy
from repens.experiments.hmc import run_hmc, value_and_grad
from repens.experiments.toy import toy_posterior
from repens.models.posteriors import Batch
from repens.training.hmc import (
    HMCDiagnosticsError,
    HMCSettings,
    adaptation_windows,
    check_diagnostics,
    dual_averaging_init,
    dual_averaging_update,
    ess_basic,
    ess_bulk,
    ess_tail,
    kinetic_energy,
    leapfrog,
    predictive_diagnostics,
    rhat_rank,
    sample_hmc,
    van_der_corput,
)
from repens.training.train import Interrupted


# ----------------------------------------------------------------------------- targets
def gaussian(mean: torch.Tensor, cov: torch.Tensor):
    """value_and_grad of N(mean, cov) for (C, D) rows."""
    prec = torch.linalg.inv(cov)

    def fn(q):
        d = q - mean
        pd = d @ prec
        return -0.5 * (d * pd).sum(-1), -pd

    return fn


def correlated_gaussian(dim: int = 10, seed: int = 0):
    """A correlated, ill-conditioned Gaussian: random rotation of scales 0.01 .. 3 (variance
    condition number 9e4), mean away from 0."""
    g = torch.Generator().manual_seed(seed)
    rot, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    scales = torch.logspace(math.log10(0.01), math.log10(3.0), dim, dtype=torch.float64)
    cov = rot @ torch.diag(scales**2) @ rot.T
    mean = torch.linspace(-2.0, 2.0, dim, dtype=torch.float64)
    return mean, cov


def ar1(chains: int, n: int, k: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """AR(1) chains with unit stationary variance, started in the stationary distribution."""
    e = rng.standard_normal((chains, n, k))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + math.sqrt(1 - rho**2) * e[:, t]
    return x


# ----------------------------------------------------------------------------- settings
def test_settings_from_dict_validates():
    s = HMCSettings.from_dict({"chains": 2, "warmup": "5", "trajectory_length": "1.5", "adapt_mass": False})
    assert (s.chains, s.warmup, s.samples, s.trajectory_length, s.adapt_mass) == (2, 5, 1000, 1.5, False)
    assert HMCSettings.from_dict(None) == HMCSettings()
    assert HMCSettings().rhat_max == 1.01 and HMCSettings().ess_min == 400
    with pytest.raises(ValueError, match="unknown HMC setting"):
        HMCSettings.from_dict({"chain": 2})
    with pytest.raises(ValueError, match="unknown HMC setting"):
        HMCSettings.from_dict({"max_tree_depth": 10})  # NUTS is gone
    with pytest.raises(ValueError):
        HMCSettings(samples=3, thin=4)
    with pytest.raises(ValueError):
        HMCSettings(trajectory_length=0.0)
    with pytest.raises(ValueError, match="rows"):
        sample_hmc(
            gaussian(torch.zeros(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64)),
            torch.zeros(3, 2),
            HMCSettings(chains=2),
            seed=0,
        )


# ----------------------------------------------------------------------------- pieces
def test_adaptation_windows_are_stans():
    assert adaptation_windows(1000) == [(75, 100), (100, 150), (150, 250), (250, 450), (450, 950)]
    assert adaptation_windows(150) == [(75, 100)]  # 75 + 25 + 50: one window
    short = adaptation_windows(100)  # Stan's fallback: 15 % / 75 % / 10 %
    assert short == [(15, 90)]
    assert adaptation_windows(10) == []
    for warmup in (20, 57, 300, 1234, 5000):
        w = adaptation_windows(warmup)
        assert all(a < b for a, b in w) and all(w[i][1] == w[i + 1][0] for i in range(len(w) - 1))
        assert w[-1][1] <= warmup


def test_van_der_corput():
    assert [van_der_corput(i) for i in range(1, 8)] == [0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875]
    u = np.array([van_der_corput(i) for i in range(1, 1025)])
    assert ((0 < u) & (u < 1)).all() and abs(u.mean() - 0.5) < 1e-3


def test_leapfrog_is_reversible_conserves_energy_and_masks_per_chain():
    dim = 6
    mean, cov = correlated_gaussian(dim, seed=1)
    fn = gaussian(mean, cov)
    g = torch.Generator().manual_seed(0)
    q0 = mean + torch.randn(3, dim, generator=g, dtype=torch.float64)
    p0 = torch.randn(3, dim, generator=g, dtype=torch.float64)
    inv_mass = torch.rand(3, dim, generator=g, dtype=torch.float64) + 0.5
    lp0, g0 = fn(q0)
    step = torch.tensor([2e-4, 4e-4, 3e-4], dtype=torch.float64)  # << the smallest scale, 0.01
    steps = torch.tensor([40, 25, 1])
    q1, p1, lp1, g1, bad, _ = leapfrog(q0, p0, lp0, g0, step, inv_mass, steps, fn)
    assert not bad.any()
    h0, h1 = -lp0 + kinetic_energy(p0, inv_mass), -lp1 + kinetic_energy(p1, inv_mass)
    assert ((h1 - h0).abs() < 1e-3 * h0.abs()).all()  # O(eps^2) energy error
    # reversible: flip the momentum and integrate back
    q2, p2, *_ = leapfrog(q1, -p1, lp1, g1, step, inv_mass, steps, fn)
    torch.testing.assert_close(q2, q0, rtol=0, atol=1e-10)
    torch.testing.assert_close(-p2, p0, rtol=0, atol=1e-10)
    # masked chains end exactly where they would have, run alone
    for c in range(3):
        alone = leapfrog(
            q0[c : c + 1],
            p0[c : c + 1],
            lp0[c : c + 1],
            g0[c : c + 1],
            step[c : c + 1],
            inv_mass[c : c + 1],
            steps[c : c + 1],
            fn,
        )
        torch.testing.assert_close(alone[0][0], q1[c], rtol=0, atol=1e-14)
        torch.testing.assert_close(alone[1][0], p1[c], rtol=0, atol=1e-14)


def test_leapfrog_stops_a_chain_at_a_non_finite_density():
    def fn(q):  # finite only for x_0 < 1
        lp = torch.where(q[:, 0] < 1.0, -0.5 * (q * q).sum(-1), torch.nan)
        return lp, -q

    q0 = torch.tensor([[0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    p0 = torch.tensor([[10.0, 0.0], [-10.0, 0.0]], dtype=torch.float64)
    lp0, g0 = fn(q0)
    q1, _, lp1, _, bad, _ = leapfrog(
        q0,
        p0,
        lp0,
        g0,
        torch.full((2,), 0.05, dtype=torch.float64),
        torch.ones(2, 2, dtype=torch.float64),
        torch.tensor([10, 10]),
        fn,
    )
    assert bad.tolist() == [True, False]
    assert torch.isfinite(lp1).all() and q1[0, 0] < 1.0  # the last finite point is kept


def test_dual_averaging_finds_the_target_acceptance():
    # acceptance exp(-eps^2) per chain scale: the target 0.8 is met at eps = s sqrt(-log 0.8)
    scale = torch.tensor([0.1, 1.0, 10.0], dtype=torch.float64)
    da = dual_averaging_init(torch.ones(3, dtype=torch.float64))
    for _ in range(2000):
        accept = torch.exp(-((da.log_step.exp() / scale) ** 2))
        da = dual_averaging_update(da, accept, 0.8)
    torch.testing.assert_close(da.log_step_bar.exp(), scale * math.sqrt(-math.log(0.8)), rtol=0.05, atol=0)


def test_leapfrog_finds_the_u_turn_half_a_period_on():
    """On N(0, I) with unit mass every coordinate turns with period 2 pi: in many dimensions
    (q_t - q_0) . p_t ~ D sin t, so a trajectory turns back at t = pi."""
    g = torch.Generator().manual_seed(0)
    q0 = torch.randn(4, 2000, generator=g, dtype=torch.float64)
    p0 = torch.randn(4, 2000, generator=g, dtype=torch.float64)

    def fn(q):
        return -0.5 * (q * q).sum(-1), -q

    lp0, g0 = fn(q0)
    eps = 0.01
    steps = torch.tensor([500, 500, 500, 200])
    *_, turned = leapfrog(
        q0, p0, lp0, g0, torch.full((4,), eps, dtype=torch.float64), torch.ones_like(q0), steps, fn, uturn=True
    )
    assert ((turned[:3] * eps - math.pi).abs() < 0.1).all(), turned
    assert turned[3] == 0  # stopped at t = 2 before turning
    assert (
        leapfrog(q0, p0, lp0, g0, torch.full((4,), eps, dtype=torch.float64), torch.ones_like(q0), steps, fn)[-1]
        is None
    )


# ----------------------------------------------------------------------------- diagnostics
def _ess_loop(x: np.ndarray) -> float:
    """ESS of one quantity (chains, N) written as the loop of Stan and ArviZ (Geyer's
    initial positive and monotone sequences), to check the vectorised version against."""
    m, n = x.shape
    size = 1 << (2 * n - 1).bit_length()
    d = x - x.mean(1, keepdims=True)
    f = np.fft.rfft(d, n=size, axis=1)
    acov = np.fft.irfft(f * np.conj(f), n=size, axis=1)[:, :n] / n
    mean_var = acov[:, 0].mean() * n / (n - 1)
    var_plus = mean_var * (n - 1) / n + x.mean(1).var(ddof=1)
    rho = np.zeros(n)
    rho[0], even, odd = 1.0, 1.0, 1.0 - (mean_var - acov[:, 1].mean()) / var_plus
    rho[1] = odd
    t = 1
    while t < n - 3 and even + odd > 0:
        even = 1.0 - (mean_var - acov[:, t + 1].mean()) / var_plus
        odd = 1.0 - (mean_var - acov[:, t + 2].mean()) / var_plus
        if even + odd >= 0:
            rho[t + 1], rho[t + 2] = even, odd
        t += 2
    max_t = t - 2
    if even > 0:
        rho[max_t + 1] = even
    t = 1
    while t <= max_t - 2:
        if rho[t + 1] + rho[t + 2] > rho[t - 1] + rho[t]:
            rho[t + 1] = rho[t + 2] = (rho[t - 1] + rho[t]) / 2
        t += 2
    tau = -1 + 2 * rho[: max_t + 1].sum() + rho[max_t + 1 : max_t + 2].sum()
    return m * n / max(tau, 1 / np.log10(m * n))


def test_ess_matches_the_reference_loop_and_ar1_theory():
    rng = np.random.default_rng(0)
    for n in (4, 5, 7, 10, 51, 400):
        for rho in (0.0, 0.6, -0.4, 0.95):
            x = ar1(4, n, 5, rho, rng)
            expected = [_ess_loop(x[:, :, j]) for j in range(5)]
            np.testing.assert_allclose(ess_basic(x), expected, rtol=1e-10)
    # AR(1): ESS = S (1 - rho) / (1 + rho); 8 x 4000 draws, 20 quantities averaged
    for rho in (0.0, 0.5, 0.9):
        x = ar1(8, 4000, 20, rho, rng)
        theory = x.shape[0] * x.shape[1] * (1 - rho) / (1 + rho)
        assert abs(ess_basic(x).mean() / theory - 1) < 0.1, rho
        assert abs(ess_bulk(x).mean() / theory - 1) < 0.1, rho
        # an indicator of a tail event forgets faster than the value itself: at least the ESS of the mean
        assert 0.9 * theory < ess_tail(x).mean() < 1.1 * x.shape[0] * x.shape[1], rho
    # a quantity that never moves: ESS = S, R-hat undefined
    const = np.ones((2, 10, 1))
    assert ess_basic(const)[0] == 20 and np.isnan(rhat_rank(const)[0])


def test_rank_rhat_flags_location_and_scale_differences():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 1000, 3))
    assert rhat_rank(x).max() < 1.01
    shifted = x.copy()
    shifted[0] += 2.0  # one chain elsewhere
    assert rhat_rank(shifted).min() > 1.2
    # same mean, different spread: invisible to the classic R-hat, caught by the folded one
    wide = x.copy()
    wide[0] *= 3.0
    n = x.shape[1] // 2
    split = np.concatenate([wide[:, :n], wide[:, n:]])
    classic = np.sqrt((n * split.mean(1).var(0, ddof=1) / split.var(1, ddof=1).mean(0) + n - 1) / n)
    assert classic.max() < 1.01 and rhat_rank(wide).min() > 1.05


def test_diagnostics_flag_stuck_chains():
    g = torch.Generator().manual_seed(0)
    f = 0.01 * torch.randn(4, 400, 5, generator=g, dtype=torch.float64)
    good = predictive_diagnostics(f)
    assert good["rhat_max"] < 1.01 and good["ess_bulk_min"] > 1000 and good["ess_tail_min"] > 1000
    assert good["rhat"].shape == (5,) and good["ess"].shape == (5,)
    check_diagnostics(good, HMCSettings())

    f[1] += 1.0  # one chain stuck elsewhere
    bad = predictive_diagnostics(f)
    assert bad["rhat_max"] > 1.5
    with pytest.raises(HMCDiagnosticsError) as err:
        check_diagnostics(bad, HMCSettings())
    msg = str(err.value)
    assert f"{bad['rhat_max']:.4g}" in msg and "1.01" in msg and "warmup" in msg

    # several outputs per test input (class probabilities): the worst one counts
    probs = 0.01 * torch.randn(2, 200, 4, 3, generator=g, dtype=torch.float64)
    probs[1, :, 2, 1] += 1.0
    d = predictive_diagnostics(probs)
    assert d["rhat"].shape == (4,) and d["rhat"][2] > 1.5 and d["rhat"][[0, 1, 3]].max() < 1.1

    # a class probability saturated in every draw of every chain does not count, the input's
    # other outputs do; an input whose outputs all never move stays undefined
    saturated = 0.01 * torch.randn(2, 200, 4, 3, generator=g, dtype=torch.float64)
    saturated[:, :, 0, 0] = 1.0
    d = predictive_diagnostics(saturated)
    assert math.isfinite(d["rhat_max"]) and d["rhat_max"] < 1.1 and math.isfinite(d["rhat"][0])
    saturated[1, :, 3, 2] += 1.0  # an unmixed output beside a saturated one still fails
    assert predictive_diagnostics(saturated)["rhat"][3] > 1.5

    # a quantity that never moves has undefined R-hat and fails the check
    frozen = predictive_diagnostics(torch.ones(2, 10, 3))
    assert math.isnan(frozen["rhat_max"])
    with pytest.raises(HMCDiagnosticsError, match="nan"):
        check_diagnostics(frozen, HMCSettings())


def test_low_ess_message():
    g = torch.Generator().manual_seed(1)
    f = torch.randn(2, 400, 3, generator=g, dtype=torch.float64).cumsum(1)  # a random walk
    d = predictive_diagnostics(f)
    with pytest.raises(HMCDiagnosticsError, match="ESS min") as err:
        check_diagnostics(d, HMCSettings(rhat_max=1e9, ess_min=1000))
    assert "samples" in str(err.value) and "bulk" in str(err.value) and "tail" in str(err.value)


def test_diagnostics_do_not_depend_on_chunking():
    g = torch.Generator().manual_seed(2)
    f = torch.randn(3, 40, 11, 2, generator=g).cumsum(1)
    a, b = predictive_diagnostics(f, chunk=3), predictive_diagnostics(f, chunk=100)
    for key in ("rhat", "ess_bulk", "ess_tail"):
        np.testing.assert_allclose(a[key], b[key])
    assert a["rhat_max"] == pytest.approx(b["rhat_max"]) and a["ess_mean"] == pytest.approx(b["ess_mean"])

    from repens.experiments.hmc import predict_and_diagnose

    # float64, so that only the chunking is compared (float32 GEMMs may round differently
    # for 7 and 50 rows; a chunking bug changes values at O(1)). Rank statistics jump where
    # an ulp reorders exact ties: weights scaled down so that no probability saturates at 1,
    # and an odd number of draws, whose median is a draw (with an even number the two middle
    # draws tie in |x - median|, the folded R-hat's input)
    data = make_toy("classification", 0)
    post = toy_posterior({"hidden": [6]}, data)
    draws = 0.2 * post.sample_prior(3 * 7, g).reshape(3, 7, -1).double()
    x_test = data.x_test[:50].double()
    p1, d1 = predict_and_diagnose(post.model, draws, x_test, "classification", points=7)
    p2, d2 = predict_and_diagnose(post.model, draws, x_test, "classification", points=1000)
    assert p1.shape == (50, 5)
    torch.testing.assert_close(p1, p2)
    np.testing.assert_allclose(d1["rhat"], d2["rhat"])


# ----------------------------------------------------------------------------- the sampler
def test_sampler_is_deterministic_thins_and_leaves_callers_rng_alone():
    mean, cov = correlated_gaussian(4)
    fn = gaussian(mean, cov)
    init = torch.zeros(2, 4, dtype=torch.float64)
    rng_before = torch.get_rng_state()
    a, sa = sample_hmc(fn, init, HMCSettings(chains=2, warmup=30, samples=12), seed=3)
    assert torch.equal(torch.get_rng_state(), rng_before)
    b, _ = sample_hmc(fn, init, HMCSettings(chains=2, warmup=30, samples=12, thin=3), seed=3)
    c, _ = sample_hmc(fn, init, HMCSettings(chains=2, warmup=30, samples=12), seed=4)
    assert a.shape == (2, 12, 4) and a.dtype == torch.float32 and b.shape == (2, 4, 4)
    assert torch.equal(a[:, 2::3], b)  # thinning keeps every 3rd draw of the same chains
    assert not torch.equal(a, c)
    assert sa["draw_logp"].shape == (2, 12) and sa["gradient_calls"] > 42 and sa["trajectory_length"] > 0
    assert len(sa["step_size"]) == 2 and sa["seconds"] >= sa["warmup_seconds"] > 0


def _gaussian_run(dim: int, chains: int, warmup: int, samples: int, seed: int = 0, **settings):
    mean, cov = correlated_gaussian(dim)
    init = mean + 3 * torch.randn(chains, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    s = HMCSettings(chains=chains, warmup=warmup, samples=samples, **settings)
    draws, stats = sample_hmc(gaussian(mean, cov), init, s, seed=seed)
    return draws.double(), stats, mean, cov, s


def _check_moments(draws, mean, cov, diag, z=4.5):
    """Mean and variance per coordinate within ``z`` Monte-Carlo standard errors: sd / sqrt(ESS)
    for the mean; for the variance, var sqrt(2 / ESS) (its standard error under a Gaussian,
    with the ESS of the coordinate: conservative enough for these smooth chains), and the
    correlations within z / sqrt(ESS)."""
    flat = draws.reshape(-1, draws.shape[-1])
    ess = torch.as_tensor(diag["ess_bulk"])
    sd = cov.diagonal().sqrt()
    assert ((flat.mean(0) - mean).abs() <= z * sd / ess.sqrt()).all(), (flat.mean(0) - mean) / sd * ess.sqrt()
    var = flat.var(0)
    assert ((var / cov.diagonal() - 1).abs() <= z * (2 / ess).sqrt()).all(), (var / cov.diagonal(), ess)
    est = torch.corrcoef(flat.T)
    true = cov / torch.outer(sd, sd)
    assert ((est - true).abs() <= z / ess.min().sqrt()).all()


@pytest.mark.slow
def test_recovers_a_correlated_ill_conditioned_gaussian():
    """8 chains, learnt trajectory length and per-chain diagonal masses on a rotated Gaussian
    with scales 0.01 .. 3: converged by the paper-scale thresholds, moments within their
    Monte-Carlo errors."""
    draws, stats, mean, cov, _ = _gaussian_run(dim=10, chains=8, warmup=500, samples=1000)
    diag = predictive_diagnostics(draws)  # the "predictions" are the coordinates themselves
    check_diagnostics(diag, HMCSettings(rhat_max=1.01, ess_min=400))
    _check_moments(draws, mean, cov, diag)
    assert sum(stats["divergences"]) == 0
    assert all(0.6 < a <= 1.0 for a in stats["accept_prob"])
    # the adapted trajectory reaches across the widest direction (sd 3): no random walk
    assert stats["trajectory_length"] > 1.0 and stats["mean_leapfrog"] > 10


def test_chains_stuck_in_separate_modes_fail_the_check():
    """A bimodal target, modes 20 sd apart, half the chains started in each: every chain
    stays in its mode, which the diagnostics must flag (R-hat far above 1.01)."""
    centre = torch.tensor([10.0, 0.0], dtype=torch.float64)

    def fn(q):
        a, b = -0.5 * ((q - centre) ** 2).sum(-1), -0.5 * ((q + centre) ** 2).sum(-1)
        lp = torch.logaddexp(a, b)
        wa = torch.exp(a - lp).unsqueeze(-1)
        return lp, -(q - centre) * wa - (q + centre) * (1 - wa)

    init = torch.stack([centre, -centre, centre, -centre])
    draws, _ = sample_hmc(fn, init, HMCSettings(chains=4, warmup=200, samples=200), seed=0)
    assert (draws[[0, 2], :, 0] > 5).all() and (draws[[1, 3], :, 0] < -5).all()
    diag = predictive_diagnostics(draws)
    assert diag["rhat"][0] > 1.5  # ranks bound R-hat: 1.73 for two equal, disjoint groups
    with pytest.raises(HMCDiagnosticsError, match="R-hat"):
        check_diagnostics(diag, HMCSettings())


def _interrupting(fn, after: int, how: str):
    """``fn`` that, at its ``after``-th call, sends SIGINT to this process ("signal") or raises
    KeyboardInterrupt ("kill": a hard stop, no checkpoint of its own)."""
    calls = {"n": 0}

    def wrapped(q):
        calls["n"] += 1
        if calls["n"] == after:
            if how == "signal":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                raise KeyboardInterrupt
        return fn(q)

    return wrapped


@pytest.mark.slow  # several seconds of subprocesses: second stage of .ci/run
@pytest.mark.parametrize("how", ["signal", "kill"])
def test_resume_is_bit_identical(tmp_path, how):
    mean, cov = correlated_gaussian(5)
    fn = gaussian(mean, cov)
    init = mean + torch.randn(3, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    s = HMCSettings(chains=3, warmup=120, samples=40, thin=2)
    full, full_stats = sample_hmc(fn, init, s, seed=5)
    # what the process had before (SIG_IGN where it was started in the background without
    # job control, Python's default_int_handler otherwise)
    handler_before = signal.getsignal(signal.SIGINT)

    ckpt = tmp_path / "state.pt"
    # SIGINT: checkpoint at the end of the iteration, then Interrupted; a hard kill: only
    # the periodic checkpoints (here every iteration) survive
    with pytest.raises(Interrupted if how == "signal" else KeyboardInterrupt):
        sample_hmc(
            _interrupting(fn, 1500, how), init, s, seed=5, checkpoint=ckpt, checkpoint_key="k", checkpoint_seconds=0.0
        )
    assert ckpt.exists()
    stopped = torch.load(ckpt, weights_only=False)["state"]["iteration"]
    assert 0 < stopped < s.warmup + s.samples
    resumed, stats = sample_hmc(fn, init, s, seed=5, checkpoint=ckpt, checkpoint_key="k")
    assert torch.equal(resumed, full)
    assert stats["step_size"] == full_stats["step_size"] and stats["gradient_calls"] == full_stats["gradient_calls"]
    assert signal.getsignal(signal.SIGINT) is handler_before  # handlers restored

    # a checkpoint of other settings is set aside, not resumed
    other, _ = sample_hmc(fn, init, s, seed=5, checkpoint=ckpt, checkpoint_key="other")
    assert torch.equal(other, full) and ckpt.with_name("state.pt.stale").exists()


# ----------------------------------------------------------------------------- toy posteriors
@pytest.mark.parametrize("dataset", ["regression", "classification"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_value_and_grad_matches_posterior(dataset, dtype):
    data = make_toy(dataset, 0)
    post = toy_posterior({"hidden": [7, 5], "prior_std": 0.7, "noise_std": 0.3}, data, dtype)
    y = data.y_train.to(dtype) if dataset == "regression" else data.y_train
    batch = Batch(data.x_train.to(dtype), y)
    w = post.sample_prior(3, torch.Generator().manual_seed(0)).to(dtype).requires_grad_()
    ref = post.log_likelihood(w, batch) + post.log_prior(w)
    (g_ref,) = torch.autograd.grad(ref.sum(), w)
    value, grad = value_and_grad(post, batch)(w.detach().double())
    assert value.dtype == grad.dtype == torch.float64 and grad.shape == w.shape
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(value, ref.detach().double(), rtol=tol, atol=0)
    assert (grad - g_ref.double()).abs().max() <= tol * g_ref.abs().max()


TINY_HMC = {"chains": 2, "warmup": 40, "samples": 50, "max_leapfrog": 20, "rhat_max": 1e9, "ess_min": 0.0}


@pytest.mark.parametrize("dataset", ["regression", "classification"])
def test_run_hmc_end_to_end(tmp_path, dataset):
    job = {"experiment": "hmc", "dataset": dataset, "seed": 3, "scale": "quick", "hidden": [10], "hmc": dict(TINY_HMC)}
    out = tmp_path / "hmc" / "predictive.npz"
    ckpt = tmp_path / "hmc" / "ckpt.pt"
    threads = torch.get_num_threads()
    run_hmc(job, out, ckpt)
    assert torch.get_num_threads() == threads  # runs single-threaded, restores the caller's setting
    assert not ckpt.exists()
    data = make_toy(dataset, 3)
    with np.load(out) as z:
        assert json.loads(str(z["job"])) == job
        assert str(z["label"]) == "HMC"
        assert z["x_train"].dtype == np.float32 and z["x_test"].dtype == np.float32
        np.testing.assert_array_equal(z["x_train"], data.x_train.numpy())
        np.testing.assert_array_equal(z["x_test"], data.x_test.numpy())
        T = data.x_test.shape[0]
        if dataset == "regression":
            assert z["y_train"].dtype == np.float32 and z["y_train"].shape == (90,)
            assert z["f_test"].shape == (100, T) and z["f_test"].dtype == np.float32
            assert np.isfinite(z["f_test"]).all()
            assert float(z["noise_std"]) == 0.5 and z["noise_std"].shape == ()
            assert "probs_test" not in z
        else:
            assert z["y_train"].dtype == np.int64 and z["y_train"].shape == (200,)
            assert z["probs_test"].shape == (T, 5) and z["probs_test"].dtype == np.float32
            np.testing.assert_allclose(z["probs_test"].sum(-1), 1.0, atol=1e-5)
            assert (z["probs_test"] >= 0).all()
            assert "f_test" not in z
    diag = json.loads(out.with_name("diagnostics.json").read_text())
    # the job's relaxed check let it through (predictions written), but 2 x 50 draws are no
    # converged reference at the paper's thresholds: never "passed"
    assert diag["settings"]["chains"] == 2 and diag["accepted"] is True
    assert diag["converged"] is False and diag["passed"] is False
    assert diag["status"].startswith("not converged (quick scale: job thresholds relaxed")
    assert diag["thresholds"] == {"rhat_max": 1.01, "ess_min": 400.0}
    with np.load(out) as z:
        assert bool(z["converged"]) is False
    assert len(diag["sampler"]["step_size"]) == 2 and len(diag["diagnostics"]["rhat"]) == T
    assert len(diag["diagnostics"]["ess_tail"]) == T and diag["diagnostics"]["draws"] == 100
    assert diag["wall_time_s"] > 0 and diag["sampler"]["cpu_seconds"] > 0
    assert len(diag["log_density"]["mean_per_chain"]) == 2


def test_run_hmc_failed_diagnostics_leave_no_predictions(tmp_path):
    hmc = dict(TINY_HMC, warmup=10, samples=8, ess_min=1e6)
    job = {"experiment": "hmc", "dataset": "regression", "seed": 0, "scale": "quick", "hidden": [4], "hmc": hmc}
    out = tmp_path / "predictive.npz"
    with pytest.raises(HMCDiagnosticsError, match="ESS min"):
        run_hmc(job, out)
    assert not out.exists()
    diag = json.loads(out.with_name("diagnostics.json").read_text())
    assert diag["passed"] is False and diag["accepted"] is False and diag["settings"]["ess_min"] == 1e6
    assert diag["converged"] is False and diag["status"].startswith("not converged")


def test_failed_run_keeps_checkpoint_for_looser_thresholds(tmp_path, monkeypatch):
    import repens.training.hmc

    job = {
        "experiment": "hmc",
        "dataset": "regression",
        "seed": 0,
        "scale": "quick",
        "hidden": [4],
        "hmc": dict(TINY_HMC, warmup=10, samples=8, ess_min=1e6),
    }
    out, ckpt = tmp_path / "predictive.npz", tmp_path / "ckpt.pt"
    with pytest.raises(HMCDiagnosticsError):
        run_hmc(job, out, ckpt)
    assert ckpt.exists() and not out.exists()
    first = json.loads(out.with_name("diagnostics.json").read_text())

    def no_sampling(*args, **kwargs):
        raise AssertionError("the draws should come from the checkpoint")

    monkeypatch.setattr(repens.training.hmc, "leapfrog", no_sampling)
    looser = {**job, "hmc": {**job["hmc"], "ess_min": 0.0}}
    run_hmc(looser, out, ckpt)
    assert out.exists() and not ckpt.exists()
    second = json.loads(out.with_name("diagnostics.json").read_text())
    assert second["diagnostics"]["rhat"] == first["diagnostics"]["rhat"]
    with np.load(out) as z:
        assert json.loads(str(z["job"])) == looser


def test_run_hmc_resumes_from_checkpoint(tmp_path, interrupt_hmc):
    hmc = dict(TINY_HMC, warmup=10, samples=8)
    job = {"experiment": "hmc", "dataset": "regression", "seed": 0, "scale": "quick", "hidden": [4], "hmc": hmc}
    full = tmp_path / "full" / "predictive.npz"
    run_hmc(job, full)

    # killed half-way: the checkpoint holds the sampler state of the last iteration
    out, ckpt = tmp_path / "resumed" / "predictive.npz", tmp_path / "resumed" / "ckpt.pt"
    interrupt_hmc(True)
    with pytest.raises(KeyboardInterrupt):
        run_hmc(job, out, ckpt)
    assert ckpt.exists() and not out.exists()
    interrupt_hmc(False)
    run_hmc(job, out, ckpt)
    with np.load(full) as a, np.load(out) as b:
        np.testing.assert_array_equal(a["f_test"], b["f_test"])
    assert not ckpt.exists()


def test_convergence_is_judged_at_the_paper_thresholds_whatever_the_job_enforces():
    """A quick-scale reference with R-hat 1.50 and bulk ESS 10 passes its relaxed check
    (rhat_max 1000, ess_min 0) but is reported not converged, never passed; a reference
    meeting R-hat <= 1.01 and ESS >= 400 is converged."""
    from repens.training.hmc import convergence

    quick = HMCSettings.from_dict({"rhat_max": 1000, "ess_min": 0})
    bad = {"rhat_max": 1.50, "ess_min": 10.0}
    v = convergence(bad, quick, scale="quick")
    assert v["accepted"] is True and v["converged"] is False and v["passed"] is False
    assert v["status"] == (
        "not converged (quick scale: job thresholds relaxed to R-hat <= 1000, ESS >= 0; "
        "R-hat max 1.5 > 1.01, ESS min 10 < 400)"
    )
    good = convergence({"rhat_max": 1.004, "ess_min": 1622.0}, quick, scale="quick")
    assert good["converged"] is True and good["passed"] is True and good["status"] == "converged"
    paper = HMCSettings.from_dict({"rhat_max": 1.01, "ess_min": 400})
    v = convergence({"rhat_max": 1.02, "ess_min": 500.0}, paper, scale="paper")
    assert v == {
        **v,
        "accepted": False,
        "converged": False,
        "passed": False,
        "status": "not converged (R-hat max 1.02 > 1.01)",
    }
    assert convergence({"rhat_max": float("nan"), "ess_min": 500.0}, paper)["converged"] is False


def test_convergence_thresholds_are_config_yamls_paper_scale_ones():
    """repens.training.hmc's thresholds of convergence are those config.yaml sets for the paper
    scale (experiments.toy.hmc, and any dataset's hmc block), so they cannot drift apart."""
    import yaml

    from repens.training.hmc import CONVERGED_ESS_MIN, CONVERGED_RHAT_MAX

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())
    toy = config["experiments"]["toy"]
    blocks = [toy["hmc"], *((d or {}).get("hmc") or {} for d in toy["datasets"].values())]
    assert toy["hmc"]["rhat_max"] == CONVERGED_RHAT_MAX and toy["hmc"]["ess_min"] == CONVERGED_ESS_MIN
    for block in blocks:
        assert block.get("rhat_max", CONVERGED_RHAT_MAX) == CONVERGED_RHAT_MAX
        assert block.get("ess_min", CONVERGED_ESS_MIN) == CONVERGED_ESS_MIN
