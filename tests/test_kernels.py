import math

import pytest
import torch

from repens.models import kernels
from repens.models.kernels import RBF, kernel_grad_sum, median_bandwidth, squared_distances


@pytest.fixture(params=["gemm", "differences"])
def distance_path(request, monkeypatch):
    """Run a test on the CPU's GEMM formula (with its recomputation of cancelling pairs) and
    on the differences it takes for small problems (:data:`repens.models.kernels.SMALL_PAIRS_WORK`)."""
    monkeypatch.setattr(kernels, "SMALL_PAIRS_WORK", 0 if request.param == "gemm" else 1 << 62)
    return request.param


def test_small_problems_take_differences_and_large_ones_the_gemm(monkeypatch):
    taken = []
    real = kernels.difference_distances
    monkeypatch.setattr(kernels, "difference_distances", lambda x, y: taken.append(x.shape) or real(x, y))
    small, large = torch.randn(20, 5, 64), torch.randn(20, 5, 751)  # a UCI stack's outputs / weights
    squared_distances(small, small)
    squared_distances(large, large)
    assert taken == [small.shape]


def test_squared_distances_match_cdist():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(7, 3, generator=g, dtype=torch.float64), torch.randn(5, 3, generator=g, dtype=torch.float64)
    torch.testing.assert_close(squared_distances(x, y), torch.cdist(x, y) ** 2)


def test_median_heuristic_formula_by_hand():
    # three points on a line at 0, 1, 3: squared distances {0,0,0,1,1,4,4,9,9}, median 1
    x = torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64)
    h = RBF().bandwidth_for(x)
    assert math.isclose(float(h), 1.0 / math.log(4.0))
    assert math.isclose(float(median_bandwidth(squared_distances(x, x), 3)), 1.0 / math.log(4.0))


def test_fixed_bandwidth_is_used_verbatim():
    x = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    gram, h = RBF(0.5).self_gram(x)
    assert float(h) == 0.5
    assert math.isclose(float(gram[0, 1]), math.exp(-2.0 / 0.5))


def test_kernel_grad_sum_matches_autograd():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randn(3, 4, generator=g, dtype=torch.float64)
    h = 1.7
    gram = RBF(h).gram(x, y, h)
    (auto,) = torch.autograd.grad(gram.sum(), x)
    torch.testing.assert_close(kernel_grad_sum(x.detach(), y, gram.detach(), h), auto)


@pytest.mark.parametrize("row_scale", [False, True])
def test_the_particles_own_repulsion_matches_autograd(row_scale):
    """``x is y`` takes the one-product form ``(K° - diag(K° 1)) (x - c)``; against autograd of
    each particle's kernel sum with the other particles held fixed, and each row scaled."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 4, generator=g, dtype=torch.float64)
    h = 1.7
    moving = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(RBF(h).gram(moving, x, h).sum(), moving)
    gram = RBF(h).gram(x, x, h)
    scale = torch.rand(6, 1, generator=g, dtype=torch.float64) + 0.5 if row_scale else None
    expected = auto * scale if row_scale else auto
    torch.testing.assert_close(kernel_grad_sum(x, x, gram, h, row_scale=scale), expected)


def test_a_small_matrix_times_a_wide_one_runs_in_blocks_within_float32_rounding(monkeypatch):
    """On the CPU a (r, k) @ (k, c) product with a wide ``c`` is written block by block of
    columns (:data:`repens.models.kernels.WIDE_BLOCK`), the last block short; each entry is a
    length-k dot product, so within ``gamma_k |a| |b|`` of the exact product (Higham 2002,
    Eq. 3.12); products that need a gradient, or on the GPU's paths, stay whole."""
    calls = []
    real_mm = torch.mm
    monkeypatch.setattr(kernels, "WIDE_BLOCK", 64)
    monkeypatch.setattr(torch, "mm", lambda a, b, **kw: calls.append(b.shape[-1]) or real_mm(a, b, **kw))
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(7, 5, generator=g), torch.randn(5, 300, generator=g)
    out = kernels.set_matmul(a, b)
    assert calls == [64, 64, 64, 64, 44]
    exact = a.double() @ b.double()
    k = a.shape[-1]
    gamma = k * U32 / (1 - k * U32)
    assert bool(((out.double() - exact).abs() <= gamma * (a.double().abs() @ b.double().abs())).all())
    calls.clear()
    kernels.set_matmul(a.requires_grad_(True), b)
    with kernels.gpu_paths():
        kernels.set_matmul(a.detach(), b)
    assert calls == []


# ------------------------------------------------------------ machine-independent numerics
# float32 unit roundoff; the pairwise/cascade sums torch uses have relative error at most
# ceil(log2 d) * u per sum of d positive terms (Higham 2002, Sec. 4.2)
U32 = torch.finfo(torch.float32).eps / 2
U64 = torch.finfo(torch.float64).eps / 2


