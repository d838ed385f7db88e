"""A short trial of the lease's own jobs side by side in one process, before a lease trusts it.

The benchmark's side-by-side rows (``bench_table1.py --side-by-side``) time stacks whose
kernels were loaded and whose steps were captured one method at a time first; production
starts every job of a process at once, from a fresh process. This runs the first ``--jobs``
image jobs of a jobs file (``export-jobs``; one ``matmul_precision``, distinct methods) as
production would side by side (``train-stack --stacks 1,1,...``, a thread and a CUDA stream
each) but for ``--steps`` steps (hyper-DE's search: 2 trials of half as many), into a
scratch folder, and prints one line: the jobs, the seconds, and ``ok`` or why not (exit
status, time-out, each capture that fell back), then, if not ``ok``, the end of the trial's
output; a trial that hangs is aborted with every thread's Python stack printed (where it
hung). Its exit status is 0 only for ``ok``.

    python benchmarks/side_trial.py data/jobs.json --jobs 9 --steps 600 --timeout 150 [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from repens.pipeline import kit  # noqa: E402


def trial_argv(jobs: list[dict], count: int, steps: int, scratch: Path, device: str) -> tuple[list[str], list[str]]:
    """The ``train-stack`` command line of the trial and its jobs' methods."""
    chosen, methods, key = [], [], None
    for job in jobs:
        argv = job["argv"]
        this = kit.side_by_side_key(argv) if kit.command_of(argv) == "train" else None
        spec = json.loads(job.get("spec") or kit._option(argv, "--spec"))
        if this is None or (key is not None and this != key) or spec["method"] in methods:
            continue
        key = this
        spec.update(steps=steps, search_steps=max(steps // 2, 1), search_trials=2)
        if spec.get("l2_search"):
            spec["search_top"] = 1
        out = scratch / spec["method"] / "metrics.json"
        argv = kit._with_option(kit._with_option(argv, "--spec", json.dumps(spec, sort_keys=True)), "--out", str(out))
        argv = kit._with_option(
            kit._with_option(argv, "--runtime", json.dumps({"checkpoint_seconds": 10**6})), "--device", device
        )
        chosen.append(argv)
        methods.append(spec["method"])
        if len(chosen) == count:
            break
    if len(chosen) < 2:
        raise SystemExit(f"side_trial: fewer than two image jobs of one command line in the jobs file ({len(chosen)})")
    return kit.side_by_side_argv(chosen), methods


def run_trial(command: list[str], timeout: float) -> tuple[int | None, str]:
    """``command``'s exit status (None if it ran past ``timeout``) and output. One that hangs
    is stopped with SIGABRT first, so Python's fault handler (``-X faulthandler``) prints
    where every thread was, then killed."""
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            output, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        return None, output


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jobs_file", type=Path)
    parser.add_argument("--jobs", type=int, default=9)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--timeout", type=float, default=150.0)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    jobs = json.loads(args.jobs_file.read_text())["jobs"]
    with tempfile.TemporaryDirectory(prefix="side-trial-") as scratch:
        argv, methods = trial_argv(jobs, args.jobs, args.steps, Path(scratch), args.device)
        t0 = time.perf_counter()
        rc, output = run_trial([sys.executable, "-X", "faulthandler", "-m", "repens", *argv], args.timeout)
        seconds = time.perf_counter() - t0
        finished = [m for m in methods if (Path(scratch) / m / "metrics.json").is_file()]
    fallbacks = [line.strip() for line in output.splitlines() if "not replayed from a graph" in line]
    problems = []
    if rc is None:
        problems.append(f"timed out after {args.timeout:.0f} s")
    elif rc != 0:
        problems.append(f"exit {rc}")
    if len(finished) < len(methods):
        problems.append(f"{len(methods) - len(finished)} of {len(methods)} jobs wrote no result")
    problems += [f"a capture fell back: {line[:300]}" for line in fallbacks]
    verdict = "ok" if not problems else "; ".join(problems)
    print(
        f"side-by-side trial: {len(methods)} jobs of {args.steps} steps in one process ({', '.join(methods)}): "
        f"{seconds:.0f} s, {verdict}"
    )
    if problems:
        print("\n".join(output.splitlines()[-(150 if rc is None else 40) :]))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
