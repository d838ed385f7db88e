"""Run the paper-scale jobs in the background, in order, a few at a time, and copy each
finished job's small files into the reference tree (and commit them) at once.

    python workflow/scripts/campaign.py --workdir ../campaign --reference reference --commit \
        --lane image --lane synthetic,uci,toy \
        --config image_data_mirror=/path/to/images image_data_download=false uci_data=/path/to/uci

Each queue item is one ``snakemake <targets> -c1 --nolock`` call at ``scale=paper`` under
``nice`` (``--threads N``: ``-cN``, every training rule at N threads), so an interrupted
item resumes from its checkpoints when the campaign is started again, and an item whose
files are all in the reference tree is skipped. A lane works through its experiments'
queues in order, one item at a time; lanes share the queues.

Queues: ``image`` (Table 1, one job an item): seed 38 of the paper's rows at the protocol
that produced its numbers (the ``paper_protocol`` variant), of its rows at the text's
protocol, of the other configured methods; then each further seed of those groups, in that
order. ``synthetic`` and ``uci``: one item per (dataset, method), all
its seeds. ``toy``: the HMC references first, then one item per (dataset, method).

Runs in ``--workdir`` (a separate clone keeps the training code fixed while the main
checkout is edited); copies into ``--reference``, beside each job's files a
``campaign.json`` (machine, lanes, times). Stdlib and PyYAML only: it needs Snakemake on
PATH, not torch.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from repens.jobs.provenance import cpu_model  # noqa: E402  (stdlib only; imports no torch)
from repens.core.variants import dataset_methods, expand_variants  # noqa: E402  (imports no torch)
from repens.core.jobkey import attempts_log_path  # noqa: E402  (imports no torch)

#: what a finished job leaves beside its output file that the reference tree keeps
SIDE_FILES = ("benchmark.tsv", "diagnostics.json")

#: each experiment's per-job output file (results/<experiment>/<dataset>/<method>/seed<seed>/<file>)
OUTPUT_FILE = {"image": "metrics.json", "uci": "metrics.json", "toy": "predictions.npz",
               "synthetic": "particles.npz"}

#: a queue item: a label and the output files (relative to results/) of the jobs it runs together
Item = tuple[str, tuple[str, ...]]


def _job(experiment: str, dataset: str, method: str, seed: int) -> str:
    return f"{experiment}/{dataset}/{method}/seed{seed}/{OUTPUT_FILE[experiment]}"


def paper_seeds(config: dict, experiment: str) -> list[int]:
    return list(config["experiments"][experiment].get("seeds", config["seeds"]))


def image_queue(workdir: Path, config: dict, dataset: str = "fashionmnist") -> list[Item]:
    """Table 1, one job an item, seed by seed within each group: seed 1 of the paper's rows
    at the protocol that produced its numbers (``paper_protocol``: ``<method>-<variant>``),
    of its rows at the text's protocol, then of the other configured methods; then each
    further seed of the first group, of the second, then of the rest. The claims are scored
    on the first group, so its second seed, which gives every cell an error, comes first."""
    methods = dataset_methods(config, "image", dataset)
    seeds = paper_seeds(config, "image")
    with open(workdir / "workflow/resources/table1_paper.csv") as fh:
        rows = csv.DictReader(line for line in fh if not line.startswith("#"))
        in_paper = {r["method"] for r in rows if r["dataset"] == dataset}
    variant = config["experiments"]["image"].get("paper_protocol")
    paper = [m for m in methods if m in in_paper]
    protocol = [f"{m}-{variant}" for m in paper if f"{m}-{variant}" in methods] if variant else []
    others = [m for m in methods if m not in in_paper and m not in protocol]
    first, rest = seeds[0], seeds[1:]
    groups = (protocol, paper, others)
    order = [(m, first) for group in groups for m in group]
    order += [(m, s) for group in groups for s in rest for m in group]
    return [(f"image {dataset} {m} seed {s}", (_job("image", dataset, m, s),)) for m, s in order]


def grouped_queue(config: dict, experiment: str) -> list[Item]:
    """One item per (dataset, method), every seed of it (short jobs: one Snakemake call each)."""
    exp = config["experiments"][experiment]
    seeds = paper_seeds(config, experiment)
    return [(f"{experiment} {d} {m}", tuple(_job(experiment, d, m, s) for s in seeds))
            for d in exp["datasets"] for m in dataset_methods(config, experiment, d)]


def toy_queue(config: dict) -> list[Item]:
    """The HMC references first (one per dataset and seed), then the methods."""
    exp = config["experiments"]["toy"]
    hmc = [(f"toy {d} hmc seed {s}", (f"toy/{d}/hmc/seed{s}/predictions.npz",))
           for d in exp["datasets"] for s in paper_seeds(config, "toy")]
    return hmc + grouped_queue(config, "toy")


def build_queue(workdir: Path, experiment: str) -> list[Item]:
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    expand_variants(config)
    if experiment == "image":
        return image_queue(workdir, config)
    if experiment == "toy":
        return toy_queue(config)
    return grouped_queue(config, experiment)


#: the rules that train (their ``threads:`` is what ``--threads`` sets; a name the workflow
#: does not have fails the call before anything runs)
TRAINING_RULES = ("train_image", "train_synthetic", "train_toy", "sample_hmc", "train_uci")


def log_of(output: str) -> Path:
    """logs/<experiment>/<dataset>/<method>/seed<seed>.log of a job's output file."""
    return Path("logs") / Path(output).parent.with_suffix(".log")


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
    """Lanes share one queue per experiment; each lane works through its experiments in order."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.workdir = Path(args.workdir).resolve()
        self.reference = Path(args.reference).resolve()
        self.lanes = [lane.split(",") for lane in args.lane] or [["image"]]
        names = {e for lane in self.lanes for e in lane}
        unknown = names - set(OUTPUT_FILE)
        if unknown:
            raise SystemExit(f"error: --lane names unknown experiments {sorted(unknown)}; known: {sorted(OUTPUT_FILE)}")
        self.queues = {e: build_queue(self.workdir, e) for e in names}
        self.next = dict.fromkeys(names, 0)
        self.lock = threading.Lock()

    def done(self, item: Item) -> bool:
        return all((self.reference / out).exists() for out in item[1])

    def claim(self, experiment: str) -> Item | None:
        with self.lock:
            queue = self.queues[experiment]
            while self.next[experiment] < len(queue):
                item = queue[self.next[experiment]]
                self.next[experiment] += 1
                if not self.done(item):
                    return item
            return None

    def command(self, targets: list[str]) -> list[str]:
        """The item's Snakemake call: ``--threads`` cores, every training rule at that many."""
        n = self.args.threads
        return ["nice", "-n", str(self.args.nice), "snakemake", *targets, f"-c{n}", "--nolock",
                "--config", "scale=paper", *self.args.config,
                "--set-threads", *(f"{rule}={n}" for rule in TRAINING_RULES)]

    def run_item(self, item: Item) -> bool:
        label, outputs = item
        targets = [f"results/{out}" for out in outputs]
        if self.args.collect:  # copy what the workdir finished (say, imported from a GPU node); run nothing
            if any(not (self.workdir / t).exists() for t in targets):
                return False
            return self.keep(item, started=time.strftime("%Y-%m-%d %H:%M:%S"))
        cmd = self.command(targets)
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        print(f"[{started}] start {label}", flush=True)
        out = self.workdir / "logs" / "campaign" / (label.replace(" ", "-") + ".snakemake.log")
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a") as fh:
            rc = subprocess.run(cmd, cwd=self.workdir, stdout=fh, stderr=subprocess.STDOUT).returncode
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        missing = [t for t in targets if not (self.workdir / t).exists()]
        if rc != 0 or missing:
            print(f"[{stamp}] FAILED {label} (exit {rc}; missing {missing}; see {out})", flush=True)
            return False
        return self.keep(item, started)

    def keep(self, item: Item, started: str) -> bool:
        """Copy a finished item's files into the reference tree (and commit them)."""
        label, outputs = item
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        copied = []
        for output in outputs:
            src_dir = self.workdir / "results" / Path(output).parent
            dest_dir = self.reference / Path(output).parent
            dest_dir.mkdir(parents=True, exist_ok=True)
            for name in (Path(output).name, *SIDE_FILES):
                if (src_dir / name).exists():
                    shutil.copy2(src_dir / name, dest_dir / name)
                    copied.append(dest_dir / name)
            # the log holds the last attempt only; the attempts log, every attempt of a resumed run
            for log in (log_of(output), attempts_log_path(log_of(output))):
                if (self.workdir / log).exists():
                    (self.reference / log).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(self.workdir / log, self.reference / log)
                    copied.append(self.reference / log)
        run = {"campaign_item": label, "started": started, "finished": stamp, "cpu": cpu_model(),
               "cores": os.cpu_count(), "lanes": len(self.lanes), "threads": self.args.threads,
               "nice": self.args.nice,
               "workdir_commit": subprocess.run(["git", "-C", str(self.workdir), "rev-parse", "HEAD"],
                                                capture_output=True, text=True).stdout.strip(),
               "note": "timings in benchmark.tsv were taken with the other lanes running"}
        if self.args.collect:  # not run here: where it ran is in the result's own provenance
            run = {"campaign_item": label, "collected": stamp, "note": "copied from the workdir, not run by the "
                   "campaign: the machine and software are in the result's provenance"}
        for output in outputs:
            path = self.reference / Path(output).parent / "campaign.json"
            path.write_text(json.dumps(run, indent=1) + "\n")
            copied.append(path)
        print(f"[{stamp}] done {label}: {len(copied)} files into {self.reference}", flush=True)
        if self.args.commit:
            git_commit(self.reference.parent, copied, f"reference: {label} at paper scale")
        return True

    def lane(self, experiments: list[str]) -> None:
        for experiment in experiments:
            while (item := self.claim(experiment)) is not None:
                self.run_item(item)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", default=".", help="checkout that trains (default: .)")
    p.add_argument("--reference", default="reference", help="reference tree to copy finished jobs into")
    p.add_argument("--lane", action="append", default=[], metavar="EXP[,EXP...]",
                   help="one lane (a job at a time) working through these experiments' queues in order; "
                        "repeat for more lanes (default: one lane, image)")
    p.add_argument("--nice", type=int, default=19)
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads of each item's job (default 1: one core a lane; one lane on every core "
                        "finishes a single long run sooner than lanes side by side)")
    p.add_argument("--commit", action="store_true", help="git-commit each finished item's files")
    p.add_argument("--list", action="store_true", help="print the queues and what is done, then exit")
    p.add_argument("--collect", action="store_true",
                   help="train nothing: copy the items the workdir has finished (e.g. imported from a GPU node)")
    p.add_argument("--config", nargs="*", default=[], help="extra Snakemake --config items")
    args = p.parse_args(argv)
    campaign = Campaign(args)
    if args.list:
        for experiment, queue in campaign.queues.items():
            for item in queue:
                print(("done " if campaign.done(item) else "todo ") + item[0])
        return 0
    lanes = [threading.Thread(target=campaign.lane, args=(lane,)) for lane in campaign.lanes]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