def _exact_sq(x64):
    return torch.cdist(x64, x64, compute_mode="donot_use_mm_for_euclid_dist").pow(2)


def test_self_distances_have_exact_zero_diagonal_and_symmetry(distance_path):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(9, 1000, generator=g) * 50 + 300  # far from the origin, float32
    d = squared_distances(x, x)
    assert torch.equal(torch.diagonal(d), torch.zeros(9))
    assert torch.equal(d, d.T)


def test_duplicates_are_at_distance_exactly_zero(distance_path):
    g = torch.Generator().manual_seed(3)
    base = torch.randn(4, 500, generator=g) * 10 + 7
    x = torch.cat([base, base[1:2], base[1:2]])  # rows 1, 4, 5 coincide
    d = squared_distances(x, x)
    for i, j in [(1, 4), (1, 5), (4, 5)]:
        assert d[i, j] == 0 and d[j, i] == 0
    assert (d[0, 1:4] > 0).all()


@pytest.mark.parametrize("separation", [1e-2, 1e-4, 1e-6])
def test_near_duplicates_in_float32_at_d_1e5_are_accurate(separation):
    # a pair at distance `separation * |x|` among particles of norm ~ 316 (network weights):
    # the uncentred GEMM formula loses every digit below separation ~ 3e-3 in float32
    # (4 x 4 pairs x 1e5 is far above SMALL_PAIRS_WORK: the GEMM formula, as the next test's)
    d = 100_000
    g = torch.Generator().manual_seed(4)
    centre = torch.randn(1, d, generator=g, dtype=torch.float64)
    offsets = torch.randn(3, d, generator=g, dtype=torch.float64) * (separation * centre.norm() / d**0.5)
    x = torch.cat([centre + offsets, centre + 3 * offsets[:1]]).float()
    exact = _exact_sq(x.double())
    got = squared_distances(x, x).double()
    off = ~torch.eye(4, dtype=torch.bool)
    rel = ((got - exact).abs() / exact)[off]
    # recomputed pairs: differences of float32 numbers this close are exact (Sterbenz), then
    # one rounding per square and a cascade sum: (1 + ceil(log2 d)) u; GEMM pairs are left to
    # the GEMM only above the cancellation bound, where the error is <= 1e-3 by construction
    tol = max((1 + math.ceil(math.log2(d))) * U32, 1.0 / kernels.CANCELLATION_FACTOR)
    assert float(rel.max()) <= tol


def test_cross_distances_are_accurate_for_near_duplicates():
    d = 20_000
    g = torch.Generator().manual_seed(5)
    centre = torch.randn(1, d, generator=g) * 3
    x = centre + 1e-4 * torch.randn(5, d, generator=g)
    y = centre + 1e-4 * torch.randn(3, d, generator=g)
    exact = torch.cdist(x.double(), y.double(), compute_mode="donot_use_mm_for_euclid_dist").pow(2)
    rel = (squared_distances(x, y).double() - exact).abs() / exact
    assert float(rel.max()) <= 1.0 / kernels.CANCELLATION_FACTOR


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 2, 5])
def test_coincident_particles_give_exactly_zero_repulsion(n, dtype, distance_path):
    g = torch.Generator().manual_seed(6)
    x = (torch.randn(1, 3000, generator=g, dtype=dtype) * 100 + 1).repeat(n, 1)
    gram, h = RBF().self_gram(x)
    assert torch.equal(gram, torch.ones(n, n, dtype=dtype))
    assert float(h) == 1.0  # every particle coincides: documented h = 1
    assert torch.equal(kernel_grad_sum(x, x, gram, h), torch.zeros_like(x))


def test_zero_median_falls_back_to_median_of_positive_distances():
    # two particles: squared distances {0, 0, 4, 4}, lower median 0 -> use the positive ones
    x = torch.tensor([[0.0, 0.0], [2.0, 0.0]], dtype=torch.float64)
    assert math.isclose(float(RBF().bandwidth_for(x)), 4.0 / math.log(3.0))
    # three coincident and one apart: 10 of 16 entries are 0, the 6 positive ones are all 3^2
    y = torch.tensor([[1.0], [1.0], [1.0], [4.0]], dtype=torch.float64)
    assert math.isclose(float(RBF().bandwidth_for(y)), 9.0 / math.log(5.0))


def test_single_particle_bandwidth_is_one():
    x = torch.randn(1, 7, dtype=torch.float64)
    assert float(RBF().bandwidth_for(x)) == 1.0


