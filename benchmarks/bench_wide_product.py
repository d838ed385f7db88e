"""A small matrix times a wide one on the CPU: whole, and in blocks of columns.

The particles' repulsion in weight space is an (n, n) @ (n, d) product with n = 50 particles
and d = 99,710 weights (FashionMNIST's MLP): the KDE/SGE/SSGE gradient sums
(``repens.models.kernels.kernel_grad_sum``), SGE's and SSGE's weights times them, SVGD's
kernel times the pushed scores. This prints, for each block width, the milliseconds of one
product (median of ``--repeat``), its GFLOP/s, and whether its bits equal the whole
product's; then the fp32 GEMM rate of one large square product for scale.

    python benchmarks/bench_wide_product.py --threads 1
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_denormals import _median_ms  # noqa: E402


def blocked(a: torch.Tensor, b: torch.Tensor, width: int) -> torch.Tensor:
    out = a.new_empty(a.shape[0], b.shape[1])
    for start in range(0, b.shape[1], width):
        torch.mm(a, b[:, start : start + width], out=out[:, start : start + width])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--d", type=int, default=99_710)
    p.add_argument("--widths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(args.n, args.n, generator=g), torch.randn(args.n, args.d, generator=g)
    flop = 2 * args.n * args.n * args.d
    whole = a @ b
    print(
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s); "
        f"({args.n}, {args.n}) @ ({args.n}, {args.d}), {flop / 1e9:.2f} GFLOP"
    )
    seconds = _median_ms(lambda: a @ b, args.repeat) / 1e3
    print(f"whole        {seconds * 1e3:7.2f} ms  {flop / seconds / 1e9:6.1f} GFLOP/s")
    for width in args.widths:
        same = torch.equal(blocked(a, b, width), whole)
        seconds = _median_ms(lambda width=width: blocked(a, b, width), args.repeat) / 1e3
        print(
            f"blocks {width:5d} {seconds * 1e3:7.2f} ms  {flop / seconds / 1e9:6.1f} GFLOP/s  "
            f"bits {'equal' if same else 'DIFFER'}"
        )
    square = torch.randn(1024, 1024, generator=g)
    seconds = _median_ms(lambda: square @ square, 5) / 1e3
    print(f"fp32 GEMM 1024^3: {2 * 1024**3 / seconds / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
