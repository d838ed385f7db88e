"""Checkpoints and reusable intermediate results carry the key of the settings that made
them: a job killed under one setting and rerun under another gives a clean run's
result (bit-identical) and says in one log line that the old state was set aside; a
rerun under the same settings still resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import repens.training.fitting as fitting
from repens.core.jobkey import job_key
from repens.experiments.image import run_image
from repens.experiments.synthetic import run_synthetic
from repens.experiments.uci import run_uci
from repens.pipeline.config import resolve_job

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from rule_hooks import Hooked  # noqa: E402

CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())


def crash_at(monkeypatch, n):
    """The n-th update step of the process raises KeyboardInterrupt (a kill)."""
    real = fitting.build
    calls = {"n": 0}

    def count(_):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt

    monkeypatch.setattr(fitting, "build", lambda *args, **kwargs: Hooked(real(*args, **kwargs), count))
    return lambda: monkeypatch.setattr(fitting, "build", real)


def set_aside_lines(caplog):
    return [r.getMessage() for r in caplog.records if "made under other settings" in r.getMessage()]


def test_job_key_ignores_runtime_fields_only():
    job = {"lr": 0.1, "steps": 10, "seed": 1}
    assert job_key(job) == job_key({**job, "log_every": 3, "checkpoint_seconds": 1, "label": "X", "uci_data": "/d"})
    assert job_key(job) == job_key(dict(reversed(list(job.items()))))
    assert job_key(job) != job_key({**job, "lr": 0.05})
    assert job_key(job, "split", 0) != job_key(job, "split", 1)


# ------------------------------------------------------------------ synthetic
def synthetic_job(**extra):
    cfg = dict(CONFIG, scale="quick")
    job = resolve_job(cfg, "synthetic", "gaussian", "sge-wgd", 42)
    job.update(particles=20, steps=40, log_every=10, **extra)
    return job


@pytest.mark.parametrize("new_lr", [0.05, 0.1])
def test_synthetic_rerun_after_kill(tmp_path, monkeypatch, caplog, new_lr):
    monkeypatch.setenv("REPENS_CHECKPOINT_SECONDS", "0")
    clean = tmp_path / "clean" / "particles.npz"
    clean.parent.mkdir()
    run_synthetic(synthetic_job(lr=new_lr), clean, clean.with_name("ckpt"))

    out = tmp_path / "killed" / "particles.npz"
    out.parent.mkdir()
    ckpt = out.with_name("ckpt")
    restore = crash_at(monkeypatch, 25)
    with pytest.raises(KeyboardInterrupt):
        run_synthetic(synthetic_job(lr=0.1), out, ckpt)
    restore()
    assert ckpt.exists()
    with caplog.at_level("INFO"):
        run_synthetic(synthetic_job(lr=new_lr), out, ckpt)
    np.testing.assert_array_equal(np.load(out)["particles"], np.load(clean)["particles"])
    if new_lr == 0.1:  # same settings: resumed
        assert f"resumed from {ckpt} at step 24/40" in caplog.text and not set_aside_lines(caplog)
    else:
        (line,) = set_aside_lines(caplog)
        assert str(ckpt) in line and "starting from step 0" in line and "resumed" not in caplog.text
        assert ckpt.with_name("ckpt.stale").exists()


# ------------------------------------------------------------------ UCI
def test_uci_rerun_after_kill_with_other_lr(tmp_path, monkeypatch, caplog):
    from test_uci import UCI_FOLDERS, tiny_job, write_dataset

    monkeypatch.setenv("REPENS_UCI_VERIFY", "0")  # a stand-in, not the registry's bostonHousing
    write_dataset(tmp_path, name=UCI_FOLDERS["boston"])
    monkeypatch.setenv("REPENS_CHECKPOINT_SECONDS", "0")
    clean = tmp_path / "clean" / "metrics.json"
    run_uci(tiny_job("drle", tmp_path, lr=0.02), clean, clean.with_name("metrics.json.ckpt"))

    out = tmp_path / "killed" / "metrics.json"
    ckpt = out.with_name("metrics.json.ckpt")
    restore = crash_at(monkeypatch, 3)  # the stack of both splits killed at step 3 of 4
    with pytest.raises(KeyboardInterrupt):
        run_uci(tiny_job("drle", tmp_path), out, ckpt)
    restore()
    assert ckpt.exists() and not out.with_name("split0.json").exists()
    with caplog.at_level("INFO"):
        run_uci(tiny_job("drle", tmp_path, lr=0.02), out, ckpt)
    a, b = json.loads(clean.read_text()), json.loads(out.read_text())
    assert a["splits"] == b["splits"]
    (line,) = set_aside_lines(caplog)
    assert "metrics.json.ckpt" in line and "starting from step 0" in line


def test_uci_split_results_of_other_settings_are_set_aside(tmp_path, caplog, monkeypatch):
    from test_uci import UCI_FOLDERS, tiny_job, write_dataset

    monkeypatch.setenv("REPENS_UCI_VERIFY", "0")  # a stand-in, not the registry's bostonHousing
    write_dataset(tmp_path, name=UCI_FOLDERS["boston"])
    clean = tmp_path / "clean" / "metrics.json"
    run_uci(tiny_job("de", tmp_path, lr=0.02), clean)
    out = tmp_path / "other" / "metrics.json"
    run_uci(tiny_job("de", tmp_path), out)
    with caplog.at_level("INFO"):
        run_uci(tiny_job("de", tmp_path, lr=0.02), out)
    assert json.loads(clean.read_text())["splits"] == json.loads(out.read_text())["splits"]
    lines = set_aside_lines(caplog)
    assert len(lines) == 2 and all("training split" in line for line in lines), caplog.text


def test_uci_kill_between_split_files_ends_as_uninterrupted(tmp_path, monkeypatch):
    """The stack's checkpoint stays until every split file is written: a rerun after a kill
    in between trains nothing new and writes the same results."""
    import repens.experiments.uci as uci_mod
    from test_uci import UCI_FOLDERS, tiny_job, write_dataset

    monkeypatch.setenv("REPENS_UCI_VERIFY", "0")  # a stand-in, not the registry's bostonHousing
    write_dataset(tmp_path, name=UCI_FOLDERS["boston"])
    monkeypatch.setenv("REPENS_CHECKPOINT_SECONDS", "0")
    clean = tmp_path / "clean" / "metrics.json"
    run_uci(tiny_job("dle", tmp_path), clean, clean.with_name("metrics.json.ckpt"))
    out = tmp_path / "killed" / "metrics.json"
    ckpt = out.with_name("metrics.json.ckpt")
    real = uci_mod.write_json_atomic

    def write_then_die(path, *args, **kwargs):
        real(path, *args, **kwargs)
        if path.name == "split0.json":
            raise KeyboardInterrupt

    monkeypatch.setattr(uci_mod, "write_json_atomic", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        run_uci(tiny_job("dle", tmp_path), out, ckpt)
    monkeypatch.setattr(uci_mod, "write_json_atomic", real)
    assert ckpt.exists() and out.with_name("split0.json").exists() and not out.with_name("split1.json").exists()
    run_uci(tiny_job("dle", tmp_path), out, ckpt)
    assert json.loads(clean.read_text())["splits"] == json.loads(out.read_text())["splits"]
    assert not ckpt.exists()


# ------------------------------------------------------------------ image (hyper-DE search)
@pytest.fixture()
def tiny_sets(tmp_path):
    from experiments.test_image import _write_set

    _write_set(tmp_path / "in.npz", 96, 40)
    _write_set(tmp_path / "ood.npz", 8, 30, seed=1)
    return {"train": str(tmp_path / "in.npz"), "ood": str(tmp_path / "ood.npz")}


def hyper_job(**extra):
    job = resolve_job(CONFIG, "image", "fashionmnist", "hyper-de", 38)
    job.update(
        particles=3,
        steps=4,
        hidden=[8],
        batch_size=16,
        search_trials=3,
        search_steps=2,
        search_top=2,
        log_every=1,
        val_fraction=0.25,
        checkpoint_seconds=0.0,
        **extra,
    )
    return job


def test_hyper_de_search_redone_when_l2_range_changes(tmp_path, tiny_sets, monkeypatch, caplog):
    new = hyper_job(l2_range=[1.0, 2.0])
    clean = tmp_path / "clean" / "metrics.json"
    run_image(new, clean, clean.with_name("ckpt"), inputs=tiny_sets, device="cpu")

    out = tmp_path / "killed" / "metrics.json"
    ckpt = out.with_name("ckpt")
    restore = crash_at(monkeypatch, 2 + 2)  # the search done (2 steps), training at step 1
    with pytest.raises(KeyboardInterrupt):
        run_image(hyper_job(), out, ckpt, inputs=tiny_sets, device="cpu")
    restore()
    assert out.with_name("l2_search.json").exists() and ckpt.exists()
    with caplog.at_level("INFO"):
        run_image(new, out, ckpt, inputs=tiny_sets, device="cpu")
    assert "L2 search: reusing" not in caplog.text
    lines = set_aside_lines(caplog)
    assert len(lines) == 2 and "l2_search.json" in lines[0] and "running the search again" in lines[0]
    search = json.loads(out.with_name("l2_search.json").read_text())
    assert all(1.0 <= s <= 2.0 for s in search["strengths"])
    assert json.loads(out.read_text())["metrics"] == json.loads(clean.read_text())["metrics"]

    # same settings again: the search is reused
    caplog.clear()
    with caplog.at_level("INFO"):
        run_image(new, out, ckpt, inputs=tiny_sets, device="cpu")
    assert "L2 search: reusing" in caplog.text and not set_aside_lines(caplog)
    assert json.loads(out.read_text())["metrics"] == json.loads(clean.read_text())["metrics"]


# ------------------------------------------------------------------ HMC chains
def test_hmc_chains_of_other_settings_are_set_aside(tmp_path, interrupt_hmc, caplog):
    import repens.experiments.hmc as exp

    hmc = {"chains": 2, "warmup": 10, "samples": 8, "max_leapfrog": 20, "rhat_max": 1e9, "ess_min": 0.0}
    job = {"experiment": "hmc", "dataset": "regression", "seed": 0, "scale": "quick", "hidden": [4], "hmc": hmc}
    new = {**job, "prior_std": 0.5}
    clean = tmp_path / "clean" / "predictive.npz"
    exp.run_hmc(new, clean)

    out, ckpt = tmp_path / "killed" / "predictive.npz", tmp_path / "killed" / "ckpt.pt"
    interrupt_hmc(True)
    with pytest.raises(KeyboardInterrupt):
        exp.run_hmc(job, out, ckpt)
    interrupt_hmc(False)
    with caplog.at_level("INFO"):
        exp.run_hmc(new, out, ckpt)
    (line,) = set_aside_lines(caplog)
    assert str(ckpt) in line and ckpt.with_name("ckpt.pt.stale").exists()
    with np.load(clean) as a, np.load(out) as b:
        np.testing.assert_array_equal(a["f_test"], b["f_test"])
