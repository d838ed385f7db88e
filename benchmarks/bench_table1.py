"""Table 1's FashionMNIST step: seed-steps/s, achieved TFLOP/s and the share of the device's
fp32 limit, per method and for the block (a script, not a test).

For each method it times the real training loop (``repens.training.train.train``; on a GPU
every step replayed from a CUDA graph where the rule allows) at the paper's sizes (MLP
784-100-100-100-10, 50 particles, batch 256), ``--sets`` seeds stacked as one job, as the
marginal step between a short and a long run (``bench_gpu_step.time_train``). FLOPs per step
come from ``torch.utils.flop_counter`` on the CPU (``estimate_gpu_block.count_step``: the
matmuls, all but a few percent of the work). It prints, per method, steps/s, seed-steps/s,
TFLOP/s, and that rate as a share of the fp32 GEMM rate measured in the same run and of
``--peak`` (the device's nominal fp32 peak); then the block: 5 seeds x 50,000 steps of every
method listed (hyper-DE and the DE variants priced as DE; hyper-DE's search left out), its
seed-steps/s and minutes at these rates, one job at a time.

``--paths old new`` times the image network as the pipeline built it before (``Flatten`` then
the MLP, under ``vmap``) and as it builds it now (the MLP path, inputs flattened first), in
one run, alternating, and prints their ratio. ``--tf32`` allows TF32 matmuls and cuDNN
convolutions (a job's ``matmul_precision: high``); without it both run in fp32 (``highest``).
Torch's own default runs convolutions in TF32, so a ResNet timed without ``--tf32`` here is
slower than a CIFAR job with ``matmul_precision`` unset. ``--profile METHOD`` prints the top kernels of a few
replayed steps of one method (torch.profiler), by device time.

    python benchmarks/bench_table1.py --device cpu --threads 1 --paths old new --methods de kde-fwgd
    python benchmarks/bench_table1.py --device cuda --sets 5 --peak 67
    python benchmarks/bench_table1.py --device cuda --sets 5 --steps 50 --rounds 1 --side-by-side
    python benchmarks/bench_table1.py --device cuda --profile ssge-fwgd
    python benchmarks/bench_table1.py --device cuda --config resnet32 --methods de kde-fwgd --steps 20

``--side-by-side`` also times the methods listed all at once in one process, a thread and a
CUDA stream each (as ``train-stack --stacks`` and ``run-jobs --side-by-side`` train them), and
prints their seed-steps/s together, the ratio to the same steps one stack at a time, and the
block's minutes at that rate.

``--config resnet32`` times CIFAR-10's ResNet32 step instead (20 particles, batch 128, inputs
of CIFAR's shape; the data are not on the GPU machines) and prices CIFAR's block.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine  # noqa: E402
import bench_gpu_step  # noqa: E402
import bench_image  # noqa: E402
import estimate_gpu_block  # noqa: E402

#: the block's runs per method: 5 seeds x 50,000 steps; DE priced for de, hyper-de and the two
#: DE variants (wgd-lr, code-protocol's de)
SEEDS, STEPS = 5, 50_000
#: the image job's methods, as bench_image times them (hyper-DE: a DE step)
MIX = bench_image.METHODS
RUNS_PER_METHOD = {m: SEEDS for m in MIX} | {"de": 4 * SEEDS}


@contextlib.contextmanager
def image_path(path: str):
    """``old``: the network as the pipeline built it before, ``Sequential(Flatten(), mlp)`` with
    no ``input_shape`` (so under ``vmap``); ``new``: the bare MLP path the image job takes now."""
    import torch

    import repens.models.networks as models

    bare = models.mlp
    if path == "old":
        models.mlp = lambda *a, **k: torch.nn.Sequential(torch.nn.Flatten(), bare(*a, **k))
    try:
        yield
    finally:
        models.mlp = bare


#: the networks timed: FashionMNIST's MLP, CIFAR-10's ResNet32 (inputs of CIFAR's shape, random:
#: the data are not needed for a step's cost), each with its paper block's methods
CONFIGS = {
    "fashionmnist": {**bench_engine.CONFIGS["fashionmnist"], "rows": 4096},
    "resnet32": {**bench_engine.CONFIGS["resnet32"], "rows": 512},
}
#: CIFAR-10's block: the paper's ten methods x 5 seeds (hyper-DE priced as DE)
CIFAR_RUNS = {m: SEEDS for m in MIX[:9]} | {"de": 2 * SEEDS}


def time_method(method: str, sets: int, steps: int, device: str, path: str, config: str = "fashionmnist"):
    with image_path(path):
        seconds, _, replayed = bench_gpu_step.time_train(CONFIGS[config], method, sets, steps, device == "cuda", device)
    return seconds, replayed


def count_flops(config: str, method: str, sets: int, device: str) -> float:
    """FLOPs of one step on ``device`` (``torch.utils.flop_counter``): a 2-step run minus a
    1-step run, eagerly (FashionMNIST: ``estimate_gpu_block.count_step`` on the CPU)."""
    if config == "fashionmnist":
        return estimate_gpu_block.count_step(method, sets, 50, model="mlp")[0]
    from torch.utils.flop_counter import FlopCounterMode

    from repens.training.train import TrainSettings

    totals = []
    for steps in (1, 2):
        problem = bench_engine._setup(CONFIGS[config], method, sets, device)
        settings = TrainSettings(steps=steps, lr=1e-4, log_every=10**9, cuda_graphs=False)
        with FlopCounterMode(display=False) as flops:
            problem.train(settings)
        totals.append(flops.get_total_flops())
    return totals[1] - totals[0]


def time_side_by_side(methods: list[str], sets: int, steps: int, device: str) -> float:
    """Seconds per round of steps with every method of ``methods`` (``sets`` seeds stacked each)
    training at once in this process, a thread and a CUDA stream each, as
    ``train-stack --stacks`` trains them (:func:`repens.experiments.streams.own_stream`, each
    thread in a shared turn, :mod:`repens.training.turns`): the marginal round,
    ``(T(10 + steps) - T(10)) / steps`` with all threads started together."""
    import threading
    import time

    import torch

    from repens.experiments.streams import own_stream
    from repens.training.train import TrainSettings
    from repens.training.turns import GPU_TURNS

    dev = torch.device(device)
    setups = [bench_engine._setup(CONFIGS["fashionmnist"], method, sets, device) for method in methods]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def run_all(steps_each: int) -> float:
        def one(k: int) -> None:
            settings = TrainSettings(steps=steps_each, lr=1e-4, log_every=10**9, nonfinite_check_every=50)
            with GPU_TURNS.shared(), own_stream(dev):
                setups[k].train(settings)
                sync()

        threads = [threading.Thread(target=one, args=(k,)) for k in range(len(setups))]
        sync()
        t0 = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        sync()
        return time.perf_counter() - t0

    run_all(10)  # the device's first-use costs, every method's
    short, long = run_all(10), run_all(10 + steps)
    return (long - short) / steps


def profile(method: str, sets: int, device: str, top: int = 15) -> None:
    """The top kernels of 20 replayed steps by device time (torch.profiler), FashionMNIST's MLP."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from repens.training.train import TrainSettings

    problem = bench_engine._setup(CONFIGS["fashionmnist"], method, sets, device)
    settings = TrainSettings(steps=10, lr=1e-4, log_every=10**9, nonfinite_check_every=50)
    problem.train(settings)  # first use
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    long = TrainSettings(**{**settings.__dict__, "steps": 30})
    with torch_profile(activities=activities) as prof:
        problem.train(long)
        if device == "cuda":
            torch.cuda.synchronize()
    sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    print(f"profile of {method} ({sets} set(s)), 30 steps (the first 10 eager, then replays):")
    print(prof.key_averages().table(sort_by=sort, row_limit=top, max_name_column_width=60))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="fashionmnist", choices=sorted(CONFIGS), help="the network and its block")
    p.add_argument("--methods", nargs="+", choices=MIX, help="default: the block's methods")
    p.add_argument("--device", default="auto", help="cuda, cpu or auto")
    p.add_argument("--threads", type=int, help="CPU threads (default: torch's)")
    p.add_argument("--sets", type=int, default=1, help="seeds stacked as one job")
    p.add_argument("--steps", type=int, help="timed steps (default: 200 on a GPU, 5 on a CPU)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--paths", nargs="+", default=["new"], choices=["old", "new"])
    p.add_argument(
        "--peak", type=float, default=67.0, help="the device's nominal fp32 peak, TFLOP/s (H100/H200 SXM: 67)"
    )
    p.add_argument("--tf32", action="store_true", help="allow TF32 matmuls and convolutions (default: both fp32)")
    p.add_argument("--no-flops", action="store_true", help="skip the FLOP count (CPU seconds per method)")
    p.add_argument("--profile", choices=MIX, help="profile this method instead")
    p.add_argument(
        "--side-by-side",
        action="store_true",
        help="also time the methods listed all at once in this process, a thread and a CUDA stream "
        "each (train-stack --stacks, run-jobs --side-by-side), and price the block at that rate",
    )
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    from repens.experiments.image import set_matmul_precision

    set_matmul_precision("high" if args.tf32 else "highest")
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    if args.profile:
        profile(args.profile, args.sets, device)
        return
    rate = bench_engine.gemm_rate(torch.get_num_threads(), device) / 1e3  # TFLOP/s (it restores the TF32 flag)
    print(
        f"device: {name}, torch {torch.__version__}, {torch.get_num_threads()} thread(s), TF32 "
        f"{'on' if args.tf32 else 'off'} (matmuls and convolutions); "
        f"fp32 GEMM (TF32 off) {rate:.1f} TFLOP/s measured in this run; "
        f"{args.sets} seed(s) stacked",
        flush=True,
    )
    runs_per_method = RUNS_PER_METHOD if args.config == "fashionmnist" else CIFAR_RUNS
    methods = args.methods or list(runs_per_method)
    if args.config != "fashionmnist" and args.paths != ["new"]:
        p.error("--paths old: the image MLP's earlier path; the ResNet has one")
    steps = args.steps or ((200 if args.config == "fashionmnist" else 20) if device == "cuda" else 2)
    rows = []
    for method in methods:
        flops = None if args.no_flops else count_flops(args.config, method, args.sets, device)
        times: dict[str, list[float]] = {path: [] for path in args.paths}
        replayed = True
        for _ in range(args.rounds):
            for path in args.paths:
                seconds, used = time_method(method, args.sets, steps, device, path, args.config)
                times[path].append(seconds)
                replayed &= used or device != "cuda"
        row = {"method": method, "sets": args.sets, "flops": flops, "replayed": replayed}
        parts = []
        for path in args.paths:
            sec = statistics.median(times[path])
            row[f"{path}_s"] = sec
            text = f"{path}: {1 / sec:8.1f} steps/s {args.sets / sec:8.1f} seed-steps/s"
            if flops:
                tflops = flops / sec / 1e12
                text += f" {tflops:6.2f} TFLOP/s ({tflops / rate:5.1%} of GEMM, {tflops / args.peak:5.1%} of peak)"
            parts.append(text)
        if len(args.paths) == 2:
            parts.append(f"old/new {row['old_s'] / row['new_s']:.2f}x")
        print(f"{method:10s} " + " | ".join(parts) + ("" if replayed else "  (eager: not captured)"), flush=True)
        rows.append(row)
    if "new" in args.paths and set(methods) == set(runs_per_method):
        seed_steps = sum(runs_per_method[r["method"]] * STEPS for r in rows)
        seconds = sum(runs_per_method[r["method"]] * STEPS * r["new_s"] / args.sets for r in rows)
        rate_text = f"{seed_steps / seconds:,.0f} seed-steps/s"
        line = f"block: {seed_steps:,} seed-steps in {seconds / 60:.1f} min one job at a time, {rate_text}"
        if not args.no_flops:
            total = sum(runs_per_method[r["method"]] * STEPS * r["flops"] / args.sets for r in rows)
            line += f", {total / seconds / 1e12:.2f} TFLOP/s ({total / seconds / 1e12 / args.peak:.1%} of peak)"
        print(line)
    together = None
    if args.side_by_side and "new" in args.paths:
        seconds = statistics.median(time_side_by_side(methods, args.sets, steps, device) for _ in range(args.rounds))
        alone = sum(r["new_s"] for r in rows)
        seed_steps = len(methods) * args.sets / seconds
        line = (
            f"side by side: {len(methods)} stacks of {args.sets} seed(s) in one process, a thread and a stream "
            f"each: {seed_steps:,.0f} seed-steps/s, {alone / seconds:.2f}x the same steps one stack at a time"
        )
        if not args.no_flops:
            tflops = sum(r["flops"] for r in rows) / seconds / 1e12
            line += f", {tflops:.2f} TFLOP/s ({tflops / rate:.1%} of GEMM, {tflops / args.peak:.1%} of peak)"
        if set(methods) == set(runs_per_method):
            block = sum(runs_per_method[m] * STEPS for m in methods)
            line += f"; the block ({block:,} seed-steps) in {block / seed_steps / 60:.1f} min at this rate"
        print(line, flush=True)
        together = {"seconds": seconds, "seed_steps_per_s": seed_steps, "speedup": alone / seconds}
    if args.json:
        Path(args.json).write_text(
            json.dumps({"device": name, "gemm_tflops": rate, "rows": rows, "side_by_side": together}, indent=1)
        )


if __name__ == "__main__":
    main()
