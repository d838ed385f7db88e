"""The two largest costs of an SSGE/SGE step on a GPU, each against a candidate (a script, not a test).

The H200 profile of a replayed ssge-fWGD step (docs/gpu.md) puts the float64 LU of the
estimators' ``(K + eta I)^-1`` (``getrf_pivot<double>`` and its triangular solves, 18 % of
the device time) and the median of the bandwidth heuristic (``gatherMedian``, 7 %) above
every GEMM. This times each of them alone, as the step computes it and as a candidate
computes it, on the shapes of a FashionMNIST step (n = 50 particles, one set or a stack of
five), and prints how far the candidate's numbers are from today's:

* the inverse: ``torch.linalg.inv_ex`` (LU with pivoting, today) against a Cholesky
  factorisation and ``torch.cholesky_inverse`` (``K + eta I`` is symmetric positive definite,
  so no pivoting; half the LU's arithmetic), both float64; the difference is the largest
  entry of ``|A - B|`` over the largest of ``|A|``, against float32's rounding (6e-8), the
  precision the result is used at;
* the median: today's :func:`repens.models.kernels.median_bandwidth` on the GPU path (a
  median, and a ``nanmedian`` of the positive entries for the zero-median fallback: two
  selections; a CPU takes the second only when a median is zero) against one sort and two
  gathers that pick the same entries; the difference must be zero (the same element is
  chosen), on the timed inputs and on sets whose median is zero.

On a GPU each variant is timed replayed from a CUDA graph of ``--calls`` calls (the way the
step runs it) and eagerly; on a CPU eagerly only (a smoke test of the same code).

    python benchmarks/bench_solve_median.py [--device cuda] [--calls 50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from repens.models.kernels import _MIN_BANDWIDTH, median_bandwidth, squared_distances  # noqa: E402
from repens.models.scores import ridge_inverse  # noqa: E402

ETA = 0.01  # the estimators' ridge (the authors' code)


def lu_inverse(gram: torch.Tensor) -> torch.Tensor:
    """Today's: ``(K + eta I)^-1`` by LU in float64 (:func:`repens.models.scores.ridge_inverse`)."""
    return ridge_inverse(gram, ETA)


def cholesky_inverse(gram: torch.Tensor) -> torch.Tensor:
    """The candidate: the same inverse from a Cholesky factor, in float64."""
    eye = torch.eye(gram.shape[-1], dtype=torch.float64, device=gram.device)
    factor = torch.linalg.cholesky_ex(gram.double() + ETA * eye).L
    return torch.cholesky_inverse(factor)


def sorted_median_bandwidth(sq_dists: torch.Tensor, n: int) -> torch.Tensor:
    """The candidate: :func:`median_bandwidth`'s numbers from one sort. Its lower median is the
    entry at ``(N - 1) // 2`` of the sorted N; the median of the ``P`` positive entries, which
    sort after the ``N - P`` others, is at ``N - P + (P - 1) // 2``."""
    flat = sq_dists.detach().flatten(-2)
    ordered = flat.sort(-1).values
    size = flat.shape[-1]
    med = ordered[..., (size - 1) // 2]
    positives = (flat > 0).sum(-1, keepdim=True)
    at = (size - positives + (positives - 1).clamp_min(0) // 2).clamp_max(size - 1)
    positive = ordered.gather(-1, at).squeeze(-1)
    fallback = torch.where(positives.squeeze(-1) > 0, positive, torch.full_like(positive, math.log(n + 1)))
    med = torch.where(med > 0, med, fallback)
    return (med / math.log(n + 1)).clamp_min(_MIN_BANDWIDTH)[..., None, None]


def inputs(sets: int, n: int, d: int, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Squared distances and the RBF Gram matrix (median bandwidth) of ``sets`` sets of ``n``
    random points in ``d`` dimensions (a function-space rule's outputs: d = 256 x 10)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sets, n, d, generator=g).to(device)
    sq = squared_distances(x, x)
    gram = torch.exp(-sq / median_bandwidth(sq, n))
    return sq, gram


def per_call_us(fn: Callable[[], object], calls: int, rounds: int, device: str, graph: bool) -> float:
    """Median over ``rounds`` of the time of ``calls`` calls, per call (microseconds)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            for _ in range(calls):
                fn()
        run = captured.replay
    else:

        def run() -> None:
            for _ in range(calls):
                fn()

    run()
    times = []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        run()
        sync()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--particles", type=int, default=50)
    p.add_argument("--dims", type=int, default=2560)
    args = p.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    torch.backends.cuda.matmul.allow_tf32 = False
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    print(
        f"device: {name}, torch {torch.__version__}; n = {args.particles}, d = {args.dims}; {args.calls} calls a round"
    )
    modes = ["graph", "eager"] if device == "cuda" else ["eager"]
    n = args.particles
    # the zero-median fallback: coincident particles (more than half the pairs), all coincident
    zeros = torch.zeros(3, n, n, device=device)
    zeros[0, :4, :4] = torch.rand(4, 4, generator=torch.Generator().manual_seed(1)).to(device) + 1
    zeros[1, : n // 2, : n // 2] = 2.0
    zeros[1].fill_diagonal_(0)
    same = bool(torch.equal(median_bandwidth(zeros, n), sorted_median_bandwidth(zeros, n)))
    print(f"median, zero-median sets (few, half, no positive distances): the candidate's bandwidths equal: {same}")
    for sets in (1, 5):
        sq, gram = inputs(sets, n, args.dims, device)
        if sets == 1:
            sq, gram = sq[0], gram[0]
        pairs = {
            "inverse": (partial(lu_inverse, gram), partial(cholesky_inverse, gram), "LU", "Cholesky"),
            "median": (
                partial(median_bandwidth, sq, n),
                partial(sorted_median_bandwidth, sq, n),
                "selections",
                "1 sort",
            ),
        }
        for what, (today, candidate, today_name, candidate_name) in pairs.items():
            a, b = today(), candidate()
            if what == "inverse":
                gap = float((a - b).abs().max() / a.abs().max())
                detail = f"relative difference {gap:.2e} (float32's rounding 6.0e-08)"
            else:
                detail = f"{int((a != b).sum())} of {a.numel()} bandwidths differ"
            for mode in modes:
                t_today = per_call_us(today, args.calls, args.rounds, device, mode == "graph")
                t_cand = per_call_us(candidate, args.calls, args.rounds, device, mode == "graph")
                print(
                    f"{what:8s} sets={sets} {mode:5s}: {today_name} {t_today:8.1f} us, {candidate_name} "
                    f"{t_cand:8.1f} us, ratio {t_today / t_cand:5.2f}x; {detail}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
