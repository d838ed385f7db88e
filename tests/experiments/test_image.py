"""The Table 1 runner on tiny image sets: every configured method trains two steps,
hyper-DE searches, a SIGKILLed job resumes to identical metrics, NaN leaves no output."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from repens.experiments.image import load_image_data, run_image
from repens.methods.updates import Update
from repens.pipeline.config import resolve_job
from repens.training import fitting
from repens.training.train import NonFiniteError
from rule_hooks import Hooked

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())


def _write_set(path: Path, n_train: int, n_test: int, shape=(1, 8, 8), seed=0):
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        y = rng.integers(0, 10, size=n)
        # class-dependent mean so that a few steps can learn something
        x = rng.normal(40 + 15 * y[:, None, None, None], 30, size=(n, *shape)).clip(0, 255).astype(np.uint8)
        arrays[f"x_{split}"], arrays[f"y_{split}"] = x, y.astype(np.int64)
    np.savez(path, **arrays)


@pytest.fixture()
def tiny_sets(tmp_path):
    _write_set(tmp_path / "in.npz", 96, 40)
    _write_set(tmp_path / "ood.npz", 8, 30, seed=1)
    return {"train": str(tmp_path / "in.npz"), "ood": str(tmp_path / "ood.npz")}


def _tiny(job, **extra):
    job = dict(job)
    job.update(
        particles=3,
        steps=2,
        hidden=[8],
        batch_size=16,
        search_trials=3,
        search_steps=2,
        search_top=2,
        log_every=1,
        val_fraction=0.25,
    )
    job.update(extra)
    return job


@pytest.mark.parametrize("method", CONFIG["experiments"]["image"]["methods"])
def test_two_steps_every_method(method, tiny_sets, tmp_path):
    job = _tiny(resolve_job(CONFIG, "image", "fashionmnist", method, 38))
    out = tmp_path / method / "metrics.json"
    run_image(job, out, out.with_name("ckpt"), inputs=tiny_sets, device="cpu")
    record = json.loads(out.read_text())
    m = record["metrics"]
    for key in (
        "accuracy",
        "nll",
        "ece",
        "entropy_ratio",
        "md_ratio",
        "auroc_entropy",
        "auroc_md",
        "aupr_entropy",
        "aupr_md",
        "fpr95_entropy",
        "fpr95_md",
        "brier",
        "mi_test",
        "mi_ood",
        "auroc_mi",
    ):
        assert np.isfinite(m[key]), key
    assert 0 <= m["accuracy"] <= 1 and 0 <= m["auroc_md"] <= 1
    assert 0 <= m["fpr95_md"] <= 1 and 0 <= m["brier"] <= 2 and m["mi_test"] >= 0
    preds = np.load(out.with_name("predictions.npz"))
    assert preds["test_mi"].shape == (40,) and preds["ood_mi"].shape == (30,)
    assert preds["test_probs"].shape == (40, 10) and preds["ood_md"].shape == (30,)
    np.testing.assert_allclose(preds["test_probs"].sum(-1), 1.0, atol=1e-5)
    assert not out.with_name("ckpt").exists()
    if job.get("l2_search"):
        search = json.loads(out.with_name("l2_search.json").read_text())
        assert len(search["strengths"]) == 3 and len(search["best"]) == 2
        assert all(1e-3 <= s <= 1e3 for s in search["strengths"])
        ranked = sorted(search["val_nll"])
        assert [search["val_nll"][search["strengths"].index(b)] for b in search["best"]] == ranked[:2]
        assert search["rank"] == "nll" and all(0 <= a <= 1 for a in search["val_accuracy"])


def test_the_l2_search_ranks_by_validation_accuracy_when_asked(tiny_sets, tmp_path):
    """``search_rank: accuracy`` keeps the most accurate candidates, ties broken by the lower
    NLL; the candidates themselves (strengths, training) are the NLL-ranked search's."""
    searches = {}
    for rank in ("nll", "accuracy"):
        job = _tiny(resolve_job(CONFIG, "image", "fashionmnist", "hyper-de", 38), search_trials=6, search_top=3)
        out = tmp_path / rank / "metrics.json"
        run_image({**job, "search_rank": rank}, out, inputs=tiny_sets, device="cpu")
        searches[rank] = json.loads(out.with_name("l2_search.json").read_text())
    by_nll, by_acc = searches["nll"], searches["accuracy"]
    assert by_acc["rank"] == "accuracy"
    assert by_acc["strengths"] == by_nll["strengths"] and by_acc["val_nll"] == by_nll["val_nll"]
    order = sorted(range(6), key=lambda i: (-by_acc["val_accuracy"][i], by_acc["val_nll"][i]))
    assert by_acc["best"] == [by_acc["strengths"][i] for i in order[:3]]
    assert by_nll["best"] == [by_nll["strengths"][i] for i in sorted(range(6), key=lambda i: by_nll["val_nll"][i])[:3]]


