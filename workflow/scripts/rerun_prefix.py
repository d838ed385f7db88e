"""Rerun the first steps of a committed run and compare its first progress line with the
committed log's: how far a run made at one commit is reproduced by the code at another.

    python workflow/scripts/rerun_prefix.py reference/image/fashionmnist/de/seed38/metrics.json
    python workflow/scripts/rerun_prefix.py RUN --code ../at-a1e8d86   # the code at the run's commit

The run's stored spec (``metrics.json``: ``job``) is trained for the first ``--steps`` steps
(default: the step of the committed log's first progress line), logging there, with the
code of the checkout ``--code`` (default: this one; ``git worktree add ../at-<commit>
<commit>`` makes one at the run's recorded commit, ``provenance.git_commit``), and the two
progress lines' figures (train and held-out NLL and accuracy, model disagreement) are
printed side by side with the largest relative difference. The image data must be prepared
(``data/images/<dataset>.npz`` and the OOD set's; any Snakemake run of an image job makes
them). Reads the run's files as data: nothing in them is executed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

FIGURES = ("train_nll", "train_acc", "monitor_nll", "monitor_acc", "monitor_md")
LINE = re.compile(r"step (\d+)/\d+ .*")


def progress(log: Path, step: int | None = None) -> tuple[int, dict[str, float]]:
    """(step, figures) of the log's first progress line (at ``step`` if given)."""
    for line in log.read_text(errors="replace").splitlines():
        match = LINE.search(line)
        if match and (step is None or int(match.group(1)) == step):
            figures = dict(re.findall(r"(\w+)=([-+0-9.eE]+)", line))
            return int(match.group(1)), {k: float(figures[k]) for k in FIGURES if k in figures}
    raise SystemExit(f"error: {log}: no progress line{'' if step is None else f' at step {step}'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a committed run's metrics.json")
    p.add_argument("--log", type=Path, help="its log (default: the one its provenance names, under reference/)")
    p.add_argument("--steps", type=int, help="steps to rerun (default: the log's first progress step)")
    p.add_argument("--code", type=Path, default=Path("."), help="the checkout whose code reruns it")
    p.add_argument("--data", type=Path, default=Path("data/images"), help="the prepared image data")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    stored = json.loads(args.run.read_text())
    spec, provenance = stored["job"], stored.get("provenance", {})
    if spec.get("experiment") != "image":
        raise SystemExit(f"error: {args.run}: an image run is needed (experiment {spec.get('experiment')!r})")
    log = args.log or Path("reference") / provenance["log"]
    step, committed = progress(log, args.steps)
    inputs = {"train": args.data / f"{spec['dataset']}.npz", "ood": args.data / f"{spec['ood']}.npz"}
    for path in inputs.values():
        if not path.is_file():
            raise SystemExit(f"error: {path} is missing: prepare the image data first (docs/running.md)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "metrics.json"
        command = [
            sys.executable, "-m", "repens", "--threads", str(args.threads), "train",
            "--spec", json.dumps({**spec, "steps": step}),
            "--runtime", json.dumps({"log_every": step, "checkpoint_seconds": 10**9}),
            "--out", str(out), "--device", args.device,
            *[f"--input={k}={v.resolve()}" for k, v in inputs.items()],
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str((args.code / "src").resolve())}
        done = subprocess.run(command, cwd=args.code, env=env, capture_output=True, text=True)
        rerun_log = Path(tmp) / "rerun.log"
        rerun_log.write_text(done.stdout + done.stderr)
        if done.returncode:
            print(rerun_log.read_text()[-3000:], file=sys.stderr)
            raise SystemExit(f"error: the rerun failed (exit {done.returncode})")
        _, rerun = progress(rerun_log, step)
    print(f"{args.run}: made at {provenance.get('git_commit', '?')[:7]} on {provenance.get('device', '?')}")
    print(f"step {step}: figure, committed log, rerun with the code in {args.code.resolve()}")
    worst = 0.0
    for key in FIGURES:
        if key in committed and key in rerun:
            rel = abs(rerun[key] - committed[key]) / max(abs(committed[key]), 1e-12)
            worst = max(worst, rel)
            print(f"  {key:12s} {committed[key]:<12.6g} {rerun[key]:<12.6g} {rel:.1e}")
    same = all(rerun.get(k) == v for k, v in committed.items())
    print("equal to every logged digit" if same else f"largest relative difference {worst:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
