"""Benchmark of one training step of every Table 1 method (a script, not a test).

For the paper's FashionMNIST config (MLP 3 x 100, 50 particles, batch 256) and its
CIFAR-10 config (ResNet32, 20 particles, batch 128) it measures, per method:

* steps/s and peak memory of the batched step (all particles through
  ``torch.func.vmap`` + ``functional_call``, as training runs it);
* the same update with the network evaluated member by member in a Python loop
  (same rule, same kernel, same optimizer step);

and prints the ratios batched/loop and method/DE, all from one run, with the device's name,
its fp32 GEMM rate measured in the same run, and the MLP DE step's share of it. Timing is
round-robin over every (method, mode) in one process, ``--rounds`` times, and the
median is kept, so load that drifts on a shared machine hits all of them alike.
Peak memory comes from a separate pass with each (method, mode) alone in a fresh
subprocess: peak resident memory (CPU) or ``torch.cuda.max_memory_allocated`` (GPU).

    python benchmarks/bench_image.py                    # both configs, CPU or GPU (auto)
    python benchmarks/bench_image.py --configs fashionmnist --steps 20 --threads 2
    python benchmarks/bench_image.py --json out.json    # also save the figures
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine  # noqa: E402  (its FLOP count and GEMM rate; it imports no torch at load)

CONFIGS = {
    "fashionmnist": {
        "model": "mlp",
        "hidden": [100, 100, 100],
        "shape": (1, 28, 28),
        "particles": 50,
        "batch_size": 256,
        "prior_std": 1.0,
        "init": "prior",
    },
    "cifar10": {
        "model": "resnet",
        "depth": 32,
        "width": 16,
        "norm": "group",
        "shape": (3, 32, 32),
        "particles": 20,
        "batch_size": 128,
        "prior_std": 0.1**0.5,
        "init": "he",
    },
}
METHODS = [
    "de",
    "svgd",
    "fsvgd",
    "kde-wgd",
    "sge-wgd",
    "ssge-wgd",
    "kde-fwgd",
    "sge-fwgd",
    "ssge-fwgd",
    "anchored",
    "dle",
    "drle",
]


def build_step(config_name: str, method: str, mode: str, device: str):
    """One training step of ``method`` (batched or per-member loop) as a closure, and the device."""
    import torch
    import yaml
    from torch.func import functional_call

    from repens.experiments.image import resolve_device
    from repens.methods.rule import build
    from repens.models.networks import build_model
    from repens.models.particles import StackedModel
    from repens.models.posteriors import Batch, NetworkPosterior
    from repens.pipeline.config import method_options
    from repens.training.fitting import kernel_from_job

    class LoopedModel(StackedModel):
        """The same network evaluated one member at a time (the baseline)."""

        def forward(self, params, x):
            return torch.stack(
                [functional_call(self.module, {**self.unflatten(r), **self.buffers}, (x,)) for r in params]
            )

        __call__ = forward

    cfg = dict(CONFIGS[config_name])
    shape = tuple(cfg.pop("shape"))
    entry = yaml.safe_load((ROOT / "config.yaml").read_text())["methods"][method]
    job = {**cfg, **entry, "bandwidth": "median"}
    dev = resolve_device(device)
    net = build_model(job, shape, 10).to(dev)
    model = (StackedModel if mode == "batched" else LoopedModel)(net)
    g = torch.Generator().manual_seed(0)
    n = job["particles"]
    posterior = NetworkPosterior(model, "categorical", num_train=50000, prior_std=job["prior_std"])
    params = (model.sample_he(n, g) if job["init"] == "he" else model.sample_gaussian(n, job["prior_std"], g)).to(dev)
    rule = build(
        entry["rule"], entry.get("space", "weight"), posterior, kernel=kernel_from_job(job), lr=1e-3,
        **method_options(job),
    )  # fmt: skip
    state = rule.init(params, g)
    x = torch.rand(job["batch_size"], *shape, generator=g).to(dev)
    y = torch.randint(10, (job["batch_size"],), generator=g).to(dev)
    batch = Batch(x, y)

    def step():  # as train(): the rule's update (its direction, the optimizer's step, its noise)
        rule.update(state, batch)

    return step, dev, model.dim


def _sync(dev) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize()


def measure(config_name: str, method: str, mode: str, steps: int, warmup: int, device: str) -> dict:
    """Peak memory (and a first timing) of ``steps`` steps; runs alone in a child process."""
    import torch

    step, dev, dim = build_step(config_name, method, mode, device)
    for _ in range(warmup):
        step()
    _sync(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(dev)
    seconds = (time.perf_counter() - t0) / steps
    if dev.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "config": config_name,
        "method": method,
        "mode": mode,
        "seconds_per_step": seconds,
        "steps_per_s": 1.0 / seconds,
        "peak_mb": peak_mb,
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "parameters": dim,
        "particles": CONFIGS[config_name]["particles"],
        "batch_size": CONFIGS[config_name]["batch_size"],
    }


def interleaved_times(
    config_name: str, methods: list[str], modes: tuple[str, ...], steps: int, rounds: int, device: str
) -> dict[tuple[str, str], float]:
    """Median seconds per step of every (method, mode), measured round-robin in one
    process (``rounds`` rounds of ``steps`` steps each), so a machine whose load drifts
    affects all of them alike and the ratios stay fair."""
    import statistics

    setups = {(m, mode): build_step(config_name, m, mode, device) for m in methods for mode in modes}
    for step, dev, _ in setups.values():
        step()
        _sync(dev)
    samples: dict[tuple[str, str], list[float]] = {k: [] for k in setups}
    for _ in range(rounds):
        for key, (step, dev, _) in setups.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            _sync(dev)
            samples[key].append((time.perf_counter() - t0) / steps)
    return {k: statistics.median(v) for k, v in samples.items()}


def mlp_de_step_flops(config_name: str) -> float | None:
    """FLOPs of an MLP config's DE step (bench_engine's count: forward, weight gradients, input
    gradients below the first layer); None for the ResNet."""
    config = CONFIGS[config_name]
    if config["model"] != "mlp":
        return None
    return bench_engine.mlp_de_flops(
        {
            "inputs": math.prod(config["shape"]),
            "hidden": config["hidden"],
            "outputs": 10,
            "particles": config["particles"],
            "batch": config["batch_size"],
        }
    )


def _child(args) -> int:
    import torch

    torch.set_num_threads(args.threads)
    print(json.dumps(measure(args.config, args.method, args.mode, args.steps, args.warmup, args.device)))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="fashionmnist,cifar10")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default: 20 MLP, 3 ResNet on CPU)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="round-robin timing rounds (median taken)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--no-loop", action="store_true", help="skip the per-member loop baseline")
    parser.add_argument("--json", help="also write every measurement to this file")
    parser.add_argument("--child", nargs=3, metavar=("CONFIG", "METHOD", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.config, args.method, args.mode = args.child
        return _child(args)

    import torch

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    rows = []
    modes = ("batched",) + (() if args.no_loop else ("loop",))
    for config in args.configs.split(","):
        steps = args.steps or (20 if config == "fashionmnist" or cuda else 3)
        print(f"{config}: peak memory, each (method, mode) alone in a subprocess", flush=True)
        for method in args.methods.split(","):
            for mode in modes:
                cmd = [
                    sys.executable,
                    __file__,
                    "--child",
                    config,
                    method,
                    mode,
                    "--steps",
                    "1",
                    "--warmup",
                    str(args.warmup),
                    "--threads",
                    str(args.threads),
                    "--device",
                    args.device,
                ]
                out = subprocess.run(cmd, capture_output=True, text=True)
                if out.returncode:
                    print(out.stderr, file=sys.stderr)
                    return out.returncode
                row = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(f"  {method:10s} {mode:8s} {row['peak_mb']:9.0f} MB peak", flush=True)
        torch.set_num_threads(args.threads)
        print(f"{config}: timing, {args.rounds} rounds x {steps} steps, round-robin in one process", flush=True)
        times = interleaved_times(config, args.methods.split(","), modes, steps, args.rounds, args.device)
        for row in rows:
            if row["config"] == config:
                row["seconds_per_step"] = times[(row["method"], row["mode"])]
                row["steps_per_s"] = 1.0 / row["seconds_per_step"]
    print()
    from repens.experiments.image import resolve_device

    rate = bench_engine.gemm_rate(torch.get_num_threads(), resolve_device(args.device))
    print(
        f"device: {rows[0]['device_name']}, torch threads: {rows[0]['threads']}; "
        f"fp32 GEMM (TF32 off): {rate:,.0f} GFLOP/s, measured in this run"
    )
    header = f"{'config':13s} {'method':10s} {'steps/s':>9s} {'peak MB':>8s} {'x DE time':>10s}"
    header += "" if args.no_loop else f" {'loop st/s':>10s} {'batched/loop':>13s}"
    print(header)
    for config in args.configs.split(","):
        by = {(r["method"], r["mode"]): r for r in rows if r["config"] == config}
        de = by.get(("de", "batched"))
        for method in args.methods.split(","):
            b = by[(method, "batched")]
            line = f"{config:13s} {method:10s} {b['steps_per_s']:9.2f} {b['peak_mb']:8.0f}"
            line += f" {b['seconds_per_step'] / de['seconds_per_step']:10.2f}" if de else f" {'':>10s}"
            if not args.no_loop:
                lp = by[(method, "loop")]
                line += f" {lp['steps_per_s']:10.2f} {lp['seconds_per_step'] / b['seconds_per_step']:13.2f}"
            print(line)
        flops = mlp_de_step_flops(config)
        if flops and ("de", "batched") in by:
            share = flops / by[("de", "batched")]["seconds_per_step"] / 1e9 / rate
            print(f"{config:13s} DE step: {flops / 1e9:.2f} GFLOP, {share:.1%} of the measured GEMM rate")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
