"""Appendix G.1 at the paper's settings (statistical acceptance) and the training CLI."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from repens.experiments.synthetic import run_synthetic
from repens.models.targets import Gaussian
from repens.pipeline.config import resolve_job

ROOT = Path(__file__).resolve().parents[1]


def paper_job(method, dataset="gaussian"):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["scale"] = "paper"
    return resolve_job(config, "synthetic", dataset, method, 42)


def particle_moments(path):
    p = np.load(path)["particles"]
    return p.mean(0), np.cov(p.T, ddof=0)  # moments of the particle measure (1/n) sum delta


@pytest.mark.slow
@pytest.mark.parametrize("method", ["svgd", "sge-wgd", "ssge-wgd"])
def test_paper_gaussian_matches_target_moments(tmp_path, method):
    job = paper_job(method)
    assert (job["particles"], job["steps"], job["lr"], job["bandwidth"]) == (100, 5000, 0.1, "median")
    run_synthetic(job, tmp_path / "p.npz")
    mean, cov = particle_moments(tmp_path / "p.npz")
    true_mean, true_cov = (t.numpy() for t in Gaussian().moments())
    assert np.abs(mean - true_mean).max() < 0.05, mean
    rel = np.abs(cov - true_cov) / np.abs(true_cov)
    assert rel.max() < 0.10, (cov, rel)


@pytest.mark.slow
def test_paper_gaussian_kde_wgd_is_reported(tmp_path, capsys):
    """KDE-WGD's figures are reported whatever they are: print them, check the mean only."""
    run_synthetic(paper_job("kde-wgd"), tmp_path / "p.npz")
    mean, cov = particle_moments(tmp_path / "p.npz")
    true_mean, true_cov = (t.numpy() for t in Gaussian().moments())
    with capsys.disabled():
        print(
            f"\nkde-WGD (paper settings): mean {mean.round(4)}, cov {cov.round(3).tolist()}, "
            f"relative cov error {(np.abs(cov - true_cov) / true_cov).round(3).tolist()}"
        )
    assert np.abs(mean - true_mean).max() < 0.05


def run_cli(job, out, *extra):
    return subprocess.run(
        [sys.executable, "-m", "repens", "train", "--spec", json.dumps(job), "--out", str(out), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_cli_writes_particles_with_their_job(tmp_path):
    job = dict(paper_job("svgd"), steps=20, scale="quick")
    out = tmp_path / "run" / "particles.npz"
    result = run_cli(job, out)
    assert result.returncode == 0, result.stderr
    saved = np.load(out)
    assert saved["particles"].shape == (100, 2)
    assert json.loads(str(saved["job"])) == job
    assert not out.with_name(out.name + ".ckpt").exists()
    assert "step 20/20" in result.stderr


def test_cli_divergence_fails_without_output(tmp_path):
    job = dict(paper_job("svgd", "funnel"), optimizer="sgd", lr=1e4, steps=50, particles=20)
    out = tmp_path / "particles.npz"
    result = run_cli(job, out)
    assert result.returncode == 3, result.stderr
    assert "non-finite update" in result.stderr
    assert not out.exists()


def test_cli_rejects_unknown_experiment(tmp_path):
    result = run_cli({"experiment": "nope"}, tmp_path / "x.npz")
    assert result.returncode != 0 and "nope" in result.stderr
