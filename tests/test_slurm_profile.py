"""profiles/slurm: `snakemake --profile slurm` from the repository root, and the checks
that turn profile mistakes into errors saying what to change.

No SLURM here: dry runs only (tests/slurm/run.sh runs the profile on a real cluster).
A fake `sinfo` stands in for a cluster whose partition `main` has no GPUs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("snakemake_executor_plugin_slurm")

ROOT = Path(__file__).resolve().parents[1]
TRAINING_RULES = {"train_synthetic", "train_toy", "train_image", "train_uci"}


def snakemake(workdir: Path, *args: str, path: str | None = None):
    """``snakemake --profile slurm -n`` run from the repository root (as a user types it)."""
    (workdir / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    if path is not None:
        env["PATH"] = path
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "slurm", "-n", "-d", str(workdir), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=180, env=env,
    )
    return proc.returncode, proc.stdout + proc.stderr


def resources_by_rule(output: str) -> dict[str, set[str]]:
    """rule -> the distinct 'resources:' lines of its jobs in a dry run."""
    found: dict[str, set[str]] = {}
    for block in re.split(r"^rule ", output, flags=re.M)[1:]:
        name = block.split(":", 1)[0]
        match = re.search(r"^\s+resources: (.*)$", block, re.M)
        found.setdefault(name, set()).add(match[1] if match else "")
    return found


def fake_sinfo(tmp_path: Path, lines: str) -> str:
    """A PATH whose `sinfo` prints ``lines`` (format %R|%G: partition|GRES)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sinfo = bin_dir / "sinfo"
    sinfo.write_text(f"#!/bin/sh\ncat <<'EOF'\n{lines}\nEOF\n")
    sinfo.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_profile_resolves_from_the_repository_root():
    assert (ROOT / "slurm").resolve() == (ROOT / "profiles" / "slurm").resolve()
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["executor"] == "slurm"
    default = yaml.safe_load((ROOT / "profiles" / "default" / "config.yaml").read_text())
    assert "executor" not in default


def test_plan_has_gpus_on_training_jobs_only(tmp_path):
    # the default target plus Table 2 (not part of `all`), so every training rule is planned
    rc, out = snakemake(tmp_path, "all", "results/table2_uci.tex")
    assert rc == 0, out
    found = resources_by_rule(out)
    gpu_rules = {rule for rule, lines in found.items() if any("gpu=1" in line for line in lines)}
    assert gpu_rules == TRAINING_RULES, found
    for rule in TRAINING_RULES:
        (line,) = found[rule]
        assert "slurm_partition=gpu" in line and "--signal=TERM@300" in line, line
        assert re.search(r"\bmem_mb=\d+", line) and re.search(r"\bruntime=\d+", line), line


def test_unknown_rule_in_set_resources_says_what_to_change(tmp_path):
    rc, out = snakemake(tmp_path, "--set-resources", "train_imag:gpu=1")
    assert rc != 0
    assert "set-resources/set-threads name rules this workflow does not have: train_imag" in out, out
    assert "profiles/slurm/config.yaml" in out


def test_gpu_on_a_partition_without_gpus_says_what_to_change(tmp_path):
    path = fake_sinfo(tmp_path, "main|(null)\ngpu|gpu:2")
    rc, out = snakemake(tmp_path, "--set-resources", "train_toy:gpu=1", "train_toy:slurm_partition='main'", path=path)
    assert rc != 0
    assert "rule train_toy asks for a GPU on partition 'main', whose nodes have no GPUs" in out, out
    assert "to a GPU partition (gpu)" in out, out


def test_unknown_partition_says_what_to_change(tmp_path):
    path = fake_sinfo(tmp_path, "main|(null)\ngpu|gpu:2")
    rc, out = snakemake(tmp_path, "--set-resources", "train_toy:gpu=1", "train_toy:slurm_partition='gpus'", path=path)
    assert rc != 0
    assert "rule train_toy asks for partition 'gpus', which this cluster does not have" in out, out


def test_gpu_partition_passes_the_check(tmp_path):
    path = fake_sinfo(tmp_path, "main|(null)\ngpu|gpu:2")
    rc, out = snakemake(tmp_path, path=path)
    assert rc == 0, out
