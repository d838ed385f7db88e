"""Tests of repens.evaluation.metrics against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from repens.evaluation.metrics import (
    covariance_relative_errors,
    energy_distance,
    mean_error,
    mean_pairwise_distance,
    mmd_rbf,
    sample_covariance,
)


def test_mean_error_hand_case():
    samples = np.array([[0.0, 0.0], [2.0, 4.0]])  # mean (1, 2)
    assert mean_error(samples, [4.0, 6.0]) == pytest.approx(5.0)  # ||(-3, -4)||
    assert mean_error(torch.tensor(samples), torch.tensor([1.0, 2.0])) == pytest.approx(0.0)


def test_sample_covariance_is_population_covariance():
    samples = np.array([[0.0, 0.0], [2.0, 4.0]])
    # ddof=0: var x = 1, var y = 4, cov = 2
    np.testing.assert_allclose(sample_covariance(samples), [[1.0, 2.0], [2.0, 4.0]])
    np.testing.assert_allclose(sample_covariance(samples, ddof=1), [[2.0, 4.0], [4.0, 8.0]])


def test_covariance_relative_errors_hand_case():
    samples = np.array([[0.0, 0.0], [2.0, 4.0]])  # population cov [[1, 2], [2, 4]]
    true = np.array([[2.0, 0.0], [0.0, 5.0]])
    err = covariance_relative_errors(samples, true)
    # xx: |1 - 2| / 2; xy: zero true value -> absolute |2 - 0|; yy: |4 - 5| / 5
    np.testing.assert_allclose(err, [[0.5, 2.0], [2.0, 0.2]])
    true_nonzero = np.array([[1.0, -4.0], [-4.0, 4.0]])
    np.testing.assert_allclose(covariance_relative_errors(samples, true_nonzero), [[0.0, 1.5], [1.5, 0.0]])


def test_energy_distance_zero_for_identical_samples():
    x = np.random.default_rng(0).normal(size=(50, 2))
    assert energy_distance(x, x) == pytest.approx(0.0, abs=1e-12)
    assert energy_distance(x, x[::-1].copy()) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("a,b", [(0.0, 1.0), (-2.0, 3.5), (1.0, 1.0)])
def test_energy_distance_point_masses_closed_form(a, b):
    # P = delta_a, Q = delta_b: 2|a-b| - 0 - 0
    x = np.full(7, a)
    y = np.full(3, b)
    assert energy_distance(x, y) == pytest.approx(2.0 * abs(a - b))


def test_energy_distance_two_point_hand_case():
    # x = {0, 1}, y = {0}: E|X-Y| = 0.5, E|X-X'| = 0.5 (pairs 0,1,1,0 / 4), E|Y-Y'| = 0
    assert energy_distance([0.0, 1.0], [0.0]) == pytest.approx(2 * 0.5 - 0.5 - 0.0)


def test_energy_distance_grows_with_shift():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 2))
    y = rng.normal(size=(400, 2))
    same = energy_distance(x, y)
    shifts = [energy_distance(x, y + np.array([s, 0.0])) for s in (0.5, 1.0, 2.0)]
    assert same < 0.02
    assert same < shifts[0] < shifts[1] < shifts[2]
    # for a large shift s >> 1, D^2 ~ 2 s - 2 E||X - X'||, E||X-X'|| = sqrt(pi) for 2-D N(0, I)
    far = energy_distance(x, y + np.array([50.0, 0.0]))
    assert far == pytest.approx(2 * 50.0 - 2 * math.sqrt(math.pi), rel=0.01)


def test_mean_pairwise_distance_blocked_matches_direct():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(30, 2)), rng.normal(size=(40, 2))
    direct = np.linalg.norm(x[:, None] - y[None], axis=-1).mean()
    assert mean_pairwise_distance(x, y) == pytest.approx(direct)


def test_mmd_identical_is_zero_and_two_point_hand_case():
    x = np.random.default_rng(3).normal(size=(20, 2))
    assert mmd_rbf(x, x, 1.0) == pytest.approx(0.0, abs=1e-12)
    # x = {0}, y = {d}: k_xx = k_yy = 1, k_xy = exp(-d^2 / (2 s^2)) -> 2 - 2 exp(...)
    d, s = 1.5, 0.7
    expected = 2.0 - 2.0 * math.exp(-(d**2) / (2 * s**2))
    assert mmd_rbf([[0.0, 0.0]], [[d, 0.0]], s) == pytest.approx(expected)
    # x = {0, 1}, y = {0} (1-D), s = 1: mean k_xx = (2 + 2 e^{-1/2}) / 4, k_yy = 1, mean k_xy = (1 + e^{-1/2}) / 2
    e = math.exp(-0.5)
    expected2 = (2 + 2 * e) / 4 + 1 - 2 * (1 + e) / 2
    assert mmd_rbf([0.0, 1.0], [0.0], 1.0) == pytest.approx(expected2)
    with pytest.raises(ValueError):
        mmd_rbf(x, x, 0.0)


def test_mean_pairwise_distance_self_term_uses_all_pairs():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2500, 2))  # more than one row block
    sub = x[:700]
    direct = np.linalg.norm(sub[:, None] - sub[None], axis=-1).mean()
    assert mean_pairwise_distance(sub) == pytest.approx(direct)
    assert mean_pairwise_distance(x) == pytest.approx(mean_pairwise_distance(x, x))
