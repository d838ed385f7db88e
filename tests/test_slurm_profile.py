"""profiles/slurm: `snakemake --profile slurm` from the repository root, and the checks
that turn profile mistakes into errors saying what to change.

No SLURM here: dry runs only (tests/slurm/run.sh runs the profile on a real cluster).
Every run sees a PATH with no real SLURM client on it, whatever the host has installed.
A "cluster" is a directory of fake clients: `sinfo` lists a partition `main` without
GPUs and one `gpu` with them; `sacct`, `squeue` and `scontrol` answer empty (the SLURM
executor plugin asks for them, and refuses to load where `sinfo` exists without
`sacct` or `squeue`); the clients that submit or cancel jobs fail. Every fake logs
its arguments, so each test checks which clients were called.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # every test starts Snakemake: second stage of .ci/run

# Not imported here: importing the plugin runs the host's SLURM clients (`which sinfo`,
# `scontrol show config`); only the snakemake runs below, on their own PATH, load it.
if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
    pytest.skip("snakemake-executor-plugin-slurm is not installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
GPU_RULES = {"train_image"}  # only Table 1's image training uses a GPU
CPU_RULES = {"train_synthetic", "train_toy", "train_uci", "sample_hmc"}  # the rest of SLURM's jobs


def snakemake(workdir: Path, *args: str, path: str):
    """``snakemake --profile slurm -n`` run from the repository root (as a user types it),
    with ``path`` as PATH (from `no_slurm_path` or `fake_cluster`)."""
    (workdir / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = path
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "slurm", "-n", "-d", str(workdir), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
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


# Every SLURM client (what the plugin or the workflow may run, and the rest of the suite).
SLURM_CLIENTS = (
    "sacct",
    "sacctmgr",
    "salloc",
    "sattach",
    "sbatch",
    "sbcast",
    "scancel",
    "scontrol",
    "scrontab",
    "sdiag",
    "seff",
    "sinfo",
    "sprio",
    "squeue",
    "sreport",
    "srun",
    "sshare",
    "sstat",
    "strigger",
    "sview",
)
# What a dry run may ask of a cluster; every other client fails if called.
FAKE_ANSWERS = {
    "sinfo": "main|(null)\ngpu|gpu:2",  # %R|%G: partition|GRES of its nodes
    "sacct": "",
    "squeue": "",
    "scontrol": "",
}


def no_slurm_path(tmp_path: Path) -> str:
    """The host's PATH with every SLURM client taken off it: a directory holding one
    is replaced by a copy of it (symlinks) without them, so `sh`, `which` & co. stay."""
    dirs = []
    for i, entry in enumerate(os.environ["PATH"].split(os.pathsep)):
        folder = Path(entry or ".")
        if not any((folder / name).exists() for name in SLURM_CLIENTS):
            dirs.append(entry)
            continue
        copy = tmp_path / f"path-without-slurm-{i}"
        copy.mkdir(parents=True)
        for item in folder.iterdir():
            if item.name not in SLURM_CLIENTS:
                (copy / item.name).symlink_to(item)
        dirs.append(str(copy))
    path = os.pathsep.join(dirs)
    for name in SLURM_CLIENTS:
        assert shutil.which(name, path=path) is None, name
    return path


def fake_cluster(tmp_path: Path, **answers: str) -> tuple[str, Path]:
    """(PATH with the fake clients first and no real ones, the log of their calls);
    ``answers`` replace :data:`FAKE_ANSWERS` entries (say another ``sinfo``)."""
    answers = {**FAKE_ANSWERS, **answers}
    bin_dir = tmp_path / "fake-slurm"
    bin_dir.mkdir()
    log = tmp_path / "slurm-calls.log"
    log.touch()
    for name in SLURM_CLIENTS:
        if name in answers:
            answer = f"cat <<'EOF'\n{answers[name]}\nEOF\n" if answers[name] else ""
        else:
            answer = f"echo 'fake SLURM: {name} must not run in a dry run' >&2\nexit 1\n"
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n{answer}')
        script.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{no_slurm_path(tmp_path)}", log


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_profile_resolves_from_the_repository_root():
    assert (ROOT / "slurm").resolve() == (ROOT / "profiles" / "slurm").resolve()
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["executor"] == "slurm"
    default = yaml.safe_load((ROOT / "profiles" / "default" / "config.yaml").read_text())
    assert "executor" not in default


def planned(output: str) -> Counter:
    """Job counts by rule of a dry run (its "Job stats" table)."""
    stats = output.split("Job stats:", 1)[1].split("\ntotal", 1)[0]
    return Counter({m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M)})


def scales(output: str) -> set[str]:
    """The scales named by the training jobs' specs in a dry run's shell commands."""
    return set(re.findall(r'"scale": "(\w+)"', output))


def test_profile_plans_the_paper_table2_and_scorecard_included(tmp_path):
    """`snakemake --profile slurm` is the paper: its scale (profiles/slurm/paper.yaml),
    Table 2 in the default target, the scorecard after it; --config keys given on the
    command line keep the scale, and scale=quick still asks for the quick grid."""
    path, _ = fake_cluster(tmp_path)
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    uci = config["experiments"]["uci"]
    rc, out = snakemake(tmp_path, path=path)
    assert rc == 0, out
    jobs = planned(out)
    assert scales(out) == {"paper"}, scales(out)
    # Table 2: one job per (dataset, method, seed), every split inside it
    uci_seeds = len(uci.get("seeds") or [42])
    assert jobs["train_uci"] == len(uci["datasets"]) * len(uci["methods"]) * uci_seeds, jobs
    assert jobs["summarize_uci"] == 1 and jobs["download_uci"] == len(uci["datasets"]), jobs
    assert re.search(r"^rule summarize_claims:\n\s+input:.*results/table2_uci\.csv", out, re.M), out
    # every paper-scale image job: each dataset's methods x the paper's seeds
    image = config["experiments"]["image"]
    seeds = image.get("seeds") or config["seeds"]
    assert jobs["train_image"] >= len(image["datasets"]) * len(image["methods"]) * len(seeds), jobs
    # a key of one's own on the command line keeps the paper's scale
    rc, out = snakemake(tmp_path, "--config", "device=cpu", path=path)
    assert rc == 0 and scales(out) == {"paper"} and planned(out) == jobs, out
    rc, out = snakemake(tmp_path, "--config", "scale=quick", path=path)
    assert rc == 0 and scales(out) == {"quick"} and "train_uci" not in planned(out), out


def test_dry_run_without_slurm_says_so_in_one_line(tmp_path):
    line = "No SLURM here (no sbatch on PATH): the plan is what the slurm profile would submit"
    rc, out = snakemake(tmp_path, path=no_slurm_path(tmp_path))
    assert rc == 0, out
    assert out.count(line) == 1, out
    (tmp_path / "cluster").mkdir()
    rc, out = snakemake(tmp_path, path=fake_cluster(tmp_path / "cluster")[0])
    assert rc == 0 and line not in out, out


def test_plan_has_gpus_on_image_jobs_only(tmp_path):
    # the default target (Table 2 included at the profile's paper scale): every training rule
    rc, out = snakemake(tmp_path, "all", path=no_slurm_path(tmp_path))
    assert rc == 0, out
    found = resources_by_rule(out)
    gpu_rules = {rule for rule, lines in found.items() if any(re.search(r"\bgpu=|gres=", line) for line in lines)}
    assert gpu_rules == GPU_RULES, found
    for rule in GPU_RULES:
        (line,) = found[rule]
        assert "gpu=1" in line and "slurm_partition=gpu" in line and "--signal=TERM@300" in line, line
        assert re.search(r"\bmem_mb=\d+", line) and re.search(r"\bruntime=\d+", line), line
    for rule in CPU_RULES:
        (line,) = found[rule]
        assert "slurm_partition=main" in line and "--signal=TERM@300" in line, (rule, line)
        assert "gpu" not in line.replace("slurm_partition=main", ""), (rule, line)
        assert re.search(r"\bmem_mb=\d+", line) and re.search(r"\bruntime=\d+", line), line


def test_gres_variant_passes_and_is_checked(tmp_path):
    path, log = fake_cluster(tmp_path)
    # the documented variant: `gres: "gpu:1"` in place of `gpu: 1` (a rule's entry on the
    # command line replaces the profile's whole entry for it)
    rc, out = snakemake(
        tmp_path, "--set-resources", "train_image:gres='gpu:1'", "train_image:slurm_partition='gpu'", path=path
    )
    assert rc == 0, out
    (line,) = resources_by_rule(out)["train_image"]
    assert "gres=gpu:1" in line and "slurm_partition=gpu" in line, line
    assert "sinfo --noheader --format=%R|%G" in calls(log), calls(log)
    # a GRES GPU on a partition without GPUs is caught like `gpu`
    rc, out = snakemake(
        tmp_path, "--set-resources", "train_image:gres='gpu:1'", "train_image:slurm_partition='main'", path=path
    )
    assert rc != 0
    assert "rule train_image asks for a GPU on partition 'main', whose nodes have no GPUs" in out, out
    assert "or remove its `gres`" in out, out


def test_gpu_twice_or_malformed_gres_says_what_to_change(tmp_path):
    path = no_slurm_path(tmp_path)
    rc, out = snakemake(tmp_path, "--set-resources", "train_image:gpu=1", "train_image:gres='gpu:1'", path=path)
    assert rc != 0
    assert "rule train_image asks for a GPU twice, as `gpu` and as `gres`; keep one" in out, out
    rc, out = snakemake(tmp_path, "--set-resources", "train_image:gres='gpu 1'", path=path)
    assert rc != 0
    assert "rule train_image, gres 'gpu 1', is not name[:type][:count]" in out, out


def test_missing_cpu_partition_says_what_to_change(tmp_path):
    path, _ = fake_cluster(tmp_path)
    rc, out = snakemake(
        tmp_path, "--default-resources", "slurm_partition='cpu'", "mem_mb=2000", "runtime=60", path=path
    )
    assert rc != 0
    assert "default-resources asks for partition 'cpu', which this cluster does not have" in out, out


def test_unknown_rule_in_set_resources_says_what_to_change(tmp_path):
    rc, out = snakemake(tmp_path, "--set-resources", "train_imag:gpu=1", path=no_slurm_path(tmp_path))
    assert rc != 0
    assert "set-resources/set-threads name rules this workflow does not have: train_imag" in out, out
    assert "profiles/slurm/config.yaml" in out


def test_gpu_on_a_partition_without_gpus_says_what_to_change(tmp_path):
    path, log = fake_cluster(tmp_path)
    rc, out = snakemake(tmp_path, "--set-resources", "train_toy:gpu=1", "train_toy:slurm_partition='main'", path=path)
    assert rc != 0
    assert "rule train_toy asks for a GPU on partition 'main', whose nodes have no GPUs" in out, out
    assert "to a GPU partition (gpu)" in out, out
    assert "sinfo --noheader --format=%R|%G" in calls(log), calls(log)
    assert {call.split()[0] for call in calls(log)} <= set(FAKE_ANSWERS), calls(log)


def test_unknown_partition_says_what_to_change(tmp_path):
    path, log = fake_cluster(tmp_path)
    rc, out = snakemake(tmp_path, "--set-resources", "train_toy:gpu=1", "train_toy:slurm_partition='gpus'", path=path)
    assert rc != 0
    assert "rule train_toy asks for partition 'gpus', which this cluster does not have" in out, out
    assert "sinfo --noheader --format=%R|%G" in calls(log), calls(log)
    assert {call.split()[0] for call in calls(log)} <= set(FAKE_ANSWERS), calls(log)


def test_gpu_partition_passes_the_check(tmp_path):
    path, log = fake_cluster(tmp_path)
    rc, out = snakemake(tmp_path, path=path)
    assert rc == 0, out
    assert "GPU partitions not checked" not in out, out
    assert "sinfo --noheader --format=%R|%G" in calls(log), calls(log)
    assert {call.split()[0] for call in calls(log)} <= set(FAKE_ANSWERS), calls(log)


def test_gpu_shares_pass_where_the_cluster_has_them_and_are_checked(tmp_path):
    """The documented sharing variants, `gres: "shard:1"` and `gres: "mps:25"`."""
    sharded = "main|(null)\ngpu|gpu:h100:4(S:0-1),shard:32\nmps|gpu:2,mps:200"
    path, log = fake_cluster(tmp_path, sinfo=sharded)
    for gres, partition in (("shard:1", "gpu"), ("mps:25", "mps")):
        rc, out = snakemake(
            tmp_path,
            "--set-resources",
            f"train_image:gres='{gres}'",
            f"train_image:slurm_partition='{partition}'",
            path=path,
        )
        assert rc == 0, out
        (line,) = resources_by_rule(out)["train_image"]
        assert f"gres={gres}" in line and f"slurm_partition={partition}" in line and "gpu=" not in line, line
    assert "sinfo --noheader --format=%R|%G" in calls(log), calls(log)
    # the shipped fake cluster's GPUs have no shards: said before anything is submitted
    (tmp_path / "plain").mkdir()
    rc, out = snakemake(
        tmp_path,
        "--set-resources",
        "train_image:gres='shard:1'",
        "train_image:slurm_partition='gpu'",
        path=fake_cluster(tmp_path / "plain")[0],
    )
    assert rc != 0
    assert (
        "rule train_image asks for a GPU shard (gres shard) on partition 'gpu', whose nodes have no shard GRES" in out
    ), out
    # a whole GPU and a shard of one: one request too many
    rc, out = snakemake(
        tmp_path,
        "--set-resources",
        "train_image:gpu=1",
        "train_image:gres='shard:1'",
        path=no_slurm_path(tmp_path / "none"),
    )
    assert rc != 0
    assert "rule train_image asks for a GPU twice, as `gpu` and as `gres`" in out, out
