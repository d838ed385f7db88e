"""Score estimators against analytic scores (Gaussian) and hand-computed n = 2 cases."""

import math

import pytest
import torch

from repens.models.kernels import RBF, squared_distances
from repens.models.scores import kde_score, sge_score, ssge_score

MEAN = torch.tensor([0.5, -1.0], dtype=torch.float64)
COV = torch.tensor([[1.0, 0.4], [0.4, 0.8]], dtype=torch.float64)


def gaussian_samples(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, 2, generator=g, dtype=torch.float64)
    return MEAN + z @ torch.linalg.cholesky(COV).T


def analytic_score(x):
    return -(x - MEAN) @ torch.linalg.inv(COV)


def relative_error(est, true):
    return float((est - true).norm() / true.norm())


def wide_kernel(x):
    """h = 2 med(d^2), i.e. sigma = median distance: the bandwidth Li & Turner (2018) and
    Shi et al. (2018) use when SGE/SSGE estimate a score from i.i.d. samples."""
    return RBF(2.0 * float(squared_distances(x, x).median()))


def inner_region(x):
    # away from the sparse tails, where no sample-based estimator has information
    return ((x - MEAN) @ torch.linalg.inv(COV) * (x - MEAN)).sum(-1) < 4.0


# Relative errors measured here on 1000 samples (seed 0): KDE with the median heuristic
# 0.25, SGE (eta 0.1) 0.18, SSGE (eta 0.1) 0.15, SSGE (J = 6, eta 0) 0.19.
# Bounds leave room for sampling noise across the seeds tested.
CASES = {
    "kde": (lambda x: kde_score(x, RBF()), 0.35),
    "sge": (lambda x: sge_score(x, wide_kernel(x), eta=0.1), 0.3),
    "ssge": (lambda x: ssge_score(x, wide_kernel(x), eta=0.1), 0.3),
    "ssge-top6": (lambda x: ssge_score(x, wide_kernel(x), eta=0.0, num_eigs=6), 0.3),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimators_approach_the_analytic_gaussian_score(name, seed):
    estimate, bound = CASES[name]
    x = gaussian_samples(1000, seed)
    inner = inner_region(x)
    est, true = estimate(x), analytic_score(x)
    assert relative_error(est[inner], true[inner]) < bound
    cos = torch.nn.functional.cosine_similarity(est[inner], true[inner], dim=-1).mean()
    assert cos > 0.9


def test_ssge_out_of_sample_matches_analytic_score():
    x = gaussian_samples(1000, 3)
    g = torch.Generator().manual_seed(9)
    query = MEAN + 0.7 * torch.randn(50, 2, generator=g, dtype=torch.float64)
    est = ssge_score(x, wide_kernel(x), eta=0.1, query=query)
    assert relative_error(est, analytic_score(query)) < 0.3


@pytest.mark.parametrize("name", ["sge", "ssge"])
def test_stein_estimators_improve_with_more_samples(name):
    estimate, _ = CASES[name]
    errors = []
    for n in (100, 1000):
        x = gaussian_samples(n, 5)
        inner = inner_region(x)
        errors.append(relative_error(estimate(x)[inner], analytic_score(x)[inner]))
    assert errors[1] < 0.8 * errors[0]


# ---------------------------------------------------------------- n = 2 by hand
H = 0.8
X2 = torch.tensor([[0.3, -0.2], [1.1, 0.4]], dtype=torch.float64)


def hand_terms():
    d = X2[0] - X2[1]
    k = math.exp(-float(d @ d) / H)
    g1 = -(2.0 / H) * d * k  # grad_{x1} k(x1, x2); G2 = -G1
    return k, g1


def test_kde_two_points_by_hand():
    k, g1 = hand_terms()
    expected = torch.stack([g1 / (1 + k), -g1 / (1 + k)])
    torch.testing.assert_close(kde_score(X2, RBF(H)), expected)


@pytest.mark.parametrize("eta", [0.0, 0.01, 0.5])
def test_sge_two_points_by_hand(eta):
    # G = [g1, -g1] lies on K's eigenvector (1, -1) with eigenvalue 1 - k
    k, g1 = hand_terms()
    expected = torch.stack([g1, -g1]) / (1 - k + eta)
    torch.testing.assert_close(sge_score(X2, RBF(H), eta=eta), expected)


@pytest.mark.parametrize("eta", [0.0, 0.01])
def test_ssge_two_points_by_hand(eta):
    k, g1 = hand_terms()
    lam = 1 - k + eta  # the only eigenvalue whose eigenvector G overlaps
    expected = (1 - k) * torch.stack([g1, -g1]) / lam**2
    torch.testing.assert_close(ssge_score(X2, RBF(H), eta=eta), expected)
    # keeping only the top eigenvector (1, 1)/sqrt 2, orthogonal to G, gives zero
    torch.testing.assert_close(ssge_score(X2, RBF(H), num_eigs=1, eta=eta), torch.zeros(2, 2, dtype=torch.float64))


def test_ssge_two_points_out_of_sample_by_hand():
    k, g1 = hand_terms()
    q = torch.tensor([[0.0, 0.5]], dtype=torch.float64)
    kq = torch.exp(-((q - X2) ** 2).sum(-1) / H)  # k(q, x1), k(q, x2)
    expected = (kq[0] - kq[1]) * g1 / (1 - k) ** 2
    torch.testing.assert_close(ssge_score(X2, RBF(H), eta=0.0, query=q), expected.unsqueeze(0))


def test_kde_at_query_uses_the_samples_bandwidth():
    x = gaussian_samples(50, 5)
    torch.testing.assert_close(kde_score(x, RBF(), query=x), kde_score(x, RBF()))


@pytest.mark.parametrize("eta", [0.01, 1.0])
def test_ssge_weights_by_inverse_equal_those_by_every_eigenpair(eta):
    """The GPU's SSGE weights (an inverse, no host-side check) against ``eigh``'s, in float64:
    the two round differently by at most about eps * cond(K + eta I)^2, and the condition
    number is at most (M + eta) / eta (an RBF Gram matrix's eigenvalues lie in [0, M])."""
    from repens.models.kernels import RBF
    from repens.models.scores import all_eigenpairs_weights

    g = torch.Generator().manual_seed(3)
    x, query = torch.randn(20, 4, generator=g, dtype=torch.float64), torch.randn(7, 4, generator=g, dtype=torch.float64)
    kernel = RBF()
    gram, h = kernel.self_gram(x)
    cross = kernel.gram(query, x, h)
    eigvals, eigvecs = torch.linalg.eigh(gram + eta * torch.eye(20, dtype=torch.float64))
    by_eigh = ((cross @ eigvecs) / eigvals.pow(2).unsqueeze(-2)) @ eigvecs.mT
    by_inverse = all_eigenpairs_weights(cross, gram, eta)
    cond = (20 + eta) / eta
    tolerance = 16 * torch.finfo(torch.float64).eps * cond**2
    assert (by_inverse - by_eigh).abs().max() <= tolerance * by_eigh.abs().max()
