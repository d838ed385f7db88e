"""Do two commits train the same numbers? One quick-scale job of each experiment (a
synthetic target, a toy method and its HMC reference, a UCI method, an image method), and
the rules with a state or a step of their own (the anchored ensemble's anchors, DLE's noise
at the curvature step), are run by Snakemake in a clone of each commit, and every array
and number they write is compared exactly (provenance and timings left out).

    python benchmarks/bit_identity.py OLD NEW --uci-data ../shared/data/uci --image-mirror ../shared/data
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

TARGETS = [
    "results/synthetic/gaussian/svgd/seed42/particles.npz",
    "results/toy/regression/hmc/seed42/predictions.npz",
    "results/toy/regression/sge-fwgd/seed42/predictions.npz",
    "results/uci/boston/drle/seed42/metrics.json",
    "results/image/fashionmnist/kde-fwgd/seed42/metrics.json",
    "results/uci/boston/anchored/seed42/metrics.json",
    "results/toy/regression/dle/seed42/predictions.npz",
]
SKIP_KEYS = ("provenance",)
SKIP_PARTS = ("seconds", "time")


def _clean(value):
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k not in SKIP_KEYS and not any(p in k for p in SKIP_PARTS)}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _same(a: Path, b: Path) -> str | None:
    """None when equal, else what differs."""
    if a.suffix == ".npz":
        x, y = np.load(a, allow_pickle=False), np.load(b, allow_pickle=False)
        keys = sorted(set(x.files) - set(SKIP_KEYS))
        if keys != sorted(set(y.files) - set(SKIP_KEYS)):
            return f"arrays {keys} vs {sorted(y.files)}"
        bad = [k for k in keys if not np.array_equal(x[k], y[k], equal_nan=x[k].dtype.kind == "f")]
        return f"arrays differ: {bad}" if bad else None
    if a.suffix == ".json":
        return None if _clean(json.loads(a.read_text())) == _clean(json.loads(b.read_text())) else "numbers differ"
    return None if a.read_bytes() == b.read_bytes() else "bytes differ"


def run(commit: str, root: Path, config: list[str]) -> Path:
    work = root / commit
    subprocess.run(["git", "clone", "-q", str(Path.cwd()), str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "checkout", "-q", commit], check=True)
    env = {**os.environ, "PYTHONPATH": str(work / "src")}
    cmd = ["snakemake", "-c2", *TARGETS, "--config", "scale=quick", *config]
    subprocess.run(cmd, cwd=work, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return work


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--uci-data", required=True)
    p.add_argument("--image-mirror", required=True)
    args = p.parse_args()
    config = [
        f"uci_data={Path(args.uci_data).resolve()}",
        f"image_data_mirror={Path(args.image_mirror).resolve()}",
        "image_data_download=false",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        old, new = (run(c, Path(tmp), config) for c in (args.old, args.new))
        differ = 0
        for target in TARGETS:
            for a in sorted((old / target).parent.iterdir()):
                if a.name == "benchmark.tsv" or ".ckpt" in a.name:
                    continue
                why = _same(a, new / a.relative_to(old))
                rel = a.relative_to(old)
                print(f"{'same' if why is None else 'DIFFERENT'}  {rel}" + ("" if why is None else f": {why}"))
                differ += why is not None
        print(f"{args.old} vs {args.new}: {'bit-identical' if not differ else f'{differ} file(s) differ'}")
        return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
