"""Throughput of k Table 1 training jobs sharing one device (a script, not a test).

For each k of ``--jobs`` (default 1, 2, 4, 8) it starts k processes, each the training
loop of one image job as the pipeline resolves it (``repens.pipeline.budget.StageRun``: the job's
network, particles, batch size and update rule from config.yaml via
``repens.pipeline.config.resolve_job``, on random images of the data set's shape), lets every
process build its stack and take ``--warmup`` steps, then releases them together and
times ``--steps`` steps in each. Per k it prints the total steps/s of all k jobs, one
job's steps/s, the total against k = 1 (the gain from sharing), and each job's peak
memory (``torch.cuda.max_memory_allocated`` on a GPU, peak RSS on a CPU): k jobs need k
times that much GPU memory, which no scheduler checks.

Run it on the GPU node as the jobs would run there: once as is (the driver time-slices
the processes) and once with CUDA MPS started (``nvidia-cuda-mps-control -d``; the
kernels of different processes then run side by side), and set the share
(``--set-resources train_image:gpu_share=<100/k>`` locally, shards or MPS on SLURM: README)
from the k where the total stops growing.

    python benchmarks/bench_gpu_share.py --dataset fashionmnist --method de --scale paper
    python benchmarks/bench_gpu_share.py --dataset cifar10 --method svgd --scale paper --jobs 1,2,4
    # a smoke run on a CPU (tiny stacks; the figures say nothing about a GPU):
    python benchmarks/bench_gpu_share.py --device cpu --set particles=4 --set batch_size=32 --jobs 1,2 --steps 10
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def stage_of(args) -> dict:
    """The spec of the stage the jobs train (the pipeline's job, ``--set`` applied)."""
    from repens.pipeline.budget import job_stages, load_config
    from repens.pipeline.config import experiment_seeds, resolve_job

    config = load_config(args.configfile, args.scale)
    spec = resolve_job(config, "image", args.dataset, args.method, experiment_seeds(config, "image")[0])
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            spec[key] = json.loads(value)
        except json.JSONDecodeError:  # a bare word: a string
            spec[key] = value
    stages = {s.name: s for s in job_stages(spec)}
    if args.stage not in stages:
        raise SystemExit(f"error: --stage {args.stage}: {args.dataset}/{args.method} has stages {sorted(stages)}")
    stage = stages[args.stage]
    return {"name": stage.name, "spec": dict(stage.spec), "steps": stage.steps}


def child(args) -> int:
    """One job: build, warm up, say ready, wait for the go, time the steps, report."""
    import torch

    from repens.pipeline.budget import Stage, StageRun

    torch.set_num_threads(args.threads)
    import logging

    logging.getLogger("repens").setLevel(logging.ERROR)
    data = json.loads(args.child)
    run = StageRun(Stage(data["name"], data["spec"], data["steps"]), args.device)
    if args.warmup:
        run.run(args.warmup)
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.monotonic()
    seconds = run.run(args.steps)
    end = time.monotonic()
    if run.device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated(run.device) / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "start": start,
                "end": end,
                "seconds": seconds,
                "steps": args.steps,
                "peak_mb": peak_mb,
                "pid": os.getpid(),
            }
        ),
        flush=True,
    )
    return 0


def together(k: int, stage: dict, args) -> list[dict]:
    """k child processes released at once; their reports."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        json.dumps(stage),
        "--device",
        args.device,
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--threads",
        str(args.threads),
    ]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(k)]
    try:
        for p in procs:
            line = p.stdout.readline()
            if line.strip() != "ready":
                raise SystemExit(f"error: a job did not start (exit {p.wait()}); see its error above")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = []
        for p in procs:
            out, _ = p.communicate()
            if p.returncode:
                raise SystemExit(f"error: a job failed (exit {p.returncode}); see its error above")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return reports
    finally:
        for p in procs:  # only the processes started here
            if p.poll() is None:
                p.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", default=str(ROOT / "config.yaml"))
    parser.add_argument("--scale", choices=["quick", "paper"], default="paper")
    parser.add_argument("--dataset", default="fashionmnist")
    parser.add_argument("--method", default="de")
    parser.add_argument("--stage", default="train", help="train, or search (hyper-DE's L2 search stack)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a setting of the job's spec (JSON value), e.g. particles=4",
    )
    parser.add_argument("--jobs", default="1,2,4,8", help="numbers of jobs sharing the device")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per job")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per job (the rule's threads: 1)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    import torch

    from repens.pipeline.budget import device_name

    torch.set_num_threads(args.threads)  # as each job: the device line names its threads
    stage = stage_of(args)
    device, _ = device_name(args.device)
    spec = stage["spec"]
    print(f"device: {device}")
    print(
        f"job: {args.dataset}/{args.method} ({stage['name']}) at scale={spec['scale']}: {spec['particles']} members, "
        f"batch {spec['batch_size']}, model {spec['model']}" + (f" (set: {', '.join(args.set)})" if args.set else "")
    )
    print(
        f"{args.warmup} warm-up steps, then {args.steps} timed steps in each job, all released at once; "
        f"{args.threads} CPU thread(s) per job; CUDA_MPS_PIPE_DIRECTORY="
        f"{os.environ.get('CUDA_MPS_PIPE_DIRECTORY', '(unset)')}"
    )
    header = f"{'jobs':>4s} {'total steps/s':>14s} {'per job':>9s} {'x first row':>12s} {'peak MB/job':>12s}"
    print(header)
    figures = []
    base = None
    for k in (int(x) for x in args.jobs.split(",")):
        reports = together(k, stage, args)
        window = max(r["end"] for r in reports) - min(r["start"] for r in reports)
        total = sum(r["steps"] for r in reports) / window
        per_job = statistics.median(r["steps"] / r["seconds"] for r in reports)
        peak = max(r["peak_mb"] for r in reports)
        base = total if base is None else base
        figures.append(
            {
                "jobs": k,
                "total_steps_per_s": total,
                "per_job_steps_per_s": per_job,
                "total_vs_first": total / base,
                "peak_mb_per_job": peak,
                "device": device,
                "dataset": args.dataset,
                "method": args.method,
                "stage": stage["name"],
                "set": args.set,
            }
        )
        print(f"{k:4d} {total:14.2f} {per_job:9.2f} {total / base:12.2f} {peak:12.0f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
