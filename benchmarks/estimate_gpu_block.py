"""How long the paper-scale FashionMNIST block (Table 1: every method x 5 seeds x 50,000
Adam steps, hyper-DE's search included) should take on one GPU: an estimate from what a
step does, measured here on the CPU, and stated assumptions about the GPU (a script, not
a test; no GPU is needed or used).

Measured, per method, for one training step at the paper's sizes (MLP 784-100-100-100-10,
50 particles, batch 256), on the GPU's code paths (:func:`repens.models.kernels.gpu_paths`):

* FLOPs (``torch.utils.flop_counter.FlopCounterMode``: the matmuls, which are all but a few
  percent of the work) and
* kernels: the aten ops of the step that launch work (a ``TorchDispatchMode`` count, less
  the metadata-only ops: views, reshapes, transposes),

as the difference between a 3-step and a 2-step ``train()`` call (so the loop's one-off
set-up is not counted), for one seed and for ``--sets`` seeds stacked as one job.

Assumed (``--peak``, ``--efficiency``, ``--launch-us``, ``--kernel-us``; defaults for an
H100 SXM, fp32 without TF32 as the paper's GPUs had none): a sustained fp32 rate of
``efficiency x peak``; an eager step costs at least ``kernels x launch-us`` of host time
(PyTorch's dispatch and the CUDA launch; the GPU idles while the host launches small
kernels); a CUDA-graph replay costs ``FLOPs / rate + kernels x kernel-us`` (each kernel of
a graph still costs its launch inside the graph and its tail: about 1-2 us for small
kernels). Jobs sharing one GPU from separate processes are time-sliced without MPS, so
they overlap one job's host launches with another's GPU work but add no GPU throughput:
K eager jobs take ``max(K x GPU time, host time)`` per K steps.

    python benchmarks/estimate_gpu_block.py
    python benchmarks/estimate_gpu_block.py --efficiency 0.3 --kernel-us 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine  # noqa: E402
import bench_image  # noqa: E402

#: aten ops that only make a new view of a tensor's metadata: no kernel
METADATA_OPS = {
    "view",
    "_unsafe_view",
    "reshape",
    "t",
    "transpose",
    "permute",
    "expand",
    "as_strided",
    "unsqueeze",
    "squeeze",
    "select",
    "slice",
    "alias",
    "detach",
    "unbind",
    "split",
    "split_with_sizes",
    "narrow",
    "diagonal",
    "view_as",
    "_reshape_alias",
    "lift_fresh",
    "empty",
    "empty_like",
    "empty_strided",
    "resolve_conj",
    "resolve_neg",
    "_to_copy_noop",
}

#: Table 1's rows: the paper's methods, then anchored, DLE and DRLE (hyper-DE: a DE step, below),
#: as bench_image times them
METHODS = bench_image.METHODS


def count_step(method: str, sets: int, particles: int, model: str = "image") -> tuple[float, int]:
    """(FLOPs, kernels) of one step: a 3-step run minus a 2-step run. ``model``: ``image``,
    the network an image job builds (``repens.models.networks.build_model``: a Flatten before the
    MLP, so the step runs through vmap), or ``mlp``, the bare MLP of the engine's fast path."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    import repens.models.networks as models
    from repens.models.kernels import gpu_paths
    from repens.training.train import TrainSettings

    class Kernels(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] not in METADATA_OPS:
                self.count += 1
            return func(*args, **(kwargs or {}))

    # the rows only feed the minibatch sampler: fewer keep a stack's data small, not its step
    config = {**bench_engine.CONFIGS["fashionmnist"], "particles": particles, "rows": 2048}
    out = []
    bare = models.mlp
    if model == "image":  # bench_engine builds the MLP through repens.models.networks.mlp at call time
        models.mlp = lambda *a, **k: torch.nn.Sequential(torch.nn.Flatten(), bare(*a, **k))
    try:
        for steps in (2, 3):
            problem = bench_engine._setup(config, method, sets)
            settings = TrainSettings(steps=steps, lr=1e-4, log_every=10**9)
            flops, kernels = FlopCounterMode(display=False), Kernels()
            with gpu_paths(), flops, kernels:
                problem.train(settings)
            out.append((flops.get_total_flops(), kernels.count))
    finally:
        models.mlp = bare
    return out[1][0] - out[0][0], out[1][1] - out[0][1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peak", type=float, default=67.0, help="fp32 peak, TFLOP/s (H100 SXM: 67; PCIe: 51)")
    p.add_argument("--efficiency", type=float, default=0.5, help="sustained share of the peak on these GEMMs")
    p.add_argument("--launch-us", type=float, default=6.0, help="host time per eagerly launched kernel, us")
    p.add_argument("--kernel-us", type=float, default=1.5, help="least time per kernel inside a graph, us")
    p.add_argument("--steps", type=int, default=50_000)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--sets", type=int, default=5, help="seeds stacked as one job in the stacked column")
    p.add_argument("--jobs", type=int, default=4, help="eager jobs sharing the GPU in the shared column")
    p.add_argument(
        "--model",
        choices=["image", "mlp"],
        default="image",
        help="image: the network an image job builds (Flatten + MLP, through vmap); mlp: the bare MLP",
    )
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    rate = args.peak * 1e12 * args.efficiency
    print(
        f"assumed: fp32 {args.peak} TFLOP/s x {args.efficiency} = {rate / 1e12:.1f} TFLOP/s sustained; "
        f"eager launch {args.launch_us} us/kernel on the host; {args.kernel_us} us/kernel in a graph; "
        f"{args.steps:,} steps x {args.seeds} seeds; model {args.model}; torch {torch.__version__}"
    )
    head = (
        f"{'method':<10} {'GFLOP/step':>10} {'kernels':>7} {'GPU ms':>7} {'eager ms':>8} {'graph ms':>8} "
        f"{f'x{args.sets} stacked ms/seed':>20}   minutes for {args.seeds} seeds: eager / {args.jobs} eager "
        f"shared / graph / stacked graph"
    )
    print(head)
    totals, flop_total = [0.0, 0.0, 0.0, 0.0], 0.0
    # DE, hyper-DE's ensemble (a DE step) and its search (20 members, 10,000 steps), the rest
    jobs = [("de", 50, args.steps), ("de", 50, args.steps), ("de", 20, 10_000)]
    jobs += [(m, 50, args.steps) for m in METHODS[1:]]
    counted: dict = {}
    for method, particles, steps in jobs:
        if (method, particles) not in counted:
            one = count_step(method, 1, particles, args.model)
            # the image network stacks seeds by a vmap over them (repens.experiments.image), which
            # batches each kernel: the seed's kernels with sets x its FLOPs (assumed, not counted:
            # the engine's own stacking, counted for the bare MLP, serves MLPs without a Flatten)
            stacked = (
                (one[0] * args.sets, one[1])
                if args.model == "image"
                else count_step(method, args.sets, particles, args.model)
            )
            counted[method, particles] = (one, stacked)
        (flops, kernels), (flops_s, kernels_s) = counted[method, particles]
        gpu = flops / rate
        eager = max(gpu, kernels * args.launch_us * 1e-6)
        graph = gpu + kernels * args.kernel_us * 1e-6
        stacked = (flops_s / rate + kernels_s * args.kernel_us * 1e-6) / args.sets
        shared = max(gpu, eager / args.jobs)  # per step, K jobs overlapping host launches
        mins = [t * steps * args.seeds / 60 for t in (eager, shared, graph, stacked)]
        totals = [a + b for a, b in zip(totals, mins)]
        flop_total += flops * steps * args.seeds
        name = method if particles == 50 else f"{method} x{particles}"
        print(
            f"{name:<10} {flops / 1e9:>10.2f} {kernels:>7d} {gpu * 1e3:>7.3f} {eager * 1e3:>8.3f} {graph * 1e3:>8.3f} "
            f"{stacked * 1e3:>20.3f}   " + " / ".join(f"{m:.1f}" for m in mins)
        )
    print(
        f"block ({len(jobs)} jobs a seed, {args.seeds} seeds, {flop_total:.2e} FLOP): eager {totals[0]:.0f} min, "
        f"{args.jobs} eager jobs sharing {totals[1]:.0f} min, graphs {totals[2]:.0f} min, graphs with {args.sets} "
        f"seeds stacked {totals[3]:.0f} min; the FLOPs alone at the sustained rate {flop_total / rate / 60:.1f} min"
    )


if __name__ == "__main__":
    main()
