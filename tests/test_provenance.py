"""Provenance: collected without failing, stamped into result files, written beside
tables, and traced back by ``python -m repens where``."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from repens import cli
from repens.core.jobkey import job_key
from repens.jobs.provenance import collect, describe, git_state, read, sidecar_path, stamp, write_sidecar
from repens.pipeline.config import resolve_job

ROOT = Path(__file__).resolve().parents[1]


def _job(**over):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    return dict(resolve_job(config, "synthetic", "gaussian", "svgd", 42), steps=5, particles=10, **over)


def test_collect_in_this_checkout():
    job = _job()
    prov = collect(job, log_file="logs/x.log")
    assert re.fullmatch(r"[0-9a-f]{40}", prov["git_commit"]) and isinstance(prov["git_dirty"], bool)
    assert prov["job_key"] == job_key(job) and prov["scale"] == job["scale"]
    assert prov["log"] == "logs/x.log"
    for key in ("repens", "torch", "cuda", "snakemake", "device", "cpu", "host", "python"):
        assert prov[key], key


def test_collect_records_the_cpu_threads():
    import torch

    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            assert collect()["threads"] == n
    finally:
        torch.set_num_threads(threads)


def test_collect_without_git(tmp_path, monkeypatch):
    git_state.cache_clear()
    assert git_state(str(tmp_path)) == ("unknown", None)  # not a checkout
    monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
    git_state.cache_clear()
    assert git_state(str(tmp_path)) == ("unknown", None)
    monkeypatch.setenv("REPENS_GIT_COMMIT", "abc123")
    git_state.cache_clear()
    try:
        prov = collect({"scale": "quick"})
        assert prov["git_commit"] == "abc123" and prov["git_dirty"] is None and prov["scale"] == "quick"
    finally:
        git_state.cache_clear()


def test_stamp_json_and_npz_and_never_raise(tmp_path):
    js = tmp_path / "metrics.json"
    js.write_text(json.dumps({"metrics": {"accuracy": 0.9}, "job": {"scale": "quick"}}))
    assert stamp(js, {"git_commit": "c1", "log": None})
    assert stamp(js, {"log": "l.log"})  # merged over the first
    prov, job, record = read(js)
    assert prov == {"git_commit": "c1", "log": "l.log"} and job == {"scale": "quick"}
    assert record["metrics"]["accuracy"] == 0.9
    npz = tmp_path / "p.npz"
    np.savez(npz, particles=np.ones((3, 2)), job=np.array(json.dumps({"a": 1})))
    assert stamp(npz, {"git_commit": "c2"})
    with np.load(npz) as f:
        assert f["particles"].shape == (3, 2) and json.loads(str(f["provenance"])) == {"git_commit": "c2"}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert stamp(bad, {"git_commit": "c"}) is False
    assert stamp(tmp_path / "missing.npz", {"git_commit": "c"}) is False


def test_train_stamps_and_table_row_is_traced(tmp_path, capsys):
    job = _job()
    out = tmp_path / "run" / "particles.npz"
    log = tmp_path / "run.log"
    assert cli.main(["--log", str(log), "train", "--spec", json.dumps(job), "--out", str(out)]) == 0
    prov, saved_job, _ = read(out)
    assert saved_job == job and prov["job_key"] == job_key(job) and prov["log"] == str(log)
    assert re.fullmatch(r"[0-9a-f]{40}", prov["git_commit"])
    # a table over two image-style metrics files: the row's inputs are traced
    inputs = []
    for seed, acc in ((38, 0.9), (39, 0.92)):
        m = tmp_path / f"s{seed}" / "metrics.json"
        m.parent.mkdir()
        j = {"dataset": "fashionmnist", "method": "de", "seed": seed, "scale": "quick"}
        m.write_text(
            json.dumps(
                {"metrics": {"accuracy": acc}, "job": j, "provenance": collect(j, log_file=f"logs/seed{seed}.log")}
            )
        )
        inputs.append(m)
    table = tmp_path / "table1.csv"
    table.write_text("block,method\nfashionmnist,de\n")
    assert write_sidecar(table, inputs) == sidecar_path(table)
    text = describe(table, dataset="fashionmnist", method="de", metric="accuracy")
    assert "2 input file(s)" in text and "accuracy = 0.9" in text and "accuracy = 0.92" in text
    assert "logs/seed38.log" in text and prov["git_commit"] in text and '"seed": 39' in text
    assert "no input matches" in describe(table, dataset="cifar10")
    assert "no provenance sidecar" in describe(tmp_path / "other.csv")
    capsys.readouterr()
    assert cli.main(["where", str(out)]) == 0
    printed = capsys.readouterr().out
    assert prov["job_key"] in printed and str(log) in printed


@pytest.mark.skipif(not Path("/proc/self/fd/2").exists(), reason="needs /proc (Linux)")
def test_snakemake_style_log_is_found(tmp_path):
    """A job whose stderr goes to its log (``> log 2>&1``) records that log."""
    log = tmp_path / "job.log"
    code = "from repens.jobs.provenance import collect; import json, sys; print(json.dumps(collect()), file=sys.stdout)"
    with open(log, "w") as err:
        result = subprocess.run(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=tmp_path,
            env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        )
    assert result.returncode == 0
    assert json.loads(result.stdout)["log"] == "job.log"
