"""CPU time of planning the whole pipeline and of starting one small training job, at two commits.

    python benchmarks/bench_planning.py --before <commit> [--after HEAD] [--repeats 5]

Clones this repository twice into one temporary folder (the same layout), checks out
``--before`` and ``--after``, and measures, alternating the two clones in every round:

* planning: ``snakemake -n all --config scale=paper`` (the Snakefile and every rule file
  read, the DAG of every target built);
* a job: ``python -m repens --threads 1 train`` of a small synthetic job (10 particles,
  5 steps: almost all of it is start-up), into a fresh folder each time.

Neither clone has data or results, so every job of the targets is planned.

CPU time is user + system of the child process (``os.wait4``), the figure that matters on
a busy machine (wall time is printed too, but depends on what else runs). Prints the
median and the spread of each; then checks that the two commits plan the same jobs (the
dry run's job list, of ``all`` and of ``all`` with Table 2) and that the job's outputs are
the same bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN = ["-n", "all", "--config", "scale=paper"]


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run ``cmd``; (CPU seconds user + system, wall seconds, output). Raises on failure."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        text = out.read()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} in {cwd} exited {proc.returncode}:\n{text[-3000:]}")
    return usage.ru_utime + usage.ru_stime, wall, text


def clone(commit: str, where: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True)
    subprocess.run(["git", "-C", str(where), "checkout", "-q", commit], check=True)
    return where


def small_spec() -> str:
    sys.path.insert(0, str(ROOT / "src"))
    import yaml

    from repens.pipeline.config import resolve_job

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    return json.dumps(dict(resolve_job(config, "synthetic", "gaussian", "svgd", 42), steps=5, particles=10))


def plan(checkout: Path) -> tuple[float, float, str]:
    return run([sys.executable, "-m", "snakemake", *PLAN], checkout)


def job(checkout: Path, spec: str, out: Path) -> tuple[float, float, str]:
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    return run(
        [sys.executable, "-m", "repens", "--threads", "1", "train", "--spec", spec, "--out", str(out)], checkout, env
    )


def job_list(output: str, checkout: Path) -> list[str]:
    """The planned jobs of a dry run's output (each job's rule, input, output, log,
    wildcards, resources, shell command), sorted; without what differs from one run to the
    next (times, job ids, and the reasons, whose lists of files Snakemake builds from sets)."""
    text = output.replace(str(checkout), "<checkout>")
    text = re.sub(r"^\[\w{3} \w{3} .*\d{4}\]\n?", "", text, flags=re.M)
    text = re.sub(r"^\s*(?:jobid|reason|Date|Workflow ID): .*\n", "", text, flags=re.M)
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", text)
    return sorted(b.strip() for b in blocks if re.match(r"(?:local)?rule \w+:", b))


def summary(name: str, values: list[tuple[float, float]]) -> str:
    cpu, wall = [v[0] for v in values], [v[1] for v in values]
    return (
        f"{name:30s} CPU median {statistics.median(cpu):5.2f} s (min {min(cpu):5.2f}, max {max(cpu):5.2f})"
        f"   wall median {statistics.median(wall):5.2f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit to compare against")
    parser.add_argument("--after", default="HEAD", help="the commit measured (default HEAD)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    before_hash, after_hash = (
        subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", c], check=True, capture_output=True, text=True
        ).stdout.strip()
        for c in (args.before, args.after)
    )
    spec = small_spec()
    with tempfile.TemporaryDirectory(prefix="bench-planning-") as tmp:
        trees = {"before": clone(before_hash, Path(tmp) / "before"), "after": clone(after_hash, Path(tmp) / "after")}
        times: dict[str, list[tuple[float, float]]] = {f"{w} {c}": [] for w in ("plan", "job") for c in trees}
        outputs: dict[str, str] = {}
        for i in range(args.repeats):
            for name, tree in trees.items():
                cpu, wall, text = plan(tree)
                times[f"plan {name}"].append((cpu, wall))
                outputs[name] = text
                out = Path(tmp) / f"job-{name}-{i}" / "particles.npz"
                out.parent.mkdir()
                cpu, wall, _ = job(tree, spec, out)
                times[f"job {name}"].append((cpu, wall))
        print(
            f"before = {before_hash}, after = {after_hash}; {args.repeats} rounds, the two alternating; "
            f"python {sys.version.split()[0]}"
        )
        print(f"planning: snakemake {' '.join(PLAN)}")
        for name in trees:
            print(summary(f"  {name}", times[f"plan {name}"]))
        print("a small synthetic job (10 particles, 5 steps): python -m repens --threads 1 train")
        for name in trees:
            print(summary(f"  {name}", times[f"job {name}"]))
        same_jobs = job_list(outputs["before"], trees["before"]) == job_list(outputs["after"], trees["after"])
        print(f"planned jobs identical: {same_jobs} ({len(job_list(outputs['after'], trees['after']))} jobs)")
        uci = {
            name: job_list(
                run(
                    [
                        sys.executable,
                        "-m",
                        "snakemake",
                        "-n",
                        "all",
                        "results/table2_uci.tex",
                        "--config",
                        "scale=paper",
                    ],
                    tree,
                )[2],
                tree,
            )
            for name, tree in trees.items()
        }
        print(
            f"planned jobs with Table 2 (all results/table2_uci.tex) identical: {uci['before'] == uci['after']} "
            f"({len(uci['after'])} jobs)"
        )
        import numpy as np

        def particles(name: str) -> dict:
            with np.load(Path(tmp) / f"job-{name}-0" / "particles.npz") as data:
                return {k: data[k] for k in data.files}

        first, second = particles("before"), particles("after")
        compared = sorted(set(first) - {"provenance"})  # provenance: the commit, which differs
        identical = first.keys() == second.keys() and all(
            np.asarray(first[k]).tobytes() == np.asarray(second[k]).tobytes() for k in compared
        )
        print(f"job outputs bit-identical: {identical} ({', '.join(compared)}; provenance names the commit)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
