"""Accuracy and cost of the particle distances (a script, not a test).

For float32 particles of dimension ``--dim`` (default 1e5, the FashionMNIST MLP has
99,710 weights) it prints, against a float64 difference-based reference:

* the relative error of ``squared_distances`` for a near-coincident pair at
  separations 1e-1 ... 1e-7 of the particles' norm, next to the plain one-GEMM
  formula ``|a|^2 + |b|^2 - 2 a.b`` on uncentred particles (what the code did
  before), for particles spread around a common centre (a collapsing ensemble);
* the repulsion ``kernel_grad_sum`` of a set of identical particles (exactly 0 is
  what the maths gives);
* the time of one (n, n) distance matrix, n = ``--particles``, both ways, measured
  round-robin in one process (median of ``--rounds``).

    python benchmarks/bench_distances.py
    python benchmarks/bench_distances.py --dim 1000 --particles 20 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from repens.models.kernels import RBF, kernel_grad_sum, squared_distances  # noqa: E402


def plain_gemm(x: torch.Tensor) -> torch.Tensor:
    """The uncentred one-GEMM formula (the previous implementation)."""
    x2 = torch.linalg.vector_norm(x, dim=-1).pow(2).unsqueeze(-1)
    return torch.addmm(x2 + x2.T, x, x.T, alpha=-2.0).clamp_min(0.0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=int, default=100_000)
    p.add_argument("--particles", type=int, default=50)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    d, n = args.dim, args.particles

    centre = torch.randn(1, d, generator=g, dtype=torch.float64)  # norm ~ sqrt(d)
    print(f"near-coincident pair in float32, d={d}, |x| = {centre.norm():.4g}; relative error of |a-b|^2")
    print(f"{'separation/|x|':>15} {'plain GEMM':>12} {'repens':>12}")
    for sep in (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-7):
        spread = torch.randn(n, d, generator=g, dtype=torch.float64) * (sep * centre.norm() / d**0.5)
        x64 = (centre + spread).float().double()  # the float32 particles, exactly, in float64
        exact = torch.cdist(x64, x64, compute_mode="donot_use_mm_for_euclid_dist").pow(2)
        off = ~torch.eye(n, dtype=torch.bool)
        x32 = x64.float()
        errs = []
        for fn in (plain_gemm, lambda t: squared_distances(t, t)):
            got = fn(x32).double()
            errs.append(float(((got - exact).abs() / exact)[off].max()))
        print(f"{sep:>15.0e} {errs[0]:>12.3e} {errs[1]:>12.3e}")

    same = centre.float().repeat(n, 1)
    gram, h = RBF().self_gram(same)
    rep = kernel_grad_sum(same, same, gram, h)
    print(f"identical particles (n={n}): max |repulsion| = {float(rep.abs().max())!r}, h = {float(h)!r}")

    x = torch.randn(n, d, generator=g)
    times: dict[str, list[float]] = {"plain GEMM": [], "repens": []}
    fns = {"plain GEMM": plain_gemm, "repens": lambda t: squared_distances(t, t)}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn(x)
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["plain GEMM"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"time of one ({n}, {n}) matrix, d={d}, {args.threads} thread(s): {name:>10} {med * 1e3:8.2f} ms"
            f"  ({med / base:.2f}x plain)"
        )


if __name__ == "__main__":
    main()
