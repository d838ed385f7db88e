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

``squared_distances`` takes the device's path: on the CPU the GEMM formula with its
recomputation of cancelling pairs; on a GPU (no host round-trip inside a captured step) one
float64 GEMM (``float64_gemm_distances``). With ``--device cuda`` it compares, on the
device, that path with ``cdist`` by differences (n·n·d work outside the GEMM units, the GPU
path before), for the weight-space sets a FashionMNIST step measures (n = 50 particles;
DRLE: 50 particles and 50 prior draws, n = 100). On the CPU it prints the float64 GEMM's
accuracy and cost too.

    python benchmarks/bench_distances.py
    python benchmarks/bench_distances.py --dim 1000 --particles 20 --threads 1
    python benchmarks/bench_distances.py --device cuda --particles 50 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from repens.models.kernels import (  # noqa: E402
    RBF,
    difference_distances,
    float64_gemm_distances,
    kernel_grad_sum,
    squared_distances,
)


def plain_gemm(x: torch.Tensor) -> torch.Tensor:
    """The uncentred one-GEMM formula (the previous implementation)."""
    x2 = torch.linalg.vector_norm(x, dim=-1).pow(2).unsqueeze(-1)
    return torch.addmm(x2 + x2.T, x, x.T, alpha=-2.0).clamp_min(0.0)


#: the distance computations compared, by name
METHODS = {
    "plain GEMM": plain_gemm,
    "squared_distances": lambda t: squared_distances(t, t),
    "cdist differences": lambda t: difference_distances(t, t),
    "float64 GEMM (GPU path)": lambda t: float64_gemm_distances(t, t),
}


def _accuracy(centre: torch.Tensor, n: int, names: list[str], device: str, g: torch.Generator) -> None:
    d = centre.shape[-1]
    print(f"near-coincident float32 particles, d={d}, n={n}, |x| = {centre.norm():.4g}: max relative error of |a-b|^2")
    print(f"{'separation/|x|':>15} " + " ".join(f"{name:>28}" for name in names))
    for sep in (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-7):
        spread = torch.randn(n, d, generator=g, dtype=torch.float64) * (sep * centre.norm() / d**0.5)
        x64 = (centre + spread).float().double()  # the float32 particles, exactly, in float64
        exact = torch.cdist(x64, x64, compute_mode="donot_use_mm_for_euclid_dist").pow(2)
        off = ~torch.eye(n, dtype=torch.bool)
        x32 = x64.float().to(device)
        errs = [float(((METHODS[name](x32).double().cpu() - exact).abs() / exact)[off].max()) for name in names]
        print(f"{sep:>15.0e} " + " ".join(f"{e:>28.3e}" for e in errs))


def _time(fn, x: torch.Tensor, rounds: int) -> float:
    """Median seconds of ``fn(x)`` (the device synchronised around each call)."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    fn(x)  # warm-up (cuBLAS handles, kernels)
    times = []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        fn(x)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=int, default=100_000)
    p.add_argument("--particles", type=int, nargs="+", default=[50])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    d, device = args.dim, args.device
    names = list(METHODS) if device != "cpu" else ["plain GEMM", "squared_distances", "float64 GEMM (GPU path)"]
    if device != "cpu":
        print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")

    centre = torch.randn(1, d, generator=g, dtype=torch.float64)  # norm ~ sqrt(d)
    _accuracy(centre, args.particles[0], names, device, g)

    n = args.particles[0]
    same = centre.float().repeat(n, 1).to(device)
    gram, h = RBF().self_gram(same)
    rep = kernel_grad_sum(same, same, gram, h)
    print(f"identical particles (n={n}): max |repulsion| = {float(rep.abs().max())!r}, h = {float(h)!r}")

    for n in args.particles:
        x = torch.randn(n, d, generator=g).to(device)
        times = {}
        for _ in range(2):  # round-robin twice: the second pass's medians are printed
            times = {name: _time(METHODS[name], x, args.rounds) for name in names}
        base = times[names[0]]
        for name, med in times.items():
            print(
                f"time of one ({n}, {n}) matrix, d={d}, {device}, {args.threads} thread(s): {name:>28} "
                f"{med * 1e3:8.3f} ms  ({med / base:.2f}x {names[0]})"
            )


if __name__ == "__main__":
    main()
