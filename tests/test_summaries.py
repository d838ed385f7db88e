"""The pipeline steps of repens.summaries write the numbers the reports show, equal to
computing them from the runs directly (the targets, metrics and distances modules), and
the reports made from those files equal the reports made in one process."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from repens.evaluation.distances import categorical_kl, gaussian_w2, mixture_moments, predictive_entropy
from repens.evaluation.metrics import covariance_relative_errors, mean_error, mean_pairwise_distance
from repens.models.targets import make_target
from repens.pipeline import from_runs
from repens.report import claims as cl
from repens.report import synthetic as synthetic_rep
from repens.report import synthetic_figures, toy_figures
from repens.report import toy as toy_rep
from repens.summaries import synthetic as syn
from repens.summaries import toy as toy_steps

sys.path.insert(0, str(Path(__file__).resolve().parent / "report"))
import test_toy_report as toy_fixtures  # noqa: E402

REFERENCE = 1500
REPEATS = 3


@pytest.fixture(autouse=True)
def _small_reference(monkeypatch):
    monkeypatch.setattr(syn, "REFERENCE_SAMPLES", REFERENCE)
    monkeypatch.setattr(syn, "IID_REPEATS", REPEATS)


def _runs(tmp_path: Path, target: str, n: int = 40) -> list[Path]:
    paths = []
    for i, method in enumerate(("svgd", "kde-wgd")):
        x = make_target(target).sample(n, torch.Generator().manual_seed(7 + i)).numpy() * (1.0 + 0.2 * i)
        job = {
            "experiment": "synthetic",
            "dataset": target,
            "method": method,
            "seed": 42,
            "scale": "quick",
            "particles": n,
            "steps": 10,
            "lr": 0.1,
            "bandwidth": "median",
        }
        path = tmp_path / f"{target}_{method}.npz"
        np.savez(path, particles=x, initial=np.zeros_like(x), job=np.array(json.dumps(job)))
        paths.append(path)
    return paths


def _direct_metrics(x: np.ndarray, target_name: str) -> dict[str, float]:
    """The metrics of one sample set, computed here from the definitions."""
    target = make_target(target_name)
    mean, cov = (t.numpy() for t in target.moments())
    reference = target.sample(REFERENCE, torch.Generator().manual_seed(0)).numpy()
    errors = covariance_relative_errors(x, cov)
    energy = 2 * mean_pairwise_distance(x, reference) - mean_pairwise_distance(x) - mean_pairwise_distance(reference)
    return {
        "mean_error": mean_error(x, mean),
        "cov_rel_err_xx": float(errors[0, 0]),
        "cov_xy_err": float(errors[0, 1]),
        "cov_rel_err_yy": float(errors[1, 1]),
        "max_cov_rel_err": float(errors[cov != 0].max()),
        "energy_distance": max(float(energy), 0.0),
    }


@pytest.mark.parametrize("target", ["gaussian", "funnel"])
def test_synthetic_metrics_file_holds_the_metrics_and_the_noise_floor(tmp_path, target):
    paths = _runs(tmp_path, target)
    out = tmp_path / "sample_quality.json"
    assert syn.main(["metrics", "--out", str(out), *map(str, paths)]) == 0
    summary = json.loads(out.read_text())
    rows = summary["rows"]
    assert [r["method"] for r in rows] == ["svgd", "kde-wgd", "iid"]
    for row, path in zip(rows, paths):
        x = np.load(path)["particles"]
        for key, value in _direct_metrics(x, target).items():
            assert row[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    # the noise floor: REPEATS draws of n exact samples from seed 0 + 1, their mean and sd
    generator = torch.Generator().manual_seed(1)
    draws = [_direct_metrics(make_target(target).sample(40, generator).numpy(), target) for _ in range(REPEATS)]
    floor = rows[-1]
    assert floor["n"] == 40 and floor["repeats"] == REPEATS
    for key in synthetic_rep.METRIC_KEYS:
        values = [d[key] for d in draws]
        assert floor[key] == pytest.approx(np.mean(values), rel=1e-12, abs=1e-15)
        assert floor[f"{key}_sd"] == pytest.approx(np.std(values, ddof=1), rel=1e-12, abs=1e-15)
    # the scorecard's noise-floor error is read from the file
    se = cl.noise_floor_se(target, 40, "energy_distance", out)
    assert se == pytest.approx(np.std([d["energy_distance"] for d in draws], ddof=1) / math.sqrt(REPEATS))
    mean, cov = (t.numpy() for t in make_target(target).moments())
    assert summary["targets"][target] == {"mean": mean.tolist(), "cov": cov.tolist()}


def test_synthetic_table_from_the_file_equals_the_table_made_in_one_process(tmp_path):
    paths = _runs(tmp_path, "gaussian") + _runs(tmp_path, "funnel")
    summary = tmp_path / "sample_quality.json"
    syn.write_metrics_summary(paths, summary)
    labels = {"svgd": "SVGD (config)"}
    synthetic_rep.write_metrics_table_from(summary, tmp_path / "a.csv", tmp_path / "a.tex", labels, tmp_path / "a.html")
    from_runs.write_metrics_table(paths, tmp_path / "b.csv", tmp_path / "b.tex", labels, tmp_path / "b.html")
    for ext in ("csv", "tex", "html"):
        assert (tmp_path / f"a.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes(), ext
    frame = pd.read_csv(tmp_path / "a.csv", comment="#")
    assert "SVGD (config)" in set(frame["label"]) and "exact iid (n=40)" in set(frame["label"])


def test_synthetic_figure_file_holds_the_exact_samples_and_the_density(tmp_path):
    paths = _runs(tmp_path, "funnel")
    out = tmp_path / "funnel_figure.npz"
    assert syn.main(["figure-data", "--target", "funnel", "--out", str(out), *map(str, paths)]) == 0
    data = dict(np.load(out))
    exact = make_target("funnel").sample(REFERENCE, torch.Generator().manual_seed(0)).numpy()
    np.testing.assert_array_equal(data["exact"], exact)
    (x_lo, x_hi), (y_lo, y_hi) = data["window"]
    assert x_lo < 0 < x_hi and y_lo < 0 < y_hi
    grid = torch.from_numpy(np.stack([data["mesh_x"].ravel(), data["mesh_y"].ravel()], axis=1))
    logp = make_target("funnel").log_prob(grid).numpy().reshape(data["mesh_x"].shape)
    np.testing.assert_array_equal(data["logp"], logp)
    assert data["levels"][-1] == pytest.approx(logp.max() - 0.125)
    synthetic_figures.plot_target_panels_from("funnel", out, paths, tmp_path / "f.png", tmp_path / "f.pdf")
    from_runs.plot_target_panels("funnel", paths, tmp_path / "g.png", tmp_path / "g.pdf")
    assert (tmp_path / "f.pdf").read_bytes() == (tmp_path / "g.pdf").read_bytes()


def _toy_files(tmp_path: Path):
    reg = {m: toy_fixtures._write_regression(tmp_path, m) for m in ("hmc", "de", "kde-fwgd")}
    cls = {m: toy_fixtures._write_classification(tmp_path, m) for m in ("hmc", "de", "kde-fwgd")}
    return reg, cls


def test_toy_distance_file_holds_the_distances_to_hmc(tmp_path):
    reg, cls = _toy_files(tmp_path)
    out = tmp_path / "distances.json"
    assert (
        toy_steps.main(
            [
                "distances",
                "--out",
                str(out),
                "--regression-hmc",
                str(reg["hmc"]),
                "--regression",
                str(reg["de"]),
                str(reg["kde-fwgd"]),
                "--classification-hmc",
                str(cls["hmc"]),
                "--classification",
                str(cls["de"]),
                str(cls["kde-fwgd"]),
            ]
        )
        == 0
    )
    summary = json.loads(out.read_text())
    rows = {r["method"]: r for r in summary["rows"]}
    with np.load(reg["hmc"]) as h, np.load(reg["de"]) as m:
        x = h["x_test"][:, 0]
        gap = (x > 2.5) & (x < 4.5)
        h_mean, h_sd = mixture_moments(h["f_test"], float(h["noise_std"]))
        mean, sd = mixture_moments(m["f_test"], float(m["noise_std"]))
    assert rows["de"]["w2_gap"] == pytest.approx(float(gaussian_w2(mean, sd, h_mean, h_sd)[gap].mean()), rel=1e-12)
    assert rows["de"]["gap_sd_ratio"] == pytest.approx(sd[gap].mean() / h_sd[gap].mean(), rel=1e-12)
    with np.load(cls["hmc"]) as h, np.load(cls["de"]) as m:
        d2 = ((h["x_test"][:, None, :] - h["x_train"][None, :, :]) ** 2).sum(-1).min(axis=1)
        near = d2 <= toy_rep.NEAR_RADIUS**2
        kl = categorical_kl(h["probs_test"], m["probs_test"])
    assert rows["de"]["kl_near"] == pytest.approx(float(kl[near].mean()), rel=1e-12)
    assert rows["de"]["kl_far"] == pytest.approx(float(kl[~near].mean()), rel=1e-12)
    labels = {"de": "DE (config)"}
    toy_rep.write_distance_table_from(out, tmp_path / "a.csv", tmp_path / "a.tex", labels, tmp_path / "a.html")
    from_runs.write_distance_table(
        (reg["hmc"], [reg["de"], reg["kde-fwgd"]]),
        (cls["hmc"], [cls["de"], cls["kde-fwgd"]]),
        tmp_path / "b.csv",
        tmp_path / "b.tex",
        labels,
        tmp_path / "b.html",
    )
    for ext in ("csv", "tex", "html"):
        assert (tmp_path / f"a.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes(), ext


def test_toy_figure_files_hold_the_predictive(tmp_path):
    reg, cls = _toy_files(tmp_path)
    out = tmp_path / "regression_figure.npz"
    assert toy_steps.main(["figure-data", "--dataset", "regression", "--out", str(out), *map(str, reg.values())]) == 0
    with np.load(out) as data, np.load(reg["de"]) as m:
        mean, sd = mixture_moments(m["f_test"], float(m["noise_std"]))
        np.testing.assert_array_equal(data["1/mean"], mean)
        np.testing.assert_array_equal(data["1/sd"], sd)
    out = tmp_path / "classification_figure.npz"
    assert (
        toy_steps.main(["figure-data", "--dataset", "classification", "--out", str(out), *map(str, cls.values())]) == 0
    )
    with np.load(out) as data, np.load(cls["hmc"]) as h:
        n = math.isqrt(h["x_test"].shape[0])
        np.testing.assert_array_equal(data["0/entropy"], predictive_entropy(h["probs_test"]).reshape(n, n))
        assert json.loads(str(data["panels"]))[0]["method"] == "hmc"
    toy_figures.plot_classification_panels_from(out, tmp_path / "c.png", tmp_path / "c.pdf")
    from_runs.plot_classification_panels(list(cls.values()), tmp_path / "d.png", tmp_path / "d.pdf")
    assert (tmp_path / "c.pdf").read_bytes() == (tmp_path / "d.pdf").read_bytes()
