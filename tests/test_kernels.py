import math

import torch

from repens.kernels import RBF, kernel_grad_sum, median_bandwidth, squared_distances


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
