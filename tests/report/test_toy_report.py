"""Tests of repens.report.toy on small fake prediction files in the real format."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from repens.data.toy import classification_2d, regression_1d, ring_means
from repens.pipeline import from_runs
from repens.report import toy as rep
from repens.report import toy_figures as figures
from repens.summaries import toy as steps

SEED = 41
NOISE = 0.5
LABELS = {"hmc": "HMC", "de": "Deep ensemble", "kde-fwgd": "kde-fWGD", "svgd": "SVGD"}
HMC_BLOCK = {"chains": 2, "samples": 50, "warmup": 20}


def _job(dataset: str, method: str, seed: int, scale: str) -> dict:
    job = {"experiment": "toy", "dataset": dataset, "method": method, "seed": seed, "scale": scale}
    if method == "hmc":
        job["hmc"] = HMC_BLOCK
    else:
        job.update(particles=6, steps=100)
    return job


def _save(root: Path, dataset: str, method: str, seed: int = SEED, scale: str = "quick", **arrays) -> Path:
    path = root / "toy" / dataset / method / f"seed{seed}" / "predictions.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        path,
        job=np.array(json.dumps(_job(dataset, method, seed, scale), sort_keys=True)),
        label=np.array(LABELS.get(method, method)),
        **arrays,
    )
    return path


# --------------------------------------------------------------------------- fake regression
# f_s(x) = x sin x + shift(x) + a_s w(x) with a = (-1, 1, -1, 1, -1, 1): the epistemic sd
# (population) is exactly w(x) and the mean x sin x + shift(x).

A = np.array([-1.0, 1.0, -1.0, 1.0, -1.0, 1.0])
# (w in the data region, w in the gap, w outside, mean shift in the data region)
REG_SPECS = {"hmc": (0.2, 2.0, 3.0, 0.0), "de": (0.2, 0.2, 0.2, 0.0), "kde-fwgd": (0.2, 1.5, 3.0, 1.0)}


def _region_masks(x):
    data = ((x >= 1.5) & (x <= 2.5)) | ((x >= 4.5) & (x <= 6.0))
    gap = (x > 2.5) & (x < 4.5)
    return data, gap, ~(data | gap)


def _write_regression(root: Path, method: str, seed: int = SEED, scale: str = "quick") -> Path:
    d = regression_1d(SEED)
    x = d.x_test.numpy()[:, 0].astype(np.float64)
    data, gap, out = _region_masks(x)
    w_data, w_gap, w_out, shift = REG_SPECS[method]
    w = np.where(data, w_data, np.where(gap, w_gap, w_out))
    f = x * np.sin(x) + shift * data + A[:, None] * w[None, :]
    return _save(
        root,
        "regression",
        method,
        seed,
        scale,
        x_train=d.x_train.numpy(),
        y_train=d.y_train.numpy(),
        x_test=d.x_test.numpy(),
        f_test=f.astype(np.float32),
        noise_std=np.array(NOISE),
    )


# --------------------------------------------------------------------------- fake classification
# every method and HMC: 0.9 on the class of the nearest ring mean near the data; far from it
# HMC is uniform and the methods keep the confident prediction (de) or are uniform too (svgd).


def _confident(x: np.ndarray) -> np.ndarray:
    means = ring_means().numpy().astype(np.float64)
    nearest = np.argmin(((x[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    probs = np.full((len(x), 5), 0.025)
    probs[np.arange(len(x)), nearest] = 0.9
    return probs


def _near(x: np.ndarray, x_train: np.ndarray) -> np.ndarray:
    dist = np.sqrt(((x[:, None, :] - x_train[None]) ** 2).sum(-1)).min(axis=1)
    return dist <= 2.0


def _write_classification(root: Path, method: str, seed: int = SEED, scale: str = "quick") -> Path:
    d = classification_2d(SEED)
    x, x_train = d.x_test.numpy().astype(np.float64), d.x_train.numpy().astype(np.float64)
    probs = _confident(x)
    if method in ("hmc", "svgd"):
        probs[~_near(x, x_train)] = 0.2
    return _save(
        root,
        "classification",
        method,
        seed,
        scale,
        x_train=d.x_train.numpy(),
        y_train=d.y_train.numpy(),
        x_test=d.x_test.numpy(),
        probs_test=probs.astype(np.float32),
    )


@pytest.fixture
def files(tmp_path):
    reg = {m: _write_regression(tmp_path, m) for m in ("hmc", "de", "kde-fwgd")}
    cls = {m: _write_classification(tmp_path, m) for m in ("hmc", "de", "svgd")}
    return reg, cls


# --------------------------------------------------------------------------- loading


def test_load_predictions(files):
    reg, cls = files
    p = steps.load_predictions(reg["hmc"])
    assert (p.dataset, p.method, p.label, p.seed, p.scale, p.is_hmc) == (
        "regression",
        "hmc",
        "HMC",
        SEED,
        "quick",
        True,
    )
    assert p.f_test.shape == (6, 100) and p.f_test.dtype == np.float64 and p.noise_std == NOISE
    # an HMC job spec without a 'method' key is recognised by its 'hmc' block
    with np.load(reg["hmc"]) as data:
        arrays = {k: data[k] for k in data.files}
    job = json.loads(str(arrays["job"][()]))
    del job["method"]
    arrays["job"] = np.array(json.dumps(job))
    np.savez(reg["hmc"], **arrays)
    assert steps.load_predictions(reg["hmc"]).is_hmc
    c = steps.load_predictions(cls["de"])
    assert c.probs_test.shape == (3600, 5) and c.y_train.dtype == np.int64 and not c.is_hmc
    assert c.label == "Deep ensemble"


def test_load_predictions_missing_key_names_file_and_key(tmp_path, files):
    reg, _ = files
    with np.load(reg["de"]) as data:
        arrays = {k: data[k] for k in data.files if k != "f_test"}
    bad = tmp_path / "broken.npz"
    np.savez(bad, **arrays)
    with pytest.raises(ValueError, match=r"broken\.npz.*'f_test'"):
        steps.load_predictions(bad)
    arrays.pop("x_train")
    np.savez(bad, **arrays)
    with pytest.raises(ValueError, match=r"broken\.npz.*'x_train'"):
        steps.load_predictions(bad)


def test_regions_and_near_mask():
    x = np.array([0.0, 1.5, 2.0, 2.5, 2.6, 4.4, 4.5, 6.0, 6.1, 7.0])
    r = steps.regression_regions(x)
    assert list(np.flatnonzero(r["data"])) == [1, 2, 3, 6, 7]
    assert list(np.flatnonzero(r["gap"])) == [4, 5]
    assert list(np.flatnonzero(r["outside"])) == [0, 8, 9]
    near = steps.near_mask(np.array([[0.0, 0.0], [2.0, 0.0], [2.01, 0.0]]), np.array([[0.0, 0.0]]))
    assert list(near) == [True, True, False]


# --------------------------------------------------------------------------- distance table


def test_write_distance_table_values(tmp_path, files):
    reg, cls = files
    out_csv, out_tex = tmp_path / "out" / "distance_to_hmc.csv", tmp_path / "out" / "distance_to_hmc.tex"
    out_html = tmp_path / "out" / "distance_to_hmc.html"
    from_runs.write_distance_table(
        (reg["hmc"], [reg["de"], reg["kde-fwgd"]]),
        (cls["hmc"], [cls["de"], cls["svgd"]]),
        out_csv,
        out_tex,
        out_html=out_html,
    )
    frame = pd.read_csv(out_csv)
    assert list(frame.columns) == rep.COLUMNS
    # regression methods in input order, then the classification-only one
    assert list(frame["method"]) == ["de", "kde-fwgd", "svgd"]
    assert list(frame["label"]) == ["Deep ensemble", "kde-fWGD", "SVGD"]
    assert set(frame["seed"]) == {SEED} and set(frame["scale"]) == {"quick"}
    row = frame.set_index("method")

    total = lambda w: math.sqrt(w**2 + NOISE**2)  # noqa: E731
    # gap: HMC w = 2, DE 0.2, kde-fWGD 1.5 (means equal there)
    assert row.loc["de", "hmc_gap_sd_epistemic"] == pytest.approx(2.0)
    assert row.loc["de", "gap_sd_epistemic"] == pytest.approx(0.2)
    assert row.loc["de", "gap_sd_epistemic_ratio"] == pytest.approx(0.1)
    assert row.loc["kde-fwgd", "gap_sd_epistemic_ratio"] == pytest.approx(0.75)
    assert row.loc["de", "hmc_gap_sd"] == pytest.approx(total(2.0))
    assert row.loc["de", "gap_sd_ratio"] == pytest.approx(total(0.2) / total(2.0))
    assert row.loc["kde-fwgd", "gap_sd_ratio"] == pytest.approx(total(1.5) / total(2.0))
    assert row.loc["de", "w2_gap"] == pytest.approx(total(2.0) - total(0.2))
    assert row.loc["kde-fwgd", "w2_gap"] == pytest.approx(total(2.0) - total(1.5))
    # data region: same sd; kde-fWGD's mean is shifted by 1
    assert row.loc["de", "w2_data"] == pytest.approx(0.0, abs=1e-6)
    assert row.loc["kde-fwgd", "w2_data"] == pytest.approx(1.0, abs=1e-5)
    # outside: HMC w = 3
    assert row.loc["de", "w2_outside"] == pytest.approx(total(3.0) - total(0.2))
    assert row.loc["kde-fwgd", "w2_outside"] == pytest.approx(0.0, abs=1e-6)
    assert np.isnan(row.loc["svgd", "w2_gap"]) and np.isnan(row.loc["svgd", "gap_sd_ratio"])

    # classification: equal near the data; far from it HMC is uniform, DE confident
    conf = np.array([0.9, 0.025, 0.025, 0.025, 0.025])
    kl_far_de = float(np.sum(0.2 * np.log(0.2 / conf)))
    entropy_conf = float(-np.sum(conf * np.log(conf)))
    assert row.loc["de", "kl_near"] == pytest.approx(0.0, abs=1e-6)
    assert row.loc["de", "kl_far"] == pytest.approx(kl_far_de, rel=1e-5)
    assert row.loc["svgd", "kl_far"] == pytest.approx(0.0, abs=1e-6)
    assert row.loc["de", "entropy_far"] == pytest.approx(entropy_conf, rel=1e-5)
    assert row.loc["svgd", "entropy_far"] == pytest.approx(math.log(5), rel=1e-5)
    assert row.loc["de", "hmc_entropy_far"] == pytest.approx(math.log(5), rel=1e-5)
    assert row.loc["de", "entropy_near"] == pytest.approx(entropy_conf, rel=1e-5)
    assert row.loc["svgd", "hmc_entropy_near"] == pytest.approx(entropy_conf, rel=1e-5)

    tex = out_tex.read_text()
    for needle in (
        r"\toprule",
        r"\bottomrule",
        r"\textit{HMC (reference)}",
        "Deep ensemble",
        "kde-fWGD",
        r"\multicolumn{7}{c}{Regression}",
        r"\cmidrule(lr){2-8} \cmidrule(lr){9-12}",
        r"$W_2$ gap",
        "scale quick",
        f"seed {SEED}",
        r"\sqrt{(m_1-m_2)^2+(s_1-s_2)^2}",
        r"\mathrm{KL}",
        "Regression",
        "Classification",
        "6 particles, 100 steps",
        "chains 2",
    ):
        assert needle in tex, needle
    assert tex.count(r"\\") == 2 + 1 + 3  # 2 header lines, HMC row, 3 method rows
    # every body row has the same number of cells as the header
    body = [line for line in tex.splitlines() if line.endswith(r"\\")]
    assert len({line.count("&") for line in body[1:]}) == 1
    # the report's HTML: the same rows and values, HMC's row in italics
    page = out_html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "HMC (reference)" in page and "kde-fWGD" in page
    assert f">{row.loc['kde-fwgd', 'w2_gap']:.3f}<" in page and f">{row.loc['de', 'kl_far']:.3f}<" in page
    assert "font-style: italic" in page and 'colspan="7"' in page


def test_distance_table_single_dataset(tmp_path, files):
    reg, _ = files
    out_csv, out_tex = tmp_path / "d.csv", tmp_path / "d.tex"
    from_runs.write_distance_table((reg["hmc"], [reg["de"]]), None, out_csv, out_tex)
    frame = pd.read_csv(out_csv)
    assert list(frame["method"]) == ["de"]
    assert frame[rep.CLASSIFICATION_COLUMNS].isna().all().all()
    tex = out_tex.read_text()
    assert "Regression" in tex and "Classification" not in tex and "KL near" not in tex
    with pytest.raises(ValueError, match="both are None"):
        from_runs.write_distance_table(None, None, out_csv, out_tex)


def test_distance_table_wrong_dataset_names_file(tmp_path, files):
    reg, cls = files
    with pytest.raises(ValueError, match=r"classification/de/seed41/predictions\.npz.*'classification'"):
        from_runs.write_distance_table(
            (reg["hmc"], [reg["de"], cls["de"]]), None, tmp_path / "a.csv", tmp_path / "a.tex"
        )
    with pytest.raises(ValueError, match=r"regression/hmc/seed41/predictions\.npz"):
        steps.distance_frame(None, (reg["hmc"], [cls["de"]]))
    assert not (tmp_path / "a.csv").exists()


def test_distance_table_reference_must_be_hmc(files):
    reg, _ = files
    with pytest.raises(ValueError, match=r"regression/de/seed41/predictions\.npz.*HMC reference"):
        steps.distance_frame((reg["de"], [reg["kde-fwgd"]]))


def test_mixed_scales_or_unpaired_seeds_name_the_files(tmp_path, files):
    reg, cls = files
    other_seed = _write_regression(tmp_path, "de", seed=SEED + 1)
    with pytest.raises(ValueError, match=r"seed42/predictions\.npz: seed 42 has no HMC reference.*seed41.*\(seed 41\)"):
        steps.distance_frame((reg["hmc"], [reg["kde-fwgd"], other_seed]))
    paper = _write_classification(tmp_path / "paper", "de", scale="paper")
    with pytest.raises(ValueError, match=r"mix scales.*scale=paper"):
        steps.distance_frame((reg["hmc"], [reg["de"]]), (cls["hmc"], [paper]))
    with pytest.raises(ValueError, match=r"second HMC reference.*seed 41"):
        steps.distance_frame(([reg["hmc"], reg["hmc"]], [reg["de"]]))
    # a figure shows one seed
    with pytest.raises(ValueError, match="mix seeds/scales"):
        from_runs.plot_regression_panels([reg["hmc"], other_seed], tmp_path / "f.png", tmp_path / "f.pdf")


def test_distance_table_over_seeds(tmp_path, files):
    """Each seed's methods are compared with that seed's HMC; cells are mean ± s.e. over seeds."""
    reg, cls = files
    second = SEED + 1
    # seed 42: the same fakes, except that kde-fWGD is DE-like in the gap (w = 0.2) and HMC's gap w is 1
    REG_SPECS_2 = {"hmc": (0.2, 1.0, 3.0, 0.0), "de": (0.2, 0.2, 0.2, 0.0), "kde-fwgd": (0.2, 0.2, 3.0, 1.0)}
    saved = dict(REG_SPECS)
    try:
        REG_SPECS.update(REG_SPECS_2)
        reg2 = {m: _write_regression(tmp_path / "s2", m, seed=second) for m in ("hmc", "de", "kde-fwgd")}
    finally:
        REG_SPECS.update(saved)
    cls2 = {m: _write_classification(tmp_path / "s2", m, seed=second) for m in ("hmc", "de")}
    out_csv, out_tex, out_html = tmp_path / "d.csv", tmp_path / "d.tex", tmp_path / "d.html"
    from_runs.write_distance_table(
        ([reg["hmc"], reg2["hmc"]], [reg["de"], reg["kde-fwgd"], reg2["de"], reg2["kde-fwgd"]]),
        ([cls["hmc"], cls2["hmc"]], [cls["de"], cls["svgd"], cls2["de"]]),
        out_csv,
        out_tex,
        out_html=out_html,
    )
    frame = pd.read_csv(out_csv)
    assert list(zip(frame["method"], frame["seed"])) == [
        ("de", SEED),
        ("de", second),
        ("kde-fwgd", SEED),
        ("kde-fwgd", second),
        ("svgd", SEED),
    ]
    ratio = frame.set_index(["method", "seed"])["gap_sd_epistemic_ratio"]
    # each seed against its own reference: DE 0.2 / 2 and 0.2 / 1; kde-fWGD 1.5 / 2 and 0.2 / 1
    assert ratio[("de", SEED)] == pytest.approx(0.1) and ratio[("de", second)] == pytest.approx(0.2)
    assert ratio[("kde-fwgd", SEED)] == pytest.approx(0.75) and ratio[("kde-fwgd", second)] == pytest.approx(0.2)
    assert np.isnan(ratio[("svgd", SEED)])
    # the shown cells: mean ± sd(ddof=1)/sqrt(2) = |a - b| / 2 for two seeds
    tex, page = out_tex.read_text(), out_html.read_text()
    assert r"0.150$\pm$0.050" in tex and "0.150±0.050" in page  # DE ratio (f): 0.1, 0.2
    assert r"0.475$\pm$0.275" in tex  # kde-fWGD ratio (f): 0.75, 0.2
    assert "1.500$\\pm$0.500" in tex  # HMC's own gap sd (f): 2 and 1
    assert "(n=1)" in tex and "(n=1)" in page  # SVGD ran on one of the two seeds
    assert "seeds 41, 42" in tex and "mean $\\pm$ standard error over the 2 seeds" in tex
    # one seed: no ± and no (n=...)
    from_runs.write_distance_table((reg["hmc"], [reg["de"]]), None, out_csv, out_tex)
    tex = out_tex.read_text()
    assert r"\pm" not in tex and "(n=" not in tex and f"seed {SEED}" in tex


# --------------------------------------------------------------------------- figures


def test_plot_regression_panels(tmp_path, files):
    reg, cls = files
    out_png, out_pdf = tmp_path / "fig" / "fig1.png", tmp_path / "fig" / "fig1.pdf"
    from_runs.plot_regression_panels([reg["hmc"], reg["de"], reg["kde-fwgd"], reg["de"], reg["hmc"]], out_png, out_pdf)
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out_pdf.read_bytes()[:4] == b"%PDF"
    assert not list(out_png.parent.glob(".*tmp*"))
    with pytest.raises(ValueError, match=r"classification/de/seed41/predictions\.npz.*'regression'"):
        from_runs.plot_regression_panels([reg["hmc"], cls["de"]], out_png, out_pdf)


def test_plot_classification_panels(tmp_path, files):
    reg, cls = files
    out_png, out_pdf = tmp_path / "fig3.png", tmp_path / "fig3.pdf"
    from_runs.plot_classification_panels([cls["hmc"], cls["de"], cls["svgd"]], out_png, out_pdf)
    assert out_png.stat().st_size > 1000 and out_pdf.read_bytes()[:4] == b"%PDF"
    with pytest.raises(ValueError, match=r"regression/de/seed41/predictions\.npz"):
        from_runs.plot_classification_panels([cls["hmc"], reg["de"]], out_png, out_pdf)


def test_regression_figure_y_range_follows_the_training_span_not_the_tails(tmp_path, monkeypatch):
    """Figure 1's y-axis is chosen from the data and HMC's ±2 sd over the training span
    (both clusters and the gap), so HMC's tails of ±12 sd beyond it, which the old range
    followed up to 1.5 data spans either side, are clipped and the gap's band keeps its
    height; the footer says so."""
    monkeypatch.setitem(REG_SPECS, "hmc", (0.2, 2.0, 12.0, 0.0))  # sd 12 outside the data's span
    paths = [_write_regression(tmp_path, m) for m in ("hmc", "de")]
    captured = {}
    finish = figures._finish_figure

    def capture(fig, title, footer, *args, **kwargs):
        captured.update(ylim=fig.axes[0].get_ylim(), footer=footer)
        return finish(fig, title, footer, *args, **kwargs)

    monkeypatch.setattr(figures, "_finish_figure", capture)
    from_runs.plot_regression_panels(paths, tmp_path / "f.png", tmp_path / "f.pdf")
    lo, hi = captured["ylim"]
    hmc = steps.load_predictions(paths[0])
    x = hmc.x_test[:, 0]
    mean, sd = hmc.predictive()
    inside = (x >= hmc.x_train.min()) & (x <= hmc.x_train.max())
    band_lo, band_hi = (mean - 2 * sd)[inside].min(), (mean + 2 * sd)[inside].max()
    y = hmc.y_train
    # the data and the band over the span are in view, with at most 10% to spare
    assert lo <= min(band_lo, y.min()) and hi >= max(band_hi, y.max())
    assert hi - lo <= 1.1 * (max(band_hi, y.max()) - min(band_lo, y.min()))
    assert (mean + 2 * sd)[~inside].max() > hi + 10  # the tails run off the axes
    assert "clipped" in captured["footer"] and "training span" in captured["footer"]


def test_an_unconverged_hmc_reference_is_flagged_in_the_distance_table_and_figure(tmp_path):
    """An HMC file that records converged = False (a quick-scale smoke test, repens.training.hmc.
    convergence), or an older one whose job enforced relaxed thresholds, is flagged: the
    CSV's hmc_converged is 0 (the scorecard then scores nothing against it), the table's
    title and note and the figure's footer say it is not converged."""
    hmc, de = _write_regression(tmp_path, "hmc"), _write_regression(tmp_path, "de")
    assert steps.load_predictions(hmc).converged is True  # the job's default thresholds are the paper's
    with np.load(hmc) as z:
        arrays = dict(z)
    np.savez(hmc, **arrays, converged=np.array(False))
    assert steps.load_predictions(hmc).converged is False
    out = {k: tmp_path / f"d.{k}" for k in ("csv", "tex", "html")}
    from_runs.write_distance_table(([hmc], [de]), None, out["csv"], out["tex"], out_html=out["html"])
    frame = pd.read_csv(out["csv"])
    assert list(frame["hmc_converged"]) == [0]
    assert "not converged" in out["tex"].read_text() and "NOT converged" in out["html"].read_text()
    footer, _ = rep.settings_summary([steps.load_predictions(hmc), steps.load_predictions(de)])
    assert "HMC: " in footer and "not converged" in footer
    # a file from before the flag: judged by the thresholds its job enforced
    job = json.loads(str(arrays["job"]))
    job["hmc"] = {**job["hmc"], "rhat_max": 1000, "ess_min": 0}
    np.savez(hmc, **{**arrays, "job": np.array(json.dumps(job, sort_keys=True))})
    assert steps.load_predictions(hmc).converged is False


def test_a_run_twice_or_a_non_finite_prediction_never_reaches_the_distance_table(tmp_path, files):
    reg, _ = files
    with pytest.raises(ValueError, match=r"de/seed41/predictions\.npz: method 'de' appears twice"):
        steps.distance_frame((reg["hmc"], [reg["de"], reg["de"]]))
    arrays = dict(np.load(reg["kde-fwgd"]))
    arrays["f_test"] = arrays["f_test"].copy()
    arrays["f_test"][0, 0] = np.inf
    bad = tmp_path / "bad" / "predictions.npz"
    bad.parent.mkdir()
    np.savez(bad, **arrays)
    with pytest.raises(ValueError, match=r"bad/predictions\.npz: .* holds a non-finite number"):
        steps.distance_frame((reg["hmc"], [bad]))
