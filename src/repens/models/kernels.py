"""RBF kernel on stacked particles, with the median heuristic or a fixed bandwidth.

The kernel is written as in Sec. 2.1 of D'Angelo & Fortuin (2021):

    k(x, y) = exp(-||x - y||^2 / h).

Median heuristic (Liu & Wang 2016, SVGD, Sec. 5; the authors' released code
``ratschlab/repulsive_ensembles`` uses the same form):

    h = med{ ||x_i - x_j||^2 : i, j = 1..n } / log(n + 1),

the (lower) median taken over all n^2 entries of the squared-distance matrix
(diagonal zeros included) and treated as a constant (no gradient flows through it).
When that median is zero -- one or two particles, or more than half of the pairs
coincident -- it carries no scale, so the median of the *positive* squared
distances takes its place; when every particle coincides, ``h = 1`` (every
difference is then exactly zero, so the repulsion is zero whatever ``h`` is, and
the kernel is 1 between coincident particles for any ``h``).
A fixed bandwidth ``h`` corresponds to ``exp(-d^2 / (2 sigma^2))`` with
``h = 2 sigma^2``; the paper's funnel setting "bandwidth 0.5" is taken as h = 0.5
(sigma = 0.5 in the authors' code gives exactly h = 2 * 0.25 = 0.5).

Numerics (the same results on every machine, float32 included):

* distances are computed about a reference particle ``c = y_0`` (translation
  invariance), so their rounding error scales with the particles' spread and not
  with their norm (network weights sit far from the origin relative to a
  collapsed ensemble's spread);
* a particle's distance to itself is exactly 0 and self-distance matrices are
  exactly symmetric;
* the one-GEMM formula ``|a|^2 + |b|^2 - 2 a.b`` cancels catastrophically for
  pairs close relative to their norms; every pair whose computed distance lies
  within the formula's rounding bound (:func:`squared_distances`) is recomputed
  as ``sum_k (a_k - b_k)^2``, which is exact for coincident particles and
  accurate to a few ulps otherwise;
* on a GPU (no host round-trip allowed inside a captured step) the formula runs in
  float64 instead, where it does not cancel at float32's precision
  (:func:`float64_gemm_distances`);
* :func:`kernel_grad_sum` works on the same centred coordinates, so coincident
  particles (and a single particle) give exactly zero repulsion.
"""

from __future__ import annotations

import contextvars
import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = [
    "RBF",
    "squared_distances",
    "difference_distances",
    "float64_gemm_distances",
    "median_bandwidth",
    "kernel_grad_sum",
    "CANCELLATION_FACTOR",
    "gpu_path",
    "gpu_paths",
    "set_matmul",
    "BMM_LOOP_WORK",
    "WIDE_BLOCK",
]

#: set inside :func:`gpu_paths`
_GPU_PATHS: contextvars.ContextVar[bool] = contextvars.ContextVar("repens_gpu_paths", default=False)


def gpu_path(t: Tensor) -> bool:
    """Whether work on ``t`` takes the GPU's code path, the one that never waits for the host
    (no value read back to pick a branch, so a step can be captured as a CUDA graph): on any
    device but the CPU, and on the CPU inside :func:`gpu_paths`."""
    return t.device.type != "cpu" or _GPU_PATHS.get()


@contextmanager
def gpu_paths() -> Iterator[None]:
    """Inside, the CPU runs the GPU's code paths (:func:`gpu_path`): what a captured GPU step
    runs, op for op, where tests can look at it (``tests/test_capture.py``). Results differ
    from the CPU's own paths by rounding only (the same formulas, other kernels)."""
    token = _GPU_PATHS.set(True)
    try:
        yield
    finally:
        _GPU_PATHS.reset(token)


#: guards only against underflow: a positive median is never this small in practice
_MIN_BANDWIDTH = 1e-30

#: A pair is recomputed by differences when its GEMM distance is below
#: ``CANCELLATION_FACTOR * sqrt(d) * u * (|a|^2 + |b|^2)`` (``u`` the unit roundoff).
#: ``sqrt(d) * u * (|a|^2 + |b|^2)`` is the typical rounding error of the GEMM
#: formula for length-d dot products (Higham 2002, Sec. 2.8, statistical bound); a
#: factor 1e3 keeps the relative error of every pair left to the GEMM near 1e-3 or
#: below, and is far above the constant any BLAS blocking gives.
CANCELLATION_FACTOR = 1e3

