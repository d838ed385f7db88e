"""Where the toy DE step's time goes, against the GEMM rate of its own shapes (a script, not a test).

The toy G.2 regression stack (``bench_engine.CONFIGS["toy"]``: 50 particles, MLP
1-50-50-1, batch 64) spends most of a step in three batched GEMMs of the 50 x 50 hidden
layer (forward, input gradient, weight gradient: 3 x 16 MFLOP). This prints, in one
process, one thread:

* the rate of those GEMMs (batched, with the engine's layouts, and as one 3200 x 50 x 50
  GEMM) against the machine's SGEMM rate as ``bench_engine.py`` measures it;
* the likelihood gradient taken apart layer by layer, in the order the engine runs it
  (``repens.particles``: forward, then per layer the weight gradient, the bias gradient,
  the input gradient and the ReLU mask);
* the training loop with the update replaced by a fixed direction (Adam, the finiteness
  check, the batch sampler, the loop), and the whole step of ``repens.train.train``;
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
    parser.add_argument("--baseline-ms", type=float, default=None,
                        help="the baseline engine's toy DE step (from bench_engine.py), for the 3x budget")
    args = parser.parse_args()

    import torch

    import bench_engine
    from repens.host_memory import keep_freed_memory
    from repens.particles import _NARROW_INPUT, _layer, _outer_or_matmul
    from repens.train import TrainSettings, TrainState, train
    from repens.updates import Update

    torch.set_num_threads(1)
    keep_freed_memory()
    config = bench_engine.CONFIGS["toy"]
    post, update, init, anchors, next_batch, context, generator = bench_engine._setup(config, "de", 1)
    model, params = post.model, init.clone()
    batch = next_batch(generator)

    n, rows, width = config["particles"], config["batch"], config["hidden"][0]
    act = torch.randn(n, rows, width)
    weight = torch.randn(n, width, width)
    flops = 2 * n * rows * width * width
    sgemm = bench_engine.gemm_rate(1)
    print(f"GEMM rates, one thread (GFLOP/s); SGEMM 2048: {sgemm:.1f}")
    batched_us = []
    for name, fn in [("forward h W^T (batched)", lambda: torch.bmm(act, weight.mT)),
                     ("input gradient g W (batched)", lambda: torch.bmm(act, weight)),
                     ("weight gradient g^T h (batched)", lambda: torch.bmm(act.mT, act)),
                     ("one 3200 x 50 x 50 GEMM", lambda: torch.mm(act.view(-1, width), weight[0]))]:
        us = _per_call_us(fn, args.calls)
        batched_us.append(us)
        rate = flops / us / 1e3
        print(f"  {name:34s} {rate:6.1f}  ({rate / sgemm:.0%} of SGEMM)")

    times: dict[str, float] = {}

    def lap(key: str, t0: float) -> float:
        t1 = time.perf_counter()
        times[key] = times.get(key, 0.0) + t1 - t0
        return t1

    def gradient() -> None:  # repens.particles._mlp_backward, with a lap per piece
        t0 = time.perf_counter()
        outputs, inputs = model.forward_saving_inputs(params, batch.x)
        t0 = lap("forward (GEMM 50x50 inside)", t0)
        g = post.output_grad_log_likelihood(outputs, batch)
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
            if h.shape[-1] <= _NARROW_INPUT:
                grad_w.copy_(torch.matmul(h.mT, g).mT)
            else:
                grad_w.copy_(torch.matmul(g.mT, h))
            t0 = lap(f"layer {i} weight gradient{gemm}", t0)
            b_index = model._mlp_slots[i][1]
            if b_index is not None:
                torch.sum(g, dim=-2, out=grad_parts[b_index].view(*lead, w.shape[-2]))
                t0 = lap(f"layer {i} bias gradient", t0)
            if i > 0:
                g = _outer_or_matmul(g, w)
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

    direction = update(params, context(batch, anchors)).direction.clone()
    state = TrainState(init, anchors)
    steps = max(args.calls, 200)

    fixed = lambda p, c: Update(direction)  # noqa: E731
    train(state, fixed, context, TrainSettings(steps=20, lr=1e-4, log_every=10**9), generator, next_batch)
    t0 = time.perf_counter()
    train(state, fixed, context, TrainSettings(steps=steps, lr=1e-4, log_every=10**9), generator, next_batch)
    loop_us = (time.perf_counter() - t0) / steps * 1e6
    step_us = bench_engine._time_method(config, "de", 1, steps) * 1e6  # the step bench_engine.py times
    print(f"training loop around a fixed direction (Adam, checks, batches): {loop_us:.1f} us a step")
    print(f"whole DE step (repens.train.train): {step_us:.1f} us")
    if args.baseline_ms:
        budget = args.baseline_ms * 1e3 / 3
        print(f"a 3x step: {budget:.0f} us; minus the three GEMMs ({gemm_us:.0f}) leaves {budget - gemm_us:.0f} us "
              f"for what now takes {step_us - gemm_us:.0f} us")


if __name__ == "__main__":
    main()