def test_the_gpu_paths_take_differences_for_small_problems_and_one_float64_gemm_for_large_ones(monkeypatch):
    from repens.models.kernels import gpu_paths

    taken = []
    for name in ("difference_distances", "float64_gemm_distances"):
        real = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda x, y, real=real, name=name: taken.append(name) or real(x, y))
    small, large = torch.randn(20, 5, 64), torch.randn(50, 99_710)  # a UCI stack's outputs / FashionMNIST weights
    with gpu_paths():
        squared_distances(small, small)
        squared_distances(large, large)
    assert taken == ["difference_distances", "float64_gemm_distances"]


def _gemm64_bound(x: torch.Tensor, y: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """What :func:`float64_gemm_distances` may miss by: ``gamma_(d+2) (|a|+|b|)^2`` in float64
    about ``y_0``, then one rounding to float32 (and the float64 error rounded with it)."""
    d = x.shape[-1]
    gamma = (d + 2) * U64 / (1 - (d + 2) * U64)
    c = y[..., :1, :].double()
    a = torch.linalg.vector_norm(x.double() - c, dim=-1).unsqueeze(-1)
    b = torch.linalg.vector_norm(y.double() - c, dim=-1).unsqueeze(-2)
    return (U32 * exact + gamma * (a + b) ** 2) * (1 + U32)


def test_the_gpu_paths_float64_gemm_is_within_its_derived_bound_exactly_symmetric_and_zero_on_the_diagonal():
    from repens.models.kernels import float64_gemm_distances

    g = torch.Generator().manual_seed(9)
    d = 20_000
    centre = torch.randn(1, d, generator=g) * 3
    # near-coincident particles about a common centre, one far from the rest, one a copy
    x = torch.cat([centre + 1e-4 * torch.randn(4, d, generator=g), centre, torch.randn(1, d, generator=g)])
    x = torch.cat([x, x[1:2]])
    stack = torch.stack([x, x.flip(0)])
    exact = torch.cdist(x.double(), x.double(), compute_mode="donot_use_mm_for_euclid_dist").pow(2)
    for got in (float64_gemm_distances(x, x), float64_gemm_distances(stack, stack)[1].flip(0).flip(1)):
        assert got.dtype == torch.float32
        assert torch.equal(torch.diagonal(got), torch.zeros(7)) and torch.equal(got, got.T)
        assert got[1, 6] == 0 and got[6, 1] == 0  # a copy is at distance exactly 0
        assert bool(((got.double() - exact).abs() <= _gemm64_bound(x, x, exact)).all())
    # two different sets (x against y): the same bound
    y = x[2:] + 1e-3 * torch.randn(5, d, generator=g)
    exact_xy = torch.cdist(x.double(), y.double(), compute_mode="donot_use_mm_for_euclid_dist").pow(2)
    got = float64_gemm_distances(x, y)
    assert bool(((got.double() - exact_xy).abs() <= _gemm64_bound(x, y, exact_xy)).all())


def test_the_gpu_paths_float64_gemm_carries_gradients_as_the_cpu_path_does():
    from repens.models.kernels import gpu_paths

    g = torch.Generator().manual_seed(10)
    x = torch.randn(6, 40_000, generator=g, dtype=torch.float64)
    grads = []
    for on_gpu_paths in (False, True):
        leaf = x.clone().requires_grad_(True)
        if on_gpu_paths:
            with gpu_paths():
                sq = squared_distances(leaf, leaf)
        else:
            sq = squared_distances(leaf, leaf)
        torch.exp(-sq / sq.detach().median()).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-9, atol=1e-12)


def test_difference_distances_agree_with_the_cpu_path(monkeypatch):
    """Small problems (and the GPU's) take differences; checked against the GEMM formula."""
    monkeypatch.setattr(kernels, "SMALL_PAIRS_WORK", 0)  # squared_distances: the GEMM formula
    from repens.models.kernels import difference_distances

    g = torch.Generator().manual_seed(8)
    centre = torch.randn(1, 20_000, generator=g) * 3
    x = torch.cat([centre + 1e-4 * torch.randn(4, 20_000, generator=g), centre])
    stack = torch.stack([x, x.flip(0)])
    exact = torch.cdist(x.double(), x.double(), compute_mode="donot_use_mm_for_euclid_dist").pow(2)
    for got in (difference_distances(x, x), difference_distances(stack, stack)[1].flip(0).flip(1)):
        assert torch.equal(torch.diagonal(got), torch.zeros(5)) and torch.equal(got, got.T)
        off = ~torch.eye(5, dtype=torch.bool)
        # differences this close are exact (Sterbenz); cdist sums the d squares in sequence
        # (relative error <= (d - 1) u, Higham 2002 Eq. 4.4), then sqrt and square: 4 u more
        assert float(((got.double() - exact).abs() / exact)[off].max()) <= (20_000 - 1 + 4) * U32
    torch.testing.assert_close(difference_distances(x, x), squared_distances(x, x), rtol=1e-4, atol=0)