#: At most this many ``pairs x d`` over all sets (``G n m d``), the CPU takes differences
#: (:func:`difference_distances`), not the GEMM formula: a few dozen small ops then cost more
#: than the arithmetic. Measured on one core (us, GEMM+recompute vs differences): 20 sets of
#: 5 x 64 (a UCI stack's function-space outputs) 102 vs 23; 20 x 5 x 256 112 vs 91; 20 x 10 x 64
#: 116 vs 74; above it 20 x 10 x 128 133 vs 154, 20 x 5 x 751 (the UCI stack's weights) 147 vs
#: 297, 50 x 2,701 (the toy) 304 vs 5,586.
SMALL_PAIRS_WORK = 1 << 17

#: elements of one (pairs, d) temporary when recomputing pairs by differences
_CHUNK_ELEMENTS = 1 << 22


def _centred(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """``x - c`` and ``y - c`` about the reference particle ``c = y_0`` of each set
    (``y`` itself if ``x is y``)."""
    if y.shape[-2] == 0:
        return x, y
    c = y[..., :1, :]
    yc = y - c
    return (yc if x is y else x - c), yc


def _recompute_pairs(d: Tensor, xc: Tensor, yc: Tensor, suspect: Tensor) -> Tensor:
    """``d`` with the ``suspect`` entries replaced by ``sum_k (xc_i - yc_j)^2``."""
    pairs = suspect.nonzero()
    if pairs.shape[0] == 0:
        return d
    chunk = max(1, _CHUNK_ELEMENTS // max(xc.shape[-1], 1))
    exact = []
    for rows in pairs.split(chunk):
        lead = tuple(rows[:, :-2].T)  # the set each pair belongs to (stacks of sets)
        exact.append((xc[(*lead, rows[:, -2])] - yc[(*lead, rows[:, -1])]).pow(2).sum(-1))
    return d.index_put(tuple(pairs.T), torch.cat(exact))


#: Below this many multiply-adds per matrix (``r k c`` for (r, k) @ (k, c)), torch's CPU ``bmm`` /
#: ``baddbmm`` multiplies a stack with a loop kernel of its own (ATen's ``baddbmm_cpu_kernel``:
#: a multiply, then an add), where one set's ``mm`` / ``addmm`` calls the BLAS GEMM (MKL: fused
#: multiply-adds on an Intel Xeon with AVX-512; measured in torch 2.14, where the two agreed on
#: an AMD EPYC). Measured on the Xeon, one thread, 3 sets: 83 of 111 shapes under the threshold
#: differ from the sets' own products by an ulp or so (SSGE's (3, 3) @ (3, 3) by up to 6e-8 in
#: entries ~0.5), none of 288 above it with every dimension over 1 (bmm and baddbmm).
BMM_LOOP_WORK = 400


def _per_set(a: Tensor, b: Tensor) -> bool:
    """Whether a stack's product ``a @ b`` (..., r, k) @ (..., k, c) runs set by set so that each
    set's product rounds as one set's own (n, .) product does: on the CPU (:func:`gpu_path` off),
    below :data:`BMM_LOOP_WORK`, or with a dimension 1 (one set's product is then BLAS's
    matrix-vector or rank-1 kernel, the stack's a GEMM: (10, 50) @ (50, 1) and
    (1, 1) @ (1, 641) differed, measured)."""
    r, k, c = a.shape[-2], a.shape[-1], b.shape[-1]
    return not gpu_path(a) and (r * k * c < BMM_LOOP_WORK or min(r, k, c) == 1)


def _each_set(lead: torch.Size, *tensors: Tensor) -> list[tuple[Tensor, ...]]:
    """Each set's (2-d) blocks of ``tensors`` broadcast to the leading axes ``lead``: views
    that keep the blocks' strides, so a BLAS call sees each set as it sees one set alone."""
    full = [t.expand(*lead, *t.shape[-2:]) for t in tensors]
    return [tuple(t[index] for t in full) for index in itertools.product(*(range(size) for size in lead))]


#: On the CPU, a small matrix times a wide one, (r, k) @ (k, c) with r and k at most
#: :data:`WIDE_SIDE` and c over twice this, runs in blocks of this many columns of ``b``
#: (:func:`_blocked_mm`): the particles' repulsion, (n, n) @ (n, d) for d ~ 1e5 weights. One
#: thread of an AMD EPYC (torch 2.14, MKL), (50, 50) @ (50, 99,710): 25.1 ms for the whole
#: width, 10.2 ms in blocks of 2,048 or 4,096, 13.1 ms of 16,384, the same bits
#: (``benchmarks/bench_wide_product.py``, 2026-11-29).
WIDE_BLOCK = 4096
#: the largest r and k of a product taken in blocks of columns
WIDE_SIDE = 256


def _wide(a: Tensor, b: Tensor) -> bool:
    """Whether ``a @ b`` runs in blocks of columns (:data:`WIDE_BLOCK`): on the CPU's paths,
    for a small ``a``, a wide ``b`` and no autograd (``out=`` records none)."""
    return (
        not gpu_path(a)
        and b.shape[-1] > 2 * WIDE_BLOCK
        and max(a.shape[-2], a.shape[-1]) <= WIDE_SIDE
        and not (torch.is_grad_enabled() and (a.requires_grad or b.requires_grad))
    )


def _blocked_mm(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` (2-d) written block by block of :data:`WIDE_BLOCK` columns of ``b``."""
    out = a.new_empty(a.shape[0], b.shape[1])
    for start in range(0, b.shape[1], WIDE_BLOCK):
        block = slice(start, start + WIDE_BLOCK)
        torch.mm(a, b[:, block], out=out[:, block])
    return out


def set_matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` for one set (r, k) @ (k, c) or a stack of sets (..., r, k) @ (..., k, c) whose
    every set's product is, bit for bit, what that set's own 2-d ``a @ b`` gives: a stack's
    products that ``bmm`` would round otherwise (:func:`_per_set`) run set by set, the
    others in one ``bmm`` (its GEMM per set rounds as one set's; a few dozen small ops cost
    more than one call there). What makes a stack of seeds equal its one-seed jobs
    (``tests/experiments/test_image_stack.py``). A small matrix times a wide one runs in
    blocks of columns on the CPU (:data:`WIDE_BLOCK`), a stack's set by set."""
    if a.dim() == 2 and b.dim() == 2:
        return _blocked_mm(a, b) if _wide(a, b) else a @ b
    if not (_per_set(a, b) or _wide(a, b)):
        return a @ b
    lead = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    products = [set_matmul(x, y) for x, y in _each_set(lead, a, b)]
    return torch.stack(products).view(*lead, a.shape[-2], b.shape[-1])


def _matmul_add(base: Tensor, a: Tensor, b: Tensor, alpha: float, beta: float = 1.0) -> Tensor:
    """``beta * base + alpha * a @ b`` in one BLAS call, for one set or a stack of sets (set by
    set where one call would round a set otherwise than the set's own call: :func:`_per_set`)."""
    if a.dim() == 2:
        return torch.addmm(base, a, b, beta=beta, alpha=alpha)
    lead = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if _per_set(a, b):
        sums = [torch.addmm(s, x, y, beta=beta, alpha=alpha) for s, x, y in _each_set(lead, base, a, b)]
        return torch.stack(sums).view(*lead, a.shape[-2], b.shape[-1])
    out = torch.baddbmm(
        base.expand(*lead, *base.shape[-2:]).reshape(-1, *base.shape[-2:]),
        a.expand(*lead, *a.shape[-2:]).reshape(-1, *a.shape[-2:]),
        b.expand(*lead, *b.shape[-2:]).reshape(-1, *b.shape[-2:]),
        beta=beta,
        alpha=alpha,
    )
    return out.view(*lead, *out.shape[-2:])


def squared_distances(x: Tensor, y: Tensor) -> Tensor:
    """Pairwise squared Euclidean distances between rows of ``x`` (..., n, d) and ``y`` (..., m, d).

    Leading axes are independent sets (e.g. one per data split). One GEMM on
    coordinates centred at ``y_0``; entries within the GEMM formula's cancellation
    bound (``CANCELLATION_FACTOR``) are recomputed by differences. Small problems take
    differences (:func:`difference_distances`); on the GPU's paths, large ones one float64
    GEMM (:func:`float64_gemm_distances`), which needs no recomputation.
    ``squared_distances(x, x)`` (the same tensor object) has an exactly zero
    diagonal and is exactly symmetric.
    """
    if x.dim() < 2 or y.dim() < 2 or x.shape[-1] != y.shape[-1]:
        raise ValueError(f"expected (..., n, d) and (..., m, d) particles, got {tuple(x.shape)} and {tuple(y.shape)}")
    same = x is y
    if x[..., :1].numel() * y.shape[-2] * x.shape[-1] <= SMALL_PAIRS_WORK:
        return difference_distances(x, y)
    if gpu_path(x):
        return float64_gemm_distances(x, y)
    xc, yc = _centred(x, y)
    # one GEMM and no (n, m, d) temporaries: these run every step on (n, ~1e5) particles
    x2 = torch.linalg.vector_norm(xc, dim=-1).pow(2).unsqueeze(-1)
    y2 = x2 if same else torch.linalg.vector_norm(yc, dim=-1).pow(2).unsqueeze(-1)
    scale = x2 + y2.mT
    d = _matmul_add(scale, xc, yc.mT, alpha=-2.0).clamp_min(0.0)
    if same:
        d = torch.triu(d, diagonal=1)
    unit_roundoff = torch.finfo(d.dtype).eps / 2
    bound = (CANCELLATION_FACTOR * math.sqrt(max(x.shape[-1], 1)) * unit_roundoff) * scale.detach()
    suspect = d.detach() <= bound
    if same:
        suspect = torch.triu(suspect, diagonal=1)
    d = _recompute_pairs(d, xc, yc, suspect)
    if same:
        d = d + d.mT
    return d


def difference_distances(x: Tensor, y: Tensor) -> Tensor:
    """``sum_k (x_ik - y_jk)^2`` for every pair, by differences (``cdist`` without the GEMM
    formula): exact zeros for coincident particles, exactly symmetric, no cancellation.
    Small problems (:data:`SMALL_PAIRS_WORK`), where a few dozen small ops would cost more
    than the arithmetic. Its n·m·d work runs outside the GEMM units, so large problems on
    a GPU take :func:`float64_gemm_distances`."""
    return torch.cdist(x, y, compute_mode="donot_use_mm_for_euclid_dist").pow(2)


#: float64's unit roundoff
_U64 = torch.finfo(torch.float64).eps / 2


def float64_gemm_distances(x: Tensor, y: Tensor) -> Tensor:
    """The GPU path: ``|a|^2 + |b|^2 - 2 a.b`` in float64, on coordinates centred at ``y_0``
    in float64 (the difference of two float32 numbers is exact there), returned in ``x``'s
    dtype. No host round-trip (the CPU path's recomputation of cancelling pairs needs
    ``nonzero``), so a CUDA graph can hold it; the work is one GEMM, on an H100/H200's
    float64 tensor cores.

    Error: the sums of squares and the dot product round by at most ``gamma_(d+2) (|a|+|b|)^2``
    (``gamma_k = k u64 / (1 - k u64)``, Higham 2002 Eq. 3.5, with Cauchy-Schwarz), then one
    rounding to float32 (``u32`` relative). Against the kernel's bandwidth (the median of the
    squared distances) the float64 part is ~1e-11 at d = 1e5, far below float32's rounding;
    a pair closer than about 1e-3.5 of its distance to ``y_0`` loses relative accuracy (its
    kernel value is 1 to float32 precision either way). A pair within that bound is set to
    exactly 0, so coincident particles are at distance 0 as on the CPU. ``x is y``: an exactly zero
    diagonal and an exactly symmetric matrix (upper triangle mirrored). Measured on an H200
    against ``cdist`` by differences: ``benchmarks/bench_distances.py --device cuda``."""
    same = x is y
    c = y[..., :1, :].double()
    yc = y.double() - c
    xc = yc if same else x.double() - c
    y2 = yc.square().sum(-1, keepdim=True)
    x2 = y2 if same else xc.square().sum(-1, keepdim=True)
    d = _matmul_add(x2 + y2.mT, xc, yc.mT, alpha=-2.0)
    # within the rounding bound a pair is indistinguishable from a coincident one: 0, as the
    # CPU path gives coincident particles (the median heuristic's zero-median case needs it)
    k = xc.shape[-1] + 2
    gamma = k * _U64 / (1 - k * _U64)
    bound = gamma * (x2.detach().sqrt() + y2.detach().sqrt().mT).square()
    d = torch.where(d.detach() <= bound, torch.zeros((), dtype=d.dtype, device=d.device), d)
    if same:
        d = torch.triu(d, diagonal=1)
        d = d + d.mT
    return d.to(x.dtype)


def median_bandwidth(sq_dists: Tensor, n: int) -> Tensor:
    """Median heuristic ``h = median(sq_dists) / log(n + 1)`` of each set (..., n, m) -> (..., 1, 1);
    zero median: see module docstring. Computed on the device (no host round-trip)."""
    flat = sq_dists.detach().flatten(-2)
    med = flat.median(-1).values
    # the usual case, every median positive, needs no fallback; a CPU decides it on the host
    # (free there, a round-trip on a GPU) and skips the fallback's six ops (52 -> 25 us, 20 sets of 10)
    if gpu_path(flat) or not bool((med > 0).all()):
        # median of the positive entries (NaN where none are)
        positive = torch.where(flat > 0, flat, torch.full_like(flat, float("nan"))).nanmedian(-1).values
        fallback = torch.where(torch.isnan(positive), torch.ones_like(positive) * math.log(n + 1), positive)
        med = torch.where(med > 0, med, fallback)
    return (med / math.log(n + 1)).clamp_min(_MIN_BANDWIDTH)[..., None, None]


def kernel_grad_sum(x: Tensor, y: Tensor, gram: Tensor, h: Tensor | float, row_scale: Tensor | None = None) -> Tensor:
    """``sum_j grad_{x_i} k(x_i, y_j)`` for the RBF kernel, shape (..., n, d), each row times
    ``row_scale`` (..., n, 1) if given (KDE's ``1 / sum_j K_ij``).

    Uses ``grad_x k(x, y) = -(2 / h) (x - y) k(x, y)``, so the sum is a matrix
    product rather than an (n, m, d) tensor: ``(2/h) (K (y - c) - diag(K 1) (x - c))``
    with ``c = y_0``, which is exactly zero when every particle coincides. ``h`` may
    be a tensor (one per set, (..., 1, 1)): it stays on the device.

    For the particles themselves (``x is y``) that is ``(2/h) (K° - diag(K° 1)) (x - c)``,
    ``K°`` the Gram matrix with its diagonal set to 0 (the terms ``j = i`` cancel): the
    scalings go into the (n, n) matrix and the (n, d) side is one product, with no pass over
    (n, d) but the centring (:func:`set_matmul`).
    """
    if x is y:
        off = gram - torch.diag_embed(torch.diagonal(gram, dim1=-2, dim2=-1))
        weights = off - torch.diag_embed(off.sum(-1))
        factor = 2.0 / h if row_scale is None else (2.0 / h) * row_scale
        return set_matmul(weights * factor, _centred(x, y)[1])
    xc, yc = _centred(x, y)
    # (K (y - c) - diag(K 1) (x - c)) in one GEMM, then one scaling pass over (n, d)
    out = _matmul_add(xc * gram.sum(-1, keepdim=True), gram, yc, alpha=1.0, beta=-1.0).mul_(2.0 / h)
    return out if row_scale is None else out.mul_(row_scale)


@dataclass(frozen=True)
class RBF:
    """RBF kernel ``exp(-||x-y||^2 / h)``.

    Args:
        bandwidth: fixed ``h``; ``None`` selects the median heuristic, computed on
            the reference set (the particles) each time the kernel is evaluated.
    """

    bandwidth: float | None = None
    #: the fixed bandwidth's tensor by (dtype, device), see :meth:`bandwidth_for`
    _fixed: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def bandwidth_for(self, reference: Tensor, sq_dists: Tensor | None = None) -> Tensor:
        """The bandwidth ``h`` for the particle set ``reference`` (n, d): a 0-d tensor if
        fixed, (..., 1, 1) by the median heuristic (one per set of a stack). A fixed one is
        made at the first call for a dtype and device and kept (a number's tensor is a
        host-to-device copy, which a CUDA graph's capture cannot hold)."""
        if self.bandwidth is not None:
            key = (reference.dtype, reference.device)
            if key not in self._fixed:
                self._fixed[key] = torch.as_tensor(self.bandwidth, dtype=reference.dtype, device=reference.device)
            return self._fixed[key]
        if sq_dists is None:
            sq_dists = squared_distances(reference, reference)
        return median_bandwidth(sq_dists, reference.shape[-2])

    def gram(self, x: Tensor, y: Tensor, h: Tensor | float) -> Tensor:
        """Kernel matrix ``k(x_i, y_j)`` (n, m) at bandwidth ``h``."""
        return torch.exp(-squared_distances(x, y) / h)

    def self_gram(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Gram matrix of the particle set with itself and the bandwidth used."""
        sq = squared_distances(x, x)
        h = self.bandwidth_for(x, sq)
        return torch.exp(-sq / h), h
