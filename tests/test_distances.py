"""Hand cases of repens.evaluation.distances."""

from __future__ import annotations

import math

import numpy as np
import pytest

from repens.evaluation.distances import categorical_kl, gaussian_kl, gaussian_w2, mixture_moments, predictive_entropy


def test_gaussian_w2_hand_cases():
    assert gaussian_w2(0.0, 1.0, 0.0, 1.0) == 0.0
    assert gaussian_w2(0.0, 1.0, 3.0, 1.0) == pytest.approx(3.0)
    assert gaussian_w2(0.0, 1.0, 0.0, 2.0) == pytest.approx(1.0)
    assert gaussian_w2(1.0, 1.0, 4.0, 5.0) == pytest.approx(5.0)  # 3-4-5
    out = gaussian_w2(np.zeros(3), np.ones(3), np.array([0.0, 3.0, 0.0]), np.array([1.0, 1.0, 2.0]))
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [0.0, 3.0, 1.0])
    # symmetric, and a point mass is allowed
    assert gaussian_w2(2.0, 0.0, 0.0, 0.5) == pytest.approx(gaussian_w2(0.0, 0.5, 2.0, 0.0))
    with pytest.raises(ValueError, match="sd1"):
        gaussian_w2(0.0, -1.0, 0.0, 1.0)


def test_gaussian_kl_closed_form():
    assert gaussian_kl(0.3, 1.7, 0.3, 1.7) == pytest.approx(0.0, abs=1e-15)
    # KL(N(1, 1) || N(0, 2^2)) = log 2 + (1 + 1) / 8 - 1/2
    assert gaussian_kl(1.0, 1.0, 0.0, 2.0) == pytest.approx(math.log(2.0) + 0.25 - 0.5)
    # against numerical integration
    x = np.linspace(-30, 30, 200001)
    mp, sp, mq, sq = -0.5, 0.7, 1.2, 1.9
    logp = -0.5 * ((x - mp) / sp) ** 2 - math.log(sp * math.sqrt(2 * math.pi))
    logq = -0.5 * ((x - mq) / sq) ** 2 - math.log(sq * math.sqrt(2 * math.pi))
    numeric = np.trapezoid(np.exp(logp) * (logp - logq), x)
    assert gaussian_kl(mp, sp, mq, sq) == pytest.approx(numeric, rel=1e-6)
    with pytest.raises(ValueError, match="sd_q"):
        gaussian_kl(0.0, 1.0, 0.0, 0.0)


def test_categorical_kl_hand_case_and_properties():
    p, q = np.array([0.5, 0.5]), np.array([0.25, 0.75])
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert categorical_kl(p, q) == pytest.approx(expected)
    assert categorical_kl(p, p) == 0.0
    # 0 log 0 = 0: a class p rules out costs nothing
    assert categorical_kl([1.0, 0.0], [0.5, 0.5]) == pytest.approx(math.log(2.0))
    # q = 0 where p > 0: clipped at eps, finite
    assert categorical_kl([0.5, 0.5], [1.0, 0.0], eps=1e-12) == pytest.approx(
        0.5 * math.log(0.5 * (1 + 1e-12)) + 0.5 * math.log(0.5 * (1 + 1e-12) / 1e-12)
    )
    rng = np.random.default_rng(0)
    a, b = rng.dirichlet(np.ones(5), size=200), rng.dirichlet(np.full(5, 0.3), size=200)
    kl = categorical_kl(a, b)
    assert kl.shape == (200,) and np.all(kl >= 0)
    assert np.all(categorical_kl(a, a.astype(np.float32)) < 1e-6)
    with pytest.raises(ValueError, match="negative"):
        categorical_kl([1.5, -0.5], [0.5, 0.5])


def test_predictive_entropy():
    assert predictive_entropy(np.full(5, 0.2)) == pytest.approx(math.log(5))
    assert predictive_entropy([1.0, 0.0, 0.0]) == 0.0
    assert predictive_entropy([0.5, 0.25, 0.25]) == pytest.approx(1.5 * math.log(2))
    grid = predictive_entropy(np.random.default_rng(1).dirichlet(np.ones(5), size=(4, 3)))
    assert grid.shape == (4, 3) and np.all((grid >= 0) & (grid <= math.log(5) + 1e-12))


def test_mixture_moments_two_components():
    # members f = 1 and f = 3 at x0; f = -2 and f = -2 at x1; noise sd 0.5
    f = np.array([[1.0, -2.0], [3.0, -2.0]], dtype=np.float32)
    mean, sd = mixture_moments(f, 0.5)
    np.testing.assert_allclose(mean, [2.0, -2.0])
    # var = population spread (1) + 0.25 at x0; 0 + 0.25 at x1
    np.testing.assert_allclose(sd, [math.sqrt(1.25), 0.5])
    assert mean.dtype == sd.dtype == np.float64
    _, sd_f = mixture_moments(f, 0.0)
    np.testing.assert_allclose(sd_f, [1.0, 0.0])
    # agrees with sampling the mixture
    rng = np.random.default_rng(2)
    draws = f[rng.integers(0, 2, 400000), 0] + 0.5 * rng.standard_normal(400000)
    assert draws.std() == pytest.approx(sd[0], rel=1e-2)
    with pytest.raises(ValueError):
        mixture_moments(np.zeros((0, 3)), 0.1)
