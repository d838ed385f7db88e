"""NUTS reference sampler: exact conjugate posterior, diagnostics, toy end-to-end runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from repens.data.toy import make_toy
from repens.experiments.hmc import _log_density, run_hmc
from repens.experiments.toy import toy_posterior
from repens.hmc import (
    HMCDiagnosticsError,
    HMCSettings,
    check_diagnostics,
    chain_seed,
    predictive_diagnostics,
    sample_nuts,
    sample_nuts_with_stats,
)
from repens.posteriors import Batch


def _conjugate_problem():
    """Bayesian linear regression, prior N(0, alpha^-1 I), known noise sd: exact N(m, S)."""
    g = torch.Generator().manual_seed(0)
    n, d, alpha, sigma = 30, 3, 1.0, 0.5
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = X @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + sigma * torch.randn(
        n, generator=g, dtype=torch.float64
    )
    S = torch.linalg.inv(alpha * torch.eye(d, dtype=torch.float64) + X.T @ X / sigma**2)
    m = S @ X.T @ y / sigma**2

    def log_density(w: torch.Tensor) -> torch.Tensor:
        return -0.5 * alpha * w @ w - 0.5 * ((y - X @ w) ** 2).sum() / sigma**2

    init = torch.randn(2, d, generator=g, dtype=torch.float64)
    return log_density, init, m, S


@pytest.fixture(scope="module")
def conjugate_run():
    log_density, init, m, S = _conjugate_problem()
    settings = HMCSettings(chains=2, warmup=300, samples=500)
    draws, stats = sample_nuts_with_stats(log_density, init, settings, seed=1)
    return draws, stats, m, S, settings


@pytest.mark.slow
def test_nuts_recovers_conjugate_gaussian_posterior(conjugate_run):
    draws, stats, m, S, settings = conjugate_run
    assert draws.shape == (2, 500, 3)
    diag = predictive_diagnostics(draws)  # the "predictions" are the weights themselves here
    check_diagnostics(diag, settings)
    flat = draws.reshape(-1, 3)
    # mean within 4 Monte-Carlo standard errors, sd / sqrt(ESS) per coordinate
    mcse = (S.diagonal() / torch.as_tensor(diag["ess"])).sqrt()
    assert ((flat.mean(0) - m).abs() <= 4 * mcse).all(), (flat.mean(0) - m, mcse)
    cov = torch.cov(flat.T)
    sd, sd_true = cov.diagonal().sqrt(), S.diagonal().sqrt()
    assert ((sd / sd_true - 1).abs() <= 0.15).all(), (sd, sd_true)
    corr = cov / torch.outer(sd, sd)
    corr_true = S / torch.outer(sd_true, sd_true)
    assert ((corr - corr_true).abs() <= 0.15).all(), (corr, corr_true)
    for st in stats:
        assert st.divergences == 0
        assert 0.5 < st.accept_prob <= 1.0
        assert st.step_size > 0 and st.grad_evals > settings.warmup + settings.samples


def test_nuts_is_deterministic_and_thins():
    log_density, init, _, _ = _conjugate_problem()
    rng_before = torch.get_rng_state()
    a = sample_nuts(log_density, init, HMCSettings(chains=2, warmup=20, samples=12), seed=3)
    assert torch.equal(torch.get_rng_state(), rng_before)  # callers' RNG stream untouched
    b = sample_nuts(log_density, init, HMCSettings(chains=2, warmup=20, samples=12, thin=3), seed=3)
    c = sample_nuts(log_density, init, HMCSettings(chains=2, warmup=20, samples=12), seed=4)
    assert b.shape == (2, 4, 3)
    assert torch.equal(a[:, 2::3], b)  # thinning keeps every 3rd draw of the same chain
    assert not torch.equal(a, c)
    assert chain_seed(3, 0) != chain_seed(3, 1) and chain_seed(3, 0) == chain_seed(3, 0)


def test_settings_from_dict_validates():
    s = HMCSettings.from_dict({"chains": 2, "warmup": "5"})
    assert (s.chains, s.warmup, s.samples) == (2, 5, 1000)
    assert HMCSettings.from_dict(None) == HMCSettings()
    with pytest.raises(ValueError, match="unknown HMC setting"):
        HMCSettings.from_dict({"chain": 2})
    with pytest.raises(ValueError):
        HMCSettings(samples=3, thin=4)
    with pytest.raises(ValueError, match="rows"):
        sample_nuts(lambda w: -(w**2).sum(), torch.zeros(3, 2), HMCSettings(chains=2), seed=0)


def test_diagnostics_flag_stuck_chains():
    g = torch.Generator().manual_seed(0)
    f = 0.01 * torch.randn(2, 200, 5, generator=g, dtype=torch.float64)
    good = predictive_diagnostics(f)
    assert good["rhat_max"] < 1.05 and good["ess_min"] > 100
    assert good["rhat"].shape == (5,) and good["ess"].shape == (5,)
    check_diagnostics(good, HMCSettings())

    f[1] += 1.0  # two chains stuck at different values
    bad = predictive_diagnostics(f)
    assert bad["rhat_max"] > 10
    with pytest.raises(HMCDiagnosticsError) as err:
        check_diagnostics(bad, HMCSettings())
    msg = str(err.value)
    assert f"{bad['rhat_max']:.4g}" in msg and "1.1" in msg and "warmup" in msg

    # several outputs per test input (class probabilities): the worst one counts
    probs = 0.01 * torch.randn(2, 200, 4, 3, generator=g, dtype=torch.float64)
    probs[1, :, 2, 1] += 1.0
    d = predictive_diagnostics(probs)
    assert d["rhat"].shape == (4,) and d["rhat"][2] > 10 and d["rhat"][[0, 1, 3]].max() < 1.1

    # a quantity that never moves has undefined R-hat and fails the check
    frozen = predictive_diagnostics(torch.ones(2, 10, 3))
    assert math.isnan(frozen["rhat_max"])
    with pytest.raises(HMCDiagnosticsError, match="nan"):
        check_diagnostics(frozen, HMCSettings())


def test_low_ess_message():
    g = torch.Generator().manual_seed(1)
    # a random walk: strongly autocorrelated, tiny ESS
    f = torch.randn(2, 400, 3, generator=g, dtype=torch.float64).cumsum(1)
    d = predictive_diagnostics(f)
    with pytest.raises(HMCDiagnosticsError, match="ESS min") as err:
        check_diagnostics(d, HMCSettings(rhat_max=1e9, ess_min=1000))
    assert "samples" in str(err.value)


@pytest.mark.parametrize("dataset", ["regression", "classification"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_mlp_log_density_matches_posterior(dataset, dtype):
    data = make_toy(dataset, 0)
    post = toy_posterior({"hidden": [7, 5], "prior_std": 0.7, "noise_std": 0.3}, data, dtype)
    y = data.y_train.to(dtype) if dataset == "regression" else data.y_train
    batch = Batch(data.x_train.to(dtype), y)
    w = post.sample_prior(1, torch.Generator().manual_seed(0))[0].to(dtype).requires_grad_()
    ref = (post.log_likelihood(w[None], batch) + post.log_prior(w[None]))[0]
    (g_ref,) = torch.autograd.grad(ref, w)
    value = _log_density(post, batch)(w)
    (g,) = torch.autograd.grad(value, w)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert torch.allclose(value, ref, rtol=tol)
    assert (g - g_ref).abs().max() <= tol * g_ref.abs().max()


TINY_HMC = {"chains": 2, "warmup": 50, "samples": 50, "max_tree_depth": 5, "rhat_max": 1e9, "ess_min": 0.0}


@pytest.mark.parametrize("dataset", ["regression", "classification"])
def test_run_hmc_end_to_end(tmp_path, dataset):
    job = {"experiment": "hmc", "dataset": dataset, "seed": 3, "scale": "quick", "hidden": [10],
           "hmc": dict(TINY_HMC)}
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
    assert diag["settings"]["chains"] == 2 and diag["passed"] is True
    assert len(diag["chains"]) == 2 and len(diag["diagnostics"]["rhat"]) == data.x_test.shape[0]
    assert diag["diagnostics"]["draws"] == 100 and diag["wall_time_s"] > 0


def test_run_hmc_failed_diagnostics_leave_no_predictions(tmp_path):
    hmc = dict(TINY_HMC, warmup=10, samples=8, ess_min=1e6)
    job = {"experiment": "hmc", "dataset": "regression", "seed": 0, "scale": "quick", "hidden": [4], "hmc": hmc}
    out = tmp_path / "predictive.npz"
    with pytest.raises(HMCDiagnosticsError, match="ESS min"):
        run_hmc(job, out)
    assert not out.exists()
    diag = json.loads(out.with_name("diagnostics.json").read_text())
    assert diag["passed"] is False and diag["settings"]["ess_min"] == 1e6


def test_failed_run_keeps_checkpoint_for_looser_thresholds(tmp_path, monkeypatch):
    import repens.hmc

    job = {"experiment": "hmc", "dataset": "regression", "seed": 0, "scale": "quick", "hidden": [4],
           "hmc": dict(TINY_HMC, warmup=10, samples=8, ess_min=1e6)}
    out, ckpt = tmp_path / "predictive.npz", tmp_path / "ckpt.pt"
    with pytest.raises(HMCDiagnosticsError):
        run_hmc(job, out, ckpt)
    assert ckpt.exists() and not out.exists()
    first = json.loads(out.with_name("diagnostics.json").read_text())

    def no_sampling(*args, **kwargs):
        raise AssertionError("chains should come from the checkpoint")

    monkeypatch.setattr(repens.hmc, "_run_chain", no_sampling)
    looser = {**job, "hmc": {**job["hmc"], "ess_min": 0.0}}
    run_hmc(looser, out, ckpt)
    assert out.exists() and not ckpt.exists()
    second = json.loads(out.with_name("diagnostics.json").read_text())
    assert second["diagnostics"]["rhat"] == first["diagnostics"]["rhat"]
    with np.load(out) as z:
        assert json.loads(str(z["job"])) == looser


def test_run_hmc_resumes_from_checkpoint(tmp_path, interrupt_hmc_after_first_chain):
    hmc = dict(TINY_HMC, warmup=10, samples=8)
    job = {"experiment": "hmc", "dataset": "regression", "seed": 0, "scale": "quick", "hidden": [4], "hmc": hmc}
    full = tmp_path / "full" / "predictive.npz"
    run_hmc(job, full)

    # interrupted after the first chain: the checkpoint holds it
    out, ckpt = tmp_path / "resumed" / "predictive.npz", tmp_path / "resumed" / "ckpt.pt"
    interrupt_hmc_after_first_chain(True)
    with pytest.raises(KeyboardInterrupt):
        run_hmc(job, out, ckpt)
    assert ckpt.exists() and not out.exists()
    interrupt_hmc_after_first_chain(False)
    run_hmc(job, out, ckpt)
    with np.load(full) as a, np.load(out) as b:
        np.testing.assert_array_equal(a["f_test"], b["f_test"])
    assert not ckpt.exists()


def test_diagnostics_and_predictions_do_not_depend_on_chunking():
    g = torch.Generator().manual_seed(2)
    f = torch.randn(3, 40, 11, 2, generator=g).cumsum(1)
    a, b = predictive_diagnostics(f, chunk=3), predictive_diagnostics(f, chunk=100)
    np.testing.assert_allclose(a["rhat"], b["rhat"])
    np.testing.assert_allclose(a["ess"], b["ess"])
    assert a["rhat_max"] == pytest.approx(b["rhat_max"]) and a["ess_mean"] == pytest.approx(b["ess_mean"])

    from repens.experiments.hmc import predict_and_diagnose

    # In float64, so that what is compared is the chunking alone: in float32 the network's
    # GEMMs may round differently for 7 and 50 rows (another kernel or blocking), a few
    # ulps that are no chunking bug; float64 leaves rounding ~1e-16, far below rtol 1e-7,
    # while a chunking bug (misaligned or dropped inputs) changes values at O(1).
    data = make_toy("classification", 0)
    post = toy_posterior({"hidden": [6]}, data)
    draws = post.sample_prior(2 * 8, g).reshape(2, 8, -1).double()
    x_test = data.x_test[:50].double()
    p1, d1 = predict_and_diagnose(post.model, draws, x_test, "classification", points=7)
    p2, d2 = predict_and_diagnose(post.model, draws, x_test, "classification", points=1000)
    assert p1.shape == (50, 5)
    torch.testing.assert_close(p1, p2)
    np.testing.assert_allclose(d1["rhat"], d2["rhat"])
