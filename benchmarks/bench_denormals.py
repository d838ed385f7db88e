"""What denormal floats cost a CPU step, and how many a checkpoint holds (a script, not a test).

Prints, in one process with denormals kept and then flushed (``torch.set_flush_denormal``):
the time of an (m, k) x (k, n) GEMM with normal operands and with one operand denormal
(medians of ``--rounds``), and the same with ``--threads`` threads where the flag is set
after the threads exist (then only the calling thread flushes); with ``--checkpoint``, the
share of denormal values in each large tensor of a training checkpoint.

    python benchmarks/bench_denormals.py
    python benchmarks/bench_denormals.py --checkpoint results/image/fashionmnist/hyper-de/seed38/metrics.json.ckpt
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _median_ms(fn, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _tensors(obj, path=""):
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{path}[{i}]")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", type=int, nargs=3, default=[512, 4096, 512], metavar=("M", "K", "N"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--checkpoint", help="a training checkpoint whose denormals to count")
    args = p.parse_args()
    m, k, n = args.shape
    print(f"torch {torch.__version__}; GEMM ({m}, {k}) x ({k}, {n}), medians of {args.rounds}")
    a, normal = torch.randn(m, k), torch.randn(k, n)
    denormal = normal * 1e-39
    for threads in (1, args.threads):
        torch.set_num_threads(threads)
        for flush in (False, True):
            torch.set_flush_denormal(flush)
            print(
                f"{threads} thread(s), denormals {'flushed' if flush else 'kept'}: "
                f"normal operands {_median_ms(lambda: a @ normal, args.rounds):8.1f} ms, "
                f"one denormal operand {_median_ms(lambda: a @ denormal, args.rounds):8.1f} ms"
                + ("  (flag set after the threads started: workers keep denormals)" if threads > 1 and flush else "")
            )
    torch.set_flush_denormal(False)
    if args.checkpoint:
        tiny = torch.finfo(torch.float32).tiny
        state = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
        for path, t in _tensors(state):
            if t.is_floating_point() and t.numel() >= 1000:
                small = t.abs()
                count = int(((small > 0) & (small < tiny)).sum())
                print(f"{args.checkpoint}{path}: {tuple(t.shape)}, {count} denormal ({count / t.numel():.2%})")


if __name__ == "__main__":
    main()
