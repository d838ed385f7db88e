"""Where the toy DE step's time goes, against the GEMM rate of its own shapes (a script, not a test).

The toy G.2 regression stack (``bench_engine.CONFIGS["toy"]``: 50 particles, MLP
1-50-50-1, batch 64) spends most of a step in three batched GEMMs of the 50 x 50 hidden
layer (forward, input gradient, weight gradient: 3 x 16 MFLOP). This prints, in one
process, one thread:

* the rate of those GEMMs (batched, with the engine's layouts, and as one 3200 x 50 x 50
  GEMM) against the machine's SGEMM rate as ``bench_engine.py`` measures it;
* the likelihood gradient taken apart layer by layer, in the order the engine runs it
  (``repens.models.particles``: forward, then per layer the weight gradient, the bias gradient,
  the input gradient and the ReLU mask);
* the training loop with the update replaced by a fixed direction (Adam, the finiteness
  check, the batch sampler, the loop), and the whole step of ``repens.training.train.train``;
* the same likelihood gradient written by hand with feature-major activations (n, H, B),
  the layout the engine does not use, against the engine's, in rounds;
* what a step 3x faster than ``--baseline-ms`` would leave for everything but the GEMMs.

    python benchmarks/bench_toy_step.py
    python benchmarks/bench_toy_step.py --baseline-ms 2.94   # bench_engine's baseline toy step
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _per_call_us(fn, calls: int) -> float:
    for _ in range(max(calls // 10, 5)):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument(
        "--baseline-ms",
        type=float,
        default=None,
        help="the baseline engine's toy DE step (from bench_engine.py), for the 3x budget",
    )
    args = parser.parse_args()

    import bench_engine
    import torch

    from repens.models.particles import _layer, _outer_or_matmul
    from repens.training.host_memory import keep_freed_memory
    from repens.training.train import TrainSettings

    torch.set_num_threads(1)
    keep_freed_memory()
    config = bench_engine.CONFIGS["toy"]
    problem = bench_engine._setup(config, "de", 1)
    post, model, params = problem.post, problem.post.model, problem.init.clone()
    batch = problem.next_batch(problem.generator)

    n, rows, width = config["particles"], config["batch"], config["hidden"][0]
    act = torch.randn(n, rows, width)
    weight = torch.randn(n, width, width)
    flops = 2 * n * rows * width * width
    sgemm = bench_engine.gemm_rate(1)
    print(f"GEMM rates, one thread (GFLOP/s); SGEMM 2048: {sgemm:.1f}")
    batched_us = []
    for name, fn in [
        ("forward h W^T (batched)", lambda: torch.bmm(act, weight.mT)),
        ("input gradient g W (batched)", lambda: torch.bmm(act, weight)),
        ("weight gradient g^T h (batched)", lambda: torch.bmm(act.mT, act)),
        ("one 3200 x 50 x 50 GEMM", lambda: torch.mm(act.view(-1, width), weight[0])),
    ]:
        us = _per_call_us(fn, args.calls)
        batched_us.append(us)
        rate = flops / us / 1e3
        print(f"  {name:34s} {rate:6.1f}  ({rate / sgemm:.0%} of SGEMM)")

    times: dict[str, float] = {}

    def lap(key: str, t0: float) -> float:
        t1 = time.perf_counter()
        times[key] = times.get(key, 0.0) + t1 - t0
        return t1

    def gradient() -> None:  # repens.models.particles._mlp_backward, with a lap per piece
        t0 = time.perf_counter()
        outputs, inputs = model.forward_saving_inputs(params, batch.x)
        t0 = lap("forward (GEMM 50x50 inside)", t0)
        g = post.output_grad_log_likelihood(outputs, batch).mT  # feature-major, as the engine's backward
        t0 = lap("likelihood's output gradient", t0)
        lead = params.shape[:-1]
        parts = torch.split(params, model._sizes, dim=-1)
        grad = params.new_empty(params.shape)
        grad_parts = torch.split(grad, model._sizes, dim=-1)
        for i in reversed(range(len(model._mlp))):
            h = inputs[i]
            w, _ = _layer(parts, model, i, lead)
            grad_w = grad_parts[model._mlp_slots[i][0]].view(*lead, *w.shape[-2:])
            gemm = " (GEMM 50x50)" if i == 1 else ""
            grad_w.copy_(torch.matmul(g, h.mT))
            t0 = lap(f"layer {i} weight gradient{gemm}", t0)
            b_index = model._mlp_slots[i][1]
            if b_index is not None:
                torch.sum(g, dim=-1, out=grad_parts[b_index].view(*lead, w.shape[-2]))
                t0 = lap(f"layer {i} bias gradient", t0)
            if i > 0:
                g = _outer_or_matmul(w.mT, g)
                t0 = lap(f"layer {i} input gradient{gemm}", t0)
                g = torch.ops.aten.threshold_backward(g, h, 0.0)
                t0 = lap(f"layer {i} ReLU mask", t0)

    for _ in range(30):
        gradient()
    times.clear()
    for _ in range(args.calls):
        gradient()
    print("likelihood gradient, piece by piece (us a step):")
    for key, seconds in times.items():
        print(f"  {key:40s} {seconds / args.calls * 1e6:7.1f}")
    total_us = sum(times.values()) / args.calls * 1e6
    gemm_us = sum(batched_us[:3])  # the three hidden-layer GEMMs alone, timed above
    print(f"  {'total':40s} {total_us:7.1f}  (its three 50x50 GEMMs alone: {gemm_us:.1f})")

    # the layout this engine does not use: activations feature-major, (n, H, B). Every GEMM
    # is then W h or g h^T with the weight in its stored (out, in) layout, the weight
    # gradients come out in the rows' layout, and the one-output layer is a (1 x 50)(50 x B)
    # product; same arithmetic, rounded differently (so a new ENGINE_VERSION if adopted)
    feature_major = _feature_major_gradient(post, params, batch)
    engine = lambda: post.grad_log_likelihood(params, batch)  # noqa: E731
    err = float((feature_major() - engine()).abs().max() / engine().abs().max())
    rounds = [(_per_call_us(engine, args.calls), _per_call_us(feature_major, args.calls)) for _ in range(3)]
    print(
        "likelihood gradient, engine vs the same written feature-major (us, 3 rounds): "
        + ", ".join(f"{a:.0f} vs {b:.0f}" for a, b in rounds)
        + f"; max difference {err:.1e} of the largest entry"
    )

    settings = TrainSettings(steps=20, lr=1e-4, log_every=10**9)
    direction = problem.direction(settings).clone()
    steps = max(args.calls, 200)

    problem.train(settings, ascent=lambda p: direction)
    t0 = time.perf_counter()
    problem.train(TrainSettings(steps=steps, lr=1e-4, log_every=10**9), ascent=lambda p: direction)
    loop_us = (time.perf_counter() - t0) / steps * 1e6
    step_us = bench_engine._time_method(config, "de", 1, steps) * 1e6  # the step bench_engine.py times
    print(f"training loop around a fixed direction (Adam, checks, batches): {loop_us:.1f} us a step")
    print(f"whole DE step (repens.training.train.train): {step_us:.1f} us")
    if args.baseline_ms:
        budget = args.baseline_ms * 1e3 / 3
        print(
            f"a 3x step: {budget:.0f} us; minus the three GEMMs ({gemm_us:.0f}) leaves {budget - gemm_us:.0f} us "
            f"for what now takes {step_us - gemm_us:.0f} us"
        )


def _feature_major_gradient(post, params, batch):
    """The toy stack's log-likelihood gradient (Gaussian, MLP 1-50-50-1) by hand with
    activations (n, H, B), as a function of nothing (the arguments are bound)."""
    import torch

    n, sizes = params.shape[0], post.model._sizes
    width = post.model.slots[0].shape[0]
    x, y = batch.x, batch.y
    rows = x.shape[0]
    xt, yt = x.reshape(1, 1, rows), y.reshape(1, 1, rows)
    scale = post.num_train / rows / post.noise_std**2

    def gradient():
        w0, b0, w1, b1, w2, b2 = torch.split(params, sizes, dim=-1)
        w0, b0, b1 = w0.view(n, width, 1), b0.view(n, width, 1), b1.view(n, width, 1)
        w1, w2, b2 = w1.view(n, width, width), w2.view(n, 1, width), b2.view(n, 1, 1)
        h1 = torch.addcmul(b0, w0, xt).relu_()
        h2 = torch.baddbmm(b1, w1, h1).relu_()
        g_out = (yt - torch.baddbmm(b2, w2, h2)).mul_(scale)
        grad = torch.empty_like(params)
        gw0, gb0, gw1, gb1, gw2, gb2 = torch.split(grad, sizes, dim=-1)
        gw2.view(n, 1, width).copy_(torch.bmm(g_out, h2.mT))
        torch.sum(g_out, dim=-1, out=gb2.view(n, 1))
        g2 = torch.ops.aten.threshold_backward(w2.mT * g_out, h2, 0.0)
        gw1.view(n, width, width).copy_(torch.bmm(g2, h1.mT))
        torch.sum(g2, dim=-1, out=gb1.view(n, width))
        g1 = torch.ops.aten.threshold_backward(torch.bmm(w1.mT, g2), h1, 0.0)
        gw0.view(n, width, 1).copy_(torch.matmul(g1, xt.mT))
        torch.sum(g1, dim=-1, out=gb0.view(n, width))
        return grad

    return gradient


if __name__ == "__main__":
    main()
