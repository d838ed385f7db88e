"""BNN toys (Appendix G.2/G.3): data generators, and every configured method on both toys."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from repens.data.toy import (
    REGRESSION_CLUSTERS,
    classification_2d,
    classification_grid,
    regression_1d,
    ring_means,
)
from repens.experiments.toy import run_toy
from repens.pipeline.config import ConfigError, check_config, resolve_hmc_job, resolve_job

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())


def test_regression_data_follow_g2():
    data = regression_1d(42)
    x, y = data.x_train.squeeze(-1), data.y_train
    assert data.x_train.shape == (90, 1) and y.shape == (90,)
    for k, (lo, hi) in enumerate(REGRESSION_CLUSTERS):
        part = x[45 * k : 45 * (k + 1)]
        assert part.min() >= lo and part.max() <= hi
    assert torch.allclose(data.x_test.squeeze(-1), torch.linspace(0, 7, 100))
    assert torch.equal(regression_1d(42).y_train, y) and not torch.equal(regression_1d(43).y_train, y)


def test_regression_noise_has_variance_0_25():
    # pool residuals of many seeds: 90 * 200 = 18,000 draws, the variance's relative sd ~1%
    resid = torch.cat(
        [
            (d.y_train - d.x_train.squeeze(-1) * torch.sin(d.x_train.squeeze(-1)))
            for d in (regression_1d(s) for s in range(200))
        ]
    )
    assert abs(float(resid.var()) - 0.25) < 0.0125
    assert abs(float(resid.mean())) < 4 * math.sqrt(0.25 / resid.numel())


def test_classification_clusters_on_a_ring_of_radius_5():
    means = ring_means()
    assert torch.allclose(means.norm(dim=-1), torch.full((5,), 5.0))
    sides = (means - means.roll(1, 0)).norm(dim=-1)
    assert torch.allclose(sides, sides[0].expand(5))  # equidistant neighbours
    data = classification_2d(42)
    assert data.x_train.shape == (200, 2) and torch.equal(torch.bincount(data.y_train), torch.full((5,), 40))
    pooled = [classification_2d(s) for s in range(50)]
    for c in range(5):
        pts = torch.cat([d.x_train[d.y_train == c] for d in pooled])
        assert (pts.mean(0) - means[c]).norm() < 0.1  # 2000 points, sd of the mean 0.022
        assert torch.allclose(torch.cov(pts.T), torch.eye(2), atol=0.1)


def test_classification_grid_is_y_major():
    grid = classification_grid(4, 1.0).reshape(4, 4, 2)
    axis = torch.linspace(-1, 1, 4)
    assert torch.allclose(grid[2, 3], torch.stack([axis[3], axis[2]]))


def tiny_job(method, dataset):
    job = resolve_job(CONFIG, "toy", dataset, method, 42)
    return dict(job, hidden=[8], particles=4, steps=2, log_every=1, scale="test")


@pytest.mark.parametrize("dataset", ["regression", "classification"])
@pytest.mark.parametrize("method", CONFIG["experiments"]["toy"]["methods"])
def test_two_training_steps_per_method_write_predictions(tmp_path, method, dataset):
    out = tmp_path / "predictions.npz"
    run_toy(tiny_job(method, dataset), out)
    saved = np.load(out)
    assert json.loads(str(saved["job"]))["method"] == method
    assert saved["x_test"].shape[0] == (100 if dataset == "regression" else 3600)
    if dataset == "regression":
        assert saved["f_test"].shape == (4, 100) and np.isfinite(saved["f_test"]).all()
        assert float(saved["noise_std"]) == 0.5
    else:
        probs = saved["probs_test"]
        assert probs.shape == (3600, 5) and np.allclose(probs.sum(-1), 1, atol=1e-5)


def test_toy_settings_are_appendix_g_at_paper_scale():
    config = dict(CONFIG, scale="paper")
    reg = resolve_job(config, "toy", "regression", "kde-fwgd", 42)
    assert (reg["particles"], reg["steps"], reg["lr"], reg["batch_size"], reg["hidden"]) == (
        50,
        15000,
        0.01,
        64,
        [50, 50],
    )
    cls = resolve_job(config, "toy", "classification", "de", 42)
    assert (cls["particles"], cls["steps"], cls["lr"], cls["batch_size"]) == (100, 10000, 0.001, 64)
    hmc = resolve_hmc_job(config, "toy", "regression", 42)
    assert hmc["method"] == "hmc" and hmc["hmc"]["chains"] >= 2 and "particles" not in hmc and "lr" not in hmc
    assert hmc["noise_std"] == 0.5 and hmc["prior_std"] == 1.0
    quick = resolve_hmc_job(dict(CONFIG, scale="quick"), "toy", "regression", 42)
    assert quick["hmc"]["samples"] < hmc["hmc"]["samples"]


def test_method_named_hmc_is_rejected():
    config = json.loads(json.dumps(CONFIG))
    config["methods"]["hmc"] = {"rule": "ensemble"}
    with pytest.raises(ConfigError, match="methods.hmc"):
        check_config(config)