def test_resnet_job(tmp_path):
    _write_set(tmp_path / "c.npz", 32, 12, shape=(3, 8, 8))
    _write_set(tmp_path / "s.npz", 4, 10, shape=(3, 8, 8), seed=3)
    job = _tiny(resolve_job(CONFIG, "image", "cifar10", "kde-fwgd", 38), depth=8, width=2)
    run_image(
        job,
        tmp_path / "r" / "metrics.json",
        inputs={"train": str(tmp_path / "c.npz"), "ood": str(tmp_path / "s.npz")},
        device="cpu",
    )
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["job"]["model"] == "resnet"


def test_standardisation_uses_training_statistics(tmp_path):
    _write_set(tmp_path / "c.npz", 50, 10, shape=(3, 4, 4))
    _write_set(tmp_path / "s.npz", 4, 10, shape=(3, 4, 4), seed=5)
    data = load_image_data(tmp_path / "c.npz", tmp_path / "s.npz", "standard")
    torch.testing.assert_close(data.x_train.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(data.x_train.std(dim=(0, 2, 3), unbiased=False), torch.ones(3), atol=1e-4, rtol=0)
    assert data.x_test.mean().abs() > 1e-3 or data.x_ood.mean().abs() > 1e-3  # not re-standardised on their own


def test_nan_stops_without_output(tiny_sets, tmp_path, monkeypatch):
    real = fitting.build

    def poisoned(*args, **kwargs):
        return Hooked(real(*args, **kwargs), after=lambda n, out: Update(torch.full_like(out.direction, float("nan"))))

    # the runners build their update rule in fit_particles (repens.training.fitting)
    monkeypatch.setattr(fitting, "build", poisoned)
    job = _tiny(resolve_job(CONFIG, "image", "fashionmnist", "de", 38))
    out = tmp_path / "nan" / "metrics.json"
    with pytest.raises(NonFiniteError, match="non-finite"):
        run_image(job, out, out.with_name("ckpt"), inputs=tiny_sets, device="cpu")
    assert not out.exists() and not out.with_name("predictions.npz").exists()


def test_missing_inputs_is_a_clear_error(tmp_path):
    job = _tiny(resolve_job(CONFIG, "image", "fashionmnist", "de", 38))
    with pytest.raises(ValueError, match="inputs 'train' and 'ood'"):
        run_image(job, tmp_path / "m.json")


def _cli(job, out, sets, env):
    return [
        sys.executable,
        "-m",
        "repens",
        "--threads",
        "1",
        "train",
        "--spec",
        json.dumps(job),
        "--input",
        f"train={sets['train']}",
        "--input",
        f"ood={sets['ood']}",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]


@pytest.mark.slow  # an end-to-end run: second stage of .ci/run
def test_sigkill_and_rerun_gives_identical_metrics(tiny_sets, tmp_path):
    """DRLE uses the random stream for batches, prior draws and Langevin noise. The kill lands
    as soon as the first checkpoint (written 0.05 s into training) appears, so the run is
    stopped mid-training at any speed below about 2,000 steps / 0.06 s (a fixed wait after the
    checkpoint let a fast CPU finish all the steps before the kill; on a 2-core Intel Xeon,
    2026-11-30, the kill found the checkpoint at steps 90-106)."""
    steps = 2000
    job = _tiny(
        resolve_job(CONFIG, "image", "fashionmnist", "drle", 38), steps=steps, checkpoint_seconds=0.05, log_every=250
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    straight = tmp_path / "straight" / "metrics.json"
    subprocess.run(_cli(job, straight, tiny_sets, env), env=env, check=True, capture_output=True)

    killed = tmp_path / "killed" / "metrics.json"
    ckpt = killed.with_name(killed.name + ".ckpt")
    proc = subprocess.Popen(
        _cli(job, killed, tiny_sets, env), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 120
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    if proc.poll() is not None:
        pytest.fail("the job finished before it could be killed; make it longer")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert ckpt.exists() and not killed.exists()
    step = torch.load(ckpt, weights_only=False)["step"]
    assert 0 < step < steps
    rerun = subprocess.run(_cli(job, killed, tiny_sets, env), env=env, check=True, capture_output=True, text=True)
    assert f"resumed from {ckpt} at step" in rerun.stderr
    a = json.loads(straight.read_text())["metrics"]
    b = json.loads(killed.read_text())["metrics"]
    assert a == b
    np.testing.assert_array_equal(
        np.load(straight.with_name("predictions.npz"))["test_probs"],
        np.load(killed.with_name("predictions.npz"))["test_probs"],
    )


def test_member_scores_equal_each_member_alone():
    from repens.experiments.image import member_scores, predict_summary
    from repens.models.networks import build_model
    from repens.models.particles import StackedModel

    model = StackedModel(build_model({"model": "mlp", "hidden": [6]}, (1, 4, 4), 10))
    params = model.sample_gaussian(3, 1.0, torch.Generator().manual_seed(0))
    x = torch.rand(25, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    y = torch.randint(10, (25,), generator=torch.Generator().manual_seed(2))
    alone, hits = [], []
    for i in range(3):
        probs, _ = predict_summary(model, params[i : i + 1], x, batch=7)
        alone.append(float(-probs.gather(-1, y.view(-1, 1)).clamp_min(1e-12).log().mean()))
        hits.append(float((probs.argmax(-1) == y).double().mean()))
    nll, accuracy = member_scores(model, params, x, y, batch=7)
    torch.testing.assert_close(nll, torch.tensor(alone, dtype=torch.float64))
    torch.testing.assert_close(accuracy, torch.tensor(hits, dtype=torch.float64), rtol=0, atol=0)


def test_progress_figures_spread_is_zero_for_copies_and_grows_with_the_spread():
    """``monitor_md`` is the particles' spread in function space: 0 when they are one network
    repeated, larger the further apart they are drawn; the ensemble's NLL and accuracy are
    those of its mean prediction."""
    from repens.experiments.image import predict_summary, progress_figures
    from repens.models.networks import build_model
    from repens.models.particles import StackedModel

    model = StackedModel(build_model({"model": "mlp", "hidden": [6]}, (1, 4, 4), 10))
    x = torch.rand(30, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    y = torch.randint(10, (30,), generator=torch.Generator().manual_seed(2))
    base = model.sample_gaussian(1, 1.0, torch.Generator().manual_seed(0))
    noise = model.sample_gaussian(4, 1.0, torch.Generator().manual_seed(3))
    spreads = []
    for scale in (0.0, 0.1, 1.0):
        figures = progress_figures(model, base + scale * noise, (x[:20], y[:20]), (x[20:], y[20:]))
        assert set(figures) == {"train_nll", "train_acc", "monitor_nll", "monitor_acc", "monitor_md"}
        spreads.append(figures["monitor_md"])
    assert spreads[0] == pytest.approx(0.0, abs=1e-12) and 0 < spreads[1] < spreads[2]
    probs, _ = predict_summary(model, base + noise, x[:20])
    nll = float(-probs.gather(-1, y[:20].view(-1, 1)).clamp_min(1e-12).log().mean())
    figures = progress_figures(model, base + noise, (x[:20], y[:20]), (x[20:], y[20:]))
    assert figures["train_nll"] == pytest.approx(nll, rel=1e-12)
