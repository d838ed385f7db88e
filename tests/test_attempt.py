"""One attempt at a job (repens.training.attempt): the lock that stops a duplicate from training
over a running job, the log kept across attempts, the check of a granted GPU."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from repens import cli
from repens.pipeline.config import resolve_job
from repens.training.attempt import GpuUnusable, JobBusy, check_granted_gpu, granted_gpus, job_lock

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
LOG = logging.getLogger("test.attempt")

HOLD = """
import sys, time, logging
from repens.training.attempt import job_lock
with job_lock(sys.argv[1], logging.getLogger("x"), refresh_seconds=0.05):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.fixture()
def holder(tmp_path):
    """Another process holding the lock of ``tmp_path/out.json``."""
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "held"
    yield out, proc
    proc.kill()
    proc.wait()


def test_a_live_holder_stops_a_second_attempt_with_one_line(holder):
    out, proc = holder
    with pytest.raises(JobBusy) as err:
        with job_lock(out, LOG):
            pytest.fail("took a lock that a live process holds")
    text = str(err.value)
    assert "\n" not in text and f"pid {proc.pid}" in text and socket.gethostname() in text and "not training" in text


def test_the_holder_refreshes_the_lock_while_it_runs(holder):
    out, _ = holder
    lock = out.with_name(out.name + ".lock")
    first = lock.stat().st_mtime
    deadline = time.time() + 10
    while lock.stat().st_mtime == first and time.time() < deadline:
        time.sleep(0.05)
    assert lock.stat().st_mtime > first


def test_a_dead_holders_lock_is_taken_over_in_one_line(holder, caplog):
    out, proc = holder
    proc.kill()
    proc.wait()
    assert out.with_name(out.name + ".lock").exists()  # SIGKILL left it behind
    with caplog.at_level(logging.WARNING):
        with job_lock(out, LOG):
            pass
    (line,) = [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]
    assert f"pid {proc.pid}" in line
    assert not out.with_name(out.name + ".lock").exists()  # released on exit


@pytest.mark.parametrize("age, busy", [(10.0, True), (3600.0, False)])
def test_another_hosts_lock_holds_until_it_goes_stale(tmp_path, age, busy):
    out = tmp_path / "out.json"
    lock = out.with_name(out.name + ".lock")
    lock.write_text(json.dumps({"host": "node-elsewhere", "pid": 1, "slurm_job_id": "4242"}))
    os.utime(lock, (time.time() - age, time.time() - age))
    if busy:
        with pytest.raises(JobBusy, match="node-elsewhere, pid 1, SLURM job 4242"):
            with job_lock(out, LOG):
                pass
    else:
        with job_lock(out, LOG):
            assert json.loads(lock.read_text())["pid"] == os.getpid()


def test_a_duplicate_train_command_refuses_to_train_over_a_running_one(holder, capsys):
    """The training command of a job whose lock a live attempt holds exits non-zero with
    one line, writes nothing and leaves the holder's files alone."""
    out, proc = holder
    job = resolve_job(dict(CONFIG, scale="quick"), "synthetic", "gaussian", "svgd", 42)
    job.update(particles=4, steps=3)
    ckpt = out.with_name(out.name + ".ckpt")
    ckpt.write_bytes(b"the holder's checkpoint")
    assert cli.main(["train", "--spec", json.dumps(job), "--out", str(out)]) == 75
    (message,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "another attempt is running this job" in message and f"pid {proc.pid}" in message
    assert not out.exists() and ckpt.read_bytes() == b"the holder's checkpoint"


def test_each_attempts_log_is_kept(tmp_path):
    """Snakemake deletes a job's log before each attempt; --attempts keeps every one."""
    job = resolve_job(dict(CONFIG, scale="quick"), "synthetic", "gaussian", "svgd", 42)
    job.update(particles=4, steps=3, log_every=1)
    attempts = tmp_path / "job.attempts.log"
    out = tmp_path / "particles.npz"
    for _ in range(2):
        out.unlink(missing_ok=True)
        for stale in tmp_path.glob("particles.npz.*"):
            stale.unlink()
        assert cli.main(["--attempts", str(attempts), "train", "--spec", json.dumps(job), "--out", str(out)]) == 0
    text = attempts.read_text()
    assert text.count("attempt: train") == 2 and text.count("wrote") >= 2


@pytest.mark.parametrize(
    "env, granted",
    [
        ({}, None),
        ({"SLURM_GPUS_ON_NODE": "0"}, None),
        ({"SLURM_JOB_GPUS": "(null)"}, None),
        ({"SLURM_JOB_GPUS": "0"}, ("SLURM_JOB_GPUS", "0")),
        ({"SLURM_STEP_GPUS": "1,3"}, ("SLURM_STEP_GPUS", "1,3")),
        ({"SLURM_GPUS_ON_NODE": "2"}, ("SLURM_GPUS_ON_NODE", "2")),
    ],
)
def test_granted_gpus_reads_slurms_variables(env, granted):
    assert granted_gpus(env) == granted


def test_a_granted_gpu_torch_cannot_see_stops_the_job_in_one_line(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(GpuUnusable) as err:
        check_granted_gpu("auto", {"SLURM_JOB_GPUS": "0"})
    assert "\n" not in str(err.value) and "SLURM_JOB_GPUS=0" in str(err.value)
    check_granted_gpu("cpu", {"SLURM_JOB_GPUS": "0"})  # asked for the CPU: its choice
    check_granted_gpu("auto", {})  # no GPU granted: the CPU is right
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    check_granted_gpu("auto", {"SLURM_JOB_GPUS": "0"})


def test_a_duplicate_hmc_or_stack_command_refuses_too(holder, capsys):
    """The HMC sampler and a seed stack hold the same locks as a train job."""
    out, proc = holder
    assert cli.main(["hmc", "--spec", "{}", "--out", str(out)]) == 75
    stack = resolve_job(CONFIG, "image", "fashionmnist", "de", 38)
    assert cli.main(["train-stack", "--spec", json.dumps(stack), "--out", str(out), "--device", "cpu"]) == 75
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 2 and all("another attempt is running this job" in line for line in lines)
    assert not out.exists()


def test_a_lock_of_bytes_that_are_not_utf8_is_taken_over_saying_why(tmp_path, caplog):
    out = tmp_path / "out.json"
    lock = out.with_name(out.name + ".lock")
    lock.write_bytes(b'{"host": "\xff\xfe", "pid": 1}')
    with caplog.at_level(logging.WARNING):
        with job_lock(out, LOG):
            assert json.loads(lock.read_text())["pid"] == os.getpid()
    (line,) = [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]
    assert "unreadable" in line and str(lock) in line


def test_a_long_stale_lock_naming_a_live_pid_of_this_host_is_taken_over(tmp_path, caplog):
    """A pid alive again (reused) does not keep a lock that nobody refreshed for two days."""
    out = tmp_path / "out.json"
    lock = out.with_name(out.name + ".lock")
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getppid()}))
    os.utime(lock, (time.time() - 2 * 86400, time.time() - 2 * 86400))
    with caplog.at_level(logging.WARNING):
        with job_lock(out, LOG):
            assert json.loads(lock.read_text())["pid"] == os.getpid()
    (line,) = [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]
    assert "not refreshed for" in line


def test_a_lock_being_written_holds(tmp_path):
    out = tmp_path / "out.json"
    out.with_name(out.name + ".lock").write_bytes(b"")
    with pytest.raises(JobBusy):
        with job_lock(out, LOG):
            pass
