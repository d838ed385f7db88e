"""What a plan will cost on a cluster, from the times of the committed runs: the jobs of a
dry run counted by rule, and each training job priced at the wall time its (experiment,
dataset, method) took in the reference tree (the median over its committed seeds,
Snakemake's ``benchmark.tsv``), on the device its provenance names.

    snakemake --profile slurm -n -d /tmp/plan > plan.txt     # the plan, in a clean folder
    python benchmarks/cluster_cost.py plan.txt

A job whose (experiment, dataset, method) the tree holds no run of on the same kind of
device (a GPU for the jobs that ask for one) is counted as "no committed time" (CIFAR-10,
never run at the paper's scale): no figure is made up for it.
The committed GPU runs shared one GPU with up to eight others (the job kit), so their wall
times are upper bounds on a job alone; the CPU runs ran niced on a 2-core machine beside
other jobs. A script that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# training rule -> (experiment of the reference tree, wildcard naming the dataset)
TRAINING = {
    "train_image": ("image", "dataset"),
    "train_uci": ("uci", "dataset"),
    "train_toy": ("toy", "dataset"),
    "sample_hmc": ("toy", "dataset"),
    "train_synthetic": ("synthetic", "target"),
}


def plan_jobs(text: str) -> list[tuple[str, dict[str, str], str]]:
    """(rule, wildcards, resources line) of every job of a dry run's output."""
    jobs = []
    for block in re.split(r"^rule ", text, flags=re.M)[1:]:
        name = block.split(":", 1)[0].strip()
        found = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        wildcards = dict(item.split("=", 1) for item in found[1].split(", ")) if found else {}
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        jobs.append((name, wildcards, resources[1] if resources else ""))
    return jobs


def committed_time(reference: Path, experiment: str, dataset: str, method: str, gpu: bool):
    """(median wall seconds, devices) of the tree's runs of one cell on a GPU (``gpu``) or
    on a CPU; None where it holds none."""
    seconds, devices = [], set()
    for bench in sorted((reference / experiment / dataset / method).glob("seed*/benchmark.tsv")):
        rows = list(csv.DictReader(bench.open(), delimiter="\t"))
        device, on_gpu = device_of(bench.parent)
        if rows and on_gpu == gpu:
            seconds.append(float(rows[0]["s"]))
            devices.add(device)
    return (statistics.median(seconds), devices) if seconds else None


def device_of(run: Path) -> tuple[str, bool]:
    """(the device a run trained on, whether it is a GPU): its provenance (``cpu (...)``
    or the GPU's name), else its campaign record's CPU."""
    metrics = run / "metrics.json"
    device = json.loads(metrics.read_text()).get("provenance", {}).get("device") if metrics.is_file() else None
    if device and not device.startswith("cpu"):
        return device.split(" (")[0], True
    campaign = run / "campaign.json"
    if campaign.is_file():
        return json.loads(campaign.read_text()).get("cpu", "a CPU"), False
    return "a CPU", False


def price(jobs, reference: Path):
    """Per rule: jobs, GPU jobs, jobs priced, their hours, jobs without a committed time,
    the devices the times come from."""
    table = defaultdict(
        lambda: {"jobs": 0, "gpu": 0, "priced": 0, "hours": 0.0, "unpriced": Counter(), "devices": set()}
    )
    for rule, wildcards, resources in jobs:
        row = table[rule]
        row["jobs"] += 1
        on_gpu = bool(re.search(r"\b(gpu|gres)=", resources))
        row["gpu"] += on_gpu
        if rule not in TRAINING:
            continue
        experiment, key = TRAINING[rule]
        dataset = wildcards.get(key, "?")
        method = "hmc" if rule == "sample_hmc" else wildcards.get("method", "?")
        found = committed_time(reference, experiment, dataset, method, on_gpu)
        if found is None:
            row["unpriced"][dataset] += 1
            continue
        seconds, devices = found
        row["priced"] += 1
        row["hours"] += seconds / 3600
        row["devices"] |= devices
    return table


def report(table) -> str:
    header = ("rule", "jobs", "on a GPU", "priced from the tree", "hours (those priced)", "times measured on")
    lines = [
        "| " + " | ".join((*header, "no committed time")) + " |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for rule, row in table.items():
        unpriced = ", ".join(f"{n} {d}" for d, n in sorted(row["unpriced"].items())) or ""
        priced = f"{row['priced']}" if rule in TRAINING else ""
        hours = f"{row['hours']:.1f}" if rule in TRAINING and row["priced"] else ""
        devices = ", ".join(sorted(row["devices"]))
        lines.append(f"| {rule} | {row['jobs']} | {row['gpu']} | {priced} | {hours} | {devices} | {unpriced} |")
    total = sum(r["jobs"] for r in table.values())
    gpu_hours = sum(r["hours"] for r in table.values() if r["gpu"])
    cpu_hours = sum(r["hours"] for rule, r in table.items() if rule in TRAINING and not r["gpu"])
    lines.append(f"| **total** | **{total}** | {sum(r['gpu'] for r in table.values())} | | | | |")
    lines.append("")
    lines.append(
        f"GPU jobs priced: {gpu_hours:.1f} GPU-hours at one GPU per job "
        "(upper bound: the committed GPU runs shared their GPU)"
    )
    lines.append(f"CPU jobs priced: {cpu_hours:.1f} core-hours (one core per job)")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", help="a dry run's output (snakemake -n ...), '-' for stdin")
    parser.add_argument("--reference", type=Path, default=ROOT / "reference")
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.plan == "-" else Path(args.plan).read_text()
    jobs = plan_jobs(text)
    if not jobs:
        print(f"{args.plan}: no job in it (is it the output of `snakemake -n`?)", file=sys.stderr)
        return 1
    print(report(price(jobs, args.reference)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
