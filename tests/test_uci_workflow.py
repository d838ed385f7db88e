"""The UCI rules: grouping (one job per dataset and method), data root, quick settings."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from test_workflow import CONFIG, jobs, snakemake

pytestmark = pytest.mark.slow  # every test starts Snakemake: second stage of .ci/run

UCI = CONFIG["experiments"]["uci"]


def test_dry_run_table2_from_a_mirror(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "yacht" / "data").mkdir(parents=True)
    (mirror / "yacht" / "data" / "data.txt").write_text("0 1\n")
    config = json.loads(json.dumps(CONFIG))
    config["experiments"]["uci"]["datasets"] = {"yacht": UCI["datasets"]["yacht"]}
    config["uci_data"] = str(mirror)
    rc, out = snakemake(tmp_path, "-n", "-p", "results/table2_uci.tex", config=config)
    assert rc == 0, out
    assert jobs(out) == {"train_uci": len(UCI["methods"]), "summarize_uci": 1}  # no download: the mirror has it
    specs = [json.loads(s) for s in re.findall(r"train --spec '(\{.*?\})'", out)]
    runtimes = [json.loads(s) for s in re.findall(r"--runtime '(\{.*?\})'", out)]
    assert {s["method"] for s in specs} == set(UCI["methods"])
    assert all(s["splits"] == 2 and s["steps"] == 200 and "uci_data" not in s for s in specs)
    assert len(runtimes) == len(specs) and all(r["uci_data"] == str(mirror) for r in runtimes)


def test_dry_run_downloads_when_no_data(tmp_path):
    rc, out = snakemake(tmp_path, "-n", "-p", "results/table2_uci.tex", "--config", "scale=paper")
    assert rc == 0, out
    n_data, n_methods = len(UCI["datasets"]), len(UCI["methods"])
    assert jobs(out) == {"download_uci": n_data, "train_uci": n_data * n_methods, "summarize_uci": 1}
    assert "uci-download --root data/.roots/uci --name naval-propulsion-plant" in out
    specs = [json.loads(s) for s in re.findall(r"train --spec '(\{.*?\})'", out)]
    assert all("splits" not in s and "steps" not in s for s in specs)  # paper: all splits, n_epochs.txt


def test_new_timestamps_on_the_data_retrain_only_what_no_checksum_pins(tmp_path, monkeypatch):
    """A copied or re-mounted mirror has new timestamps; every job checks a standard
    dataset's SHA-256, so its data.txt is ancient() and a finished job is not retrained.
    With the check off (REPENS_UCI_VERIFY=0, a copy of your own) the timestamp counts."""
    mirror = tmp_path / "mirror"
    data = mirror / "yacht" / "data" / "data.txt"
    data.parent.mkdir(parents=True)
    data.write_text("0 1\n")
    config = json.loads(json.dumps(CONFIG))
    config["uci_data"] = str(mirror)
    target = "results/uci/yacht/de/seed42/metrics.json"
    (tmp_path / target).parent.mkdir(parents=True)
    (tmp_path / target).write_text("{}")
    os.utime(data, (time.time() + 60, time.time() + 60))  # the data now newer than the result
    rc, out = snakemake(tmp_path, "-n", target, config=config)
    assert rc == 0, out
    assert "Nothing to be done" in out, out
    monkeypatch.setenv("REPENS_UCI_VERIFY", "0")
    rc, out = snakemake(tmp_path, "-n", target, config=config)
    assert rc == 0, out
    assert jobs(out) == {"train_uci": 1}
