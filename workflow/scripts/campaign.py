"""Run paper-scale training jobs in the background, in order, a few at a time, and copy
each finished job's small files into the reference tree (and commit them) at once.

    python workflow/scripts/campaign.py --lanes 2 --commit \\
        --config image_data_mirror=../shared/data image_data_download=false

Each job is one ``snakemake -c1 <target>`` call at ``scale=paper`` under ``nice``, so an
interrupted job resumes from its checkpoint when the campaign is started again (a job
whose files are already in the reference tree is skipped). Lanes claim the next job of
the queue in order. The default queue is Table 1's FashionMNIST block in the order the
paper-results plan gives: seed 38 of the methods the paper reports, then seed 38 of the
other configured methods, then each further seed of the paper's methods, then of the rest.

Runs in the checkout given by ``--workdir`` (a separate clone keeps the training code
fixed while the main checkout is edited); copies into ``--reference`` (the main
checkout's reference tree). Stdlib only: it needs Snakemake on PATH, not torch.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

#: files of a finished job copied into the reference tree (beside the run's metrics.json)
JOB_FILES = ("metrics.json", "benchmark.tsv")


def table1_queue(workdir: Path, dataset: str) -> list[tuple[str, str, int]]:
    """(dataset, method, seed) in campaign order, from the workdir's config and paper table."""
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    image = config["experiments"]["image"]
    methods = list(image["methods"])
    seeds = list(image.get("seeds", config["seeds"]))
    with open(workdir / "workflow/resources/table1_paper.csv") as fh:
        rows = csv.DictReader(line for line in fh if not line.startswith("#"))
        in_paper = {r["method"] for r in rows if r["dataset"] == dataset}
    paper = [m for m in methods if m in in_paper]
    others = [m for m in methods if m not in in_paper]
    first, rest = seeds[0], seeds[1:]
    order = [(m, first) for m in paper] + [(m, first) for m in others]
    order += [(m, s) for s in rest for m in paper] + [(m, s) for s in rest for m in others]
    return [(dataset, m, s) for m, s in order]


def job_dir(dataset: str, method: str, seed: int) -> Path:
    return Path("image") / dataset / method / f"seed{seed}"


def log_path(dataset: str, method: str, seed: int) -> Path:
    return Path("logs/image") / dataset / method / f"seed{seed}.log"


def git_commit(repo: Path, paths: list[Path], message: str, tries: int = 30) -> None:
    """Commit exactly ``paths`` (nothing else that is staged), retrying while git is busy."""
    rel = [str(p.relative_to(repo)) for p in paths]
    for attempt in range(tries):
        add = subprocess.run(["git", "-C", str(repo), "add", "--", *rel], capture_output=True, text=True)
        if add.returncode == 0:
            done = subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", message, "--only", "--", *rel],
                                  capture_output=True, text=True)
            if done.returncode == 0:
                return
            err = done.stderr
        else:
            err = add.stderr
        print(f"git busy or failed ({err.strip()[:200]}); retry {attempt + 1}/{tries}", flush=True)
        time.sleep(10)
    print(f"error: could not commit {rel}", file=sys.stderr, flush=True)


class Campaign:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.workdir = Path(args.workdir).resolve()
        self.reference = Path(args.reference).resolve()
        self.queue = table1_queue(self.workdir, args.dataset)
        self.lock = threading.Lock()
        self.next = 0

    def done(self, job: tuple[str, str, int]) -> bool:
        return (self.reference / job_dir(*job) / "metrics.json").exists()

    def claim(self) -> tuple[str, str, int] | None:
        with self.lock:
            while self.next < len(self.queue):
                job = self.queue[self.next]
                self.next += 1
                if not self.done(job):
                    return job
            return None

    def run_job(self, job: tuple[str, str, int]) -> bool:
        target = Path("results") / job_dir(*job) / "metrics.json"
        cmd = ["nice", "-n", str(self.args.nice), "snakemake", "-c1", "--nolock", str(target),
               "--config", "scale=paper", *self.args.config]
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        print(f"[{stamp}] start {'/'.join(map(str, job))}: {' '.join(cmd)}", flush=True)
        out = self.workdir / "logs" / "campaign" / f"{job[0]}-{job[1]}-seed{job[2]}.snakemake.log"
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a") as fh:
            rc = subprocess.run(cmd, cwd=self.workdir, stdout=fh, stderr=subprocess.STDOUT).returncode
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        if rc != 0 or not (self.workdir / target).exists():
            print(f"[{stamp}] FAILED {'/'.join(map(str, job))} (exit {rc}; {out})", flush=True)
            return False
        dest = self.reference / job_dir(*job)
        dest.mkdir(parents=True, exist_ok=True)
        copied = []
        for name in JOB_FILES:
            src = self.workdir / "results" / job_dir(*job) / name
            if src.exists():
                shutil.copy2(src, dest / name)
                copied.append(dest / name)
        log_dest = self.reference / log_path(*job)
        log_dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.workdir / log_path(*job), log_dest)
        copied.append(log_dest)
        print(f"[{stamp}] done {'/'.join(map(str, job))} -> {dest}", flush=True)
        if self.args.commit:
            git_commit(self.reference.parent, copied,
                       f"reference: Table 1 {job[0]} {job[1]} seed {job[2]} at paper scale")
        return True

    def lane(self) -> None:
        while (job := self.claim()) is not None:
            self.run_job(job)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", default=".", help="checkout that trains (default: .)")
    p.add_argument("--reference", default="reference", help="reference tree to copy finished jobs into")
    p.add_argument("--dataset", default="fashionmnist")
    p.add_argument("--lanes", type=int, default=1, help="jobs at a time (default 1)")
    p.add_argument("--nice", type=int, default=19)
    p.add_argument("--commit", action="store_true", help="git-commit each finished job's files")
    p.add_argument("--list", action="store_true", help="print the queue and what is done, then exit")
    p.add_argument("--config", nargs="*", default=[], help="extra Snakemake --config items")
    args = p.parse_args(argv)
    campaign = Campaign(args)
    if args.list:
        for job in campaign.queue:
            print(("done " if campaign.done(job) else "todo ") + "/".join(map(str, job)))
        return 0
    lanes = [threading.Thread(target=campaign.lane) for _ in range(args.lanes)]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
