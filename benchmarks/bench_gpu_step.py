"""The training step on a GPU, eager against replayed from a CUDA graph (a script, not a test).

For each configuration of ``bench_engine.py`` (UCI with its splits stacked, the toy, the
FashionMNIST MLP, the ResNet32) and each method it times ``repens.training.train.train`` on the
device, everything on it (data, particles, the run's generator), twice: with the step
eager (``TrainSettings(cuda_graphs=False)``) and replayed from a captured graph
(:mod:`repens.training.step_graph`; only for the rules that declare themselves graph-safe). Both
check finiteness every 50 steps, the GPU default. It prints the device, its fp32 GEMM rate
(TF32 off) measured in the run, steps/s of both and their ratio, the peak GPU memory, and
the DE step's FLOPs as a share of the GEMM rate (MLPs). Timing alternates eager and graph
over ``--rounds`` rounds; medians. On a CPU the graph column is absent (no backend) and the
script is a smoke test of the same code.

    python benchmarks/bench_gpu_step.py                       # uci toy fashionmnist, every method
    python benchmarks/bench_gpu_step.py --configs resnet32 --methods de svgd kde-fwgd --steps 20
    python benchmarks/bench_gpu_step.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine  # noqa: E402

STEPS = {"uci": 500, "protein": 50, "toy": 500, "fashionmnist": 100, "resnet32": 10}


def time_train(config: dict, method: str, sets: int, steps: int, graphs: bool, device: str) -> tuple[float, int, bool]:
    """Seconds a step of the real loop on ``device``: the marginal step, ``(T(10 + steps) -
    T(10)) / steps`` between two runs after a first one (each run of ``train`` makes its own
    graphs: the difference cancels its eager warm-up steps and its captures), its peak device
    memory, and whether the step was replayed from a graph (a graph-safe rule whose capture
    neither failed nor replayed anything but the eager step: ``repens.training.step_graph`` warns when
    it falls back to eager steps)."""
    import torch

    from repens.training.train import TrainSettings

    fallbacks = _Fallbacks()
    logging.getLogger("repens.step_graph").addHandler(fallbacks)

    problem = bench_engine._setup(config, method, sets, device)
    cuda = torch.device(device).type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    settings = TrainSettings(steps=steps, lr=1e-4, log_every=10**9, nonfinite_check_every=50, cuda_graphs=graphs)
    short = TrainSettings(**{**settings.__dict__, "steps": 10})
    problem.train(short)  # the device's first-use costs
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    elapsed = []
    for run in (short, TrainSettings(**{**settings.__dict__, "steps": 10 + steps})):
        sync()
        t0 = time.perf_counter()
        problem.train(run)
        sync()
        elapsed.append(time.perf_counter() - t0)
    seconds = (elapsed[1] - elapsed[0]) / steps
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    logging.getLogger("repens.step_graph").removeHandler(fallbacks)
    replayed = cuda and graphs and problem.graph_safe(settings) and not fallbacks.messages
    return seconds, peak, replayed


class _Fallbacks(logging.Handler):
    """Collects the step-graph module's warnings (each says why the step went on eagerly)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", default=["uci", "toy", "fashionmnist"], choices=sorted(bench_engine.CONFIGS))
    p.add_argument("--methods", nargs="+", default=list(bench_engine.METHODS), choices=list(bench_engine.METHODS))
    p.add_argument("--device", default="auto", help="cuda, cpu or auto")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, help="timed steps per method (default: each configuration's own)")
    p.add_argument("--splits", type=int, default=20, help="UCI splits stacked")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()

    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    rate = bench_engine.gemm_rate(torch.get_num_threads(), device)
    print(f"device: {name}, torch {torch.__version__}; fp32 GEMM (TF32 off) {rate:,.0f} GFLOP/s measured in this run")
    rows = []
    for config_name in args.configs:
        config = bench_engine.CONFIGS[config_name]
        sets = config.get("splits", args.splits) if config.get("epochs") else 1
        steps = args.steps or STEPS[config_name]
        for method in args.methods:
            times: dict[bool, list[float]] = {False: [], True: []}
            peaks: dict[bool, int] = {}
            replayed = device == "cuda"  # every graph-mode round replayed its step
            modes = [False, True] if device == "cuda" else [False]
            for _ in range(args.rounds):
                for graphs in modes:
                    seconds, peak, used = time_train(config, method, sets, steps, graphs, device)
                    times[graphs].append(seconds)
                    peaks[graphs] = max(peaks.get(graphs, 0), peak)
                    if graphs:
                        replayed &= used
            eager = statistics.median(times[False])
            graph = statistics.median(times[True]) if times[True] else None
            row = {
                "config": config_name,
                "method": method,
                "sets": sets,
                "eager_s": eager,
                "graph_s": graph,
                "replayed": replayed,
                "peak_bytes": peaks,
            }
            if method == "de" and not config.get("resnet"):
                flops = bench_engine.mlp_de_flops(config) * sets
                row["de_share_of_gemm"] = flops / min(eager, graph or eager) / 1e9 / rate
            rows.append(row)
            speed = f"{sets / eager:10.1f}" + (f" {sets / graph:10.1f} {eager / graph:5.2f}x" if graph else "")
            note = (
                ""
                if replayed or device != "cuda"
                else "  (graph column eager: a rule not graph-safe, or a capture that fell back; see the warnings)"
            )
            share = f"  DE {row['de_share_of_gemm']:.1%} of GEMM" if "de_share_of_gemm" in row else ""
            print(
                f"{config_name:13s} {method:10s} sets x steps/s eager{'/graph' if device == 'cuda' else ''}: "
                f"{speed}{share}{note}",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"device": name, "gemm_gflops": rate, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
