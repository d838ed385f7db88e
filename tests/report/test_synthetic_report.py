"""Tests of repens.report.synthetic on tiny result files in the real format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from repens.models.targets import make_target
from repens.pipeline import from_runs
from repens.report import synthetic as rep
from repens.report.tables import Cell, Column, column_notation, format_cell
from repens.summaries import synthetic as steps

METHODS = ["svgd", "kde-wgd", "sge-wgd", "ssge-wgd"]


def _write_run(path: Path, particles: np.ndarray, **job_overrides) -> Path:
    job = {
        "experiment": "synthetic",
        "dataset": "gaussian",
        "method": "svgd",
        "seed": 42,
        "scale": "quick",
        "particles": int(particles.shape[0]),
        "steps": 10,
        "lr": 0.1,
        "bandwidth": "median",
        "rule": "svgd",
    }
    job.update(job_overrides)
    np.savez(path, particles=particles, initial=np.zeros_like(particles), job=np.array(json.dumps(job, sort_keys=True)))
    return path


@pytest.fixture(autouse=True)
def _small_reference(monkeypatch):
    # keep the tests fast: a 2000-point reference set instead of 20000
    monkeypatch.setattr(steps, "REFERENCE_SAMPLES", 2000)
    monkeypatch.setattr(steps, "IID_REPEATS", 3)


@pytest.fixture
def gaussian_runs(tmp_path):
    target = make_target("gaussian")
    paths = []
    for i, method in enumerate(METHODS):
        x = target.sample(60, torch.Generator().manual_seed(100 + i)).numpy()
        paths.append(_write_run(tmp_path / f"gaussian_{method}.npz", x, method=method))
    return paths


def test_compute_metrics_exact_samples_are_near_the_noise_floor():
    x = make_target("gaussian").sample(200, torch.Generator().manual_seed(7))
    m = steps.compute_metrics(x, "gaussian", reference_samples=2000)
    for key in rep.METRIC_KEYS:
        assert np.isfinite(m[key]) and m[key] >= 0
    assert m["cov_xy_err_kind"] == "relative"
    assert m["energy_distance"] < 0.1
    base = m["iid_baseline"]
    assert base["n"] == 200 and set(rep.METRIC_KEYS) <= set(base)
    shifted = steps.compute_metrics(x + 2.0, "gaussian", reference_samples=2000, baseline=False)
    mean = make_target("gaussian").moments()[0].numpy()
    assert shifted["mean_error"] == pytest.approx(np.linalg.norm(x.numpy().mean(0) + 2.0 - mean))
    assert shifted["energy_distance"] > 10 * m["energy_distance"]
    assert "iid_baseline" not in shifted


def test_compute_metrics_funnel_reports_absolute_xy_error():
    x = make_target("funnel").sample(100, torch.Generator().manual_seed(3)).numpy()
    m = steps.compute_metrics(x, "funnel", reference_samples=2000, baseline=False)
    assert m["cov_xy_err_kind"] == "absolute"
    cov_xy = np.cov(x, rowvar=False, ddof=0)[0, 1]
    assert m["cov_xy_err"] == pytest.approx(abs(cov_xy))
    assert m["max_cov_rel_err"] == pytest.approx(max(m["cov_rel_err_xx"], m["cov_rel_err_yy"]))


def test_write_metrics_table(tmp_path, gaussian_runs):
    out_csv, out_tex = tmp_path / "out" / "metrics.csv", tmp_path / "out" / "metrics.tex"
    out_html = tmp_path / "out" / "metrics.html"
    from_runs.write_metrics_table(gaussian_runs, out_csv, out_tex, out_html=out_html)
    frame = pd.read_csv(out_csv)
    expected = [
        "target",
        "method",
        "label",
        "seed",
        "scale",
        "n",
        "steps",
        "mean_error",
        "cov_rel_err_xx",
        "cov_xy_err",
        "cov_rel_err_yy",
        "max_cov_rel_err",
        "energy_distance",
    ]
    assert list(frame.columns[: len(expected)]) == expected
    assert len(frame) == len(METHODS) + 1
    assert list(frame["method"]) == METHODS + ["iid"]
    assert list(frame["label"][:4]) == ["SVGD", "kde-WGD", "sge-WGD", "ssge-WGD"]
    base = frame[frame["method"] == "iid"].iloc[0]
    assert base["label"] == "exact iid (n=60)" and base["n"] == 60 and base["target"] == "gaussian"
    assert (frame["scale"] == "quick").all()
    assert frame[expected[7:]].notna().all().all()
    tex = out_tex.read_text()
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"\midrule" in tex
    assert "quick" in tex and "exact iid" in tex and "SVGD" in tex
    assert "0.6871" in tex and "3.389" in tex  # exact moments in the caption
    assert r"\textit{exact iid (n=60)}" in tex and r"$\Sigma_{xx}$" in tex
    # one LaTeX row per CSV row, the iid row's seed and steps a dash
    rows = [line for line in tex.splitlines() if line.endswith(r"\\")][1:]
    assert len(rows) == len(frame) and rows[-1].split(" & ")[2:5] == ["--", "60", "--"]
    page = out_html.read_text()
    assert "exact iid (n=60)" in page and "kde-WGD" in page and "Σxx" in page
    assert f">{frame.loc[0, 'energy_distance']:.3f}<" in page
    assert not list((tmp_path / "out").glob(".*tmp*"))  # no temp files left behind


def test_write_metrics_table_two_targets_and_mixed_scales(tmp_path, gaussian_runs):
    x = make_target("funnel").sample(40, torch.Generator().manual_seed(5)).numpy()
    funnel = _write_run(tmp_path / "funnel_svgd.npz", x, dataset="funnel", scale="paper", bandwidth=0.5)
    out_csv, out_tex = tmp_path / "m.csv", tmp_path / "m.tex"
    from_runs.write_metrics_table(gaussian_runs[:2] + [funnel], out_csv, out_tex)
    frame = pd.read_csv(out_csv)
    assert list(frame["target"]) == ["gaussian"] * 3 + ["funnel"] * 2
    assert frame.loc[frame["target"] == "funnel", "cov_xy_err_kind"].eq("absolute").all()
    tex = out_tex.read_text()
    assert "paper" in tex and "quick" in tex and "funnel" in tex


def test_several_seeds_show_one_row_per_method_with_mean_and_standard_error(tmp_path):
    """Five seeds of a method: the CSV keeps a row per run (the claim scorecard reads them),
    the LaTeX and HTML tables one row per method, mean ± s.e. over its seeds."""
    target = make_target("gaussian")
    paths = []
    for method in ("svgd", "sge-wgd"):
        for seed in (42, 38, 39):
            x = target.sample(50, torch.Generator().manual_seed(seed + len(method))).numpy()
            paths.append(_write_run(tmp_path / f"{method}_{seed}.npz", x, method=method, seed=seed))
    out_csv, out_tex, out_html = tmp_path / "m.csv", tmp_path / "m.tex", tmp_path / "m.html"
    from_runs.write_metrics_table(paths, out_csv, out_tex, out_html=out_html)
    frame = pd.read_csv(out_csv)
    assert len(frame) == 7 and list(frame["seed"].dropna().astype(int)) == [42, 38, 39] * 2
    svgd = frame.loc[frame["method"] == "svgd", "energy_distance"].to_numpy()
    mean, se = svgd.mean(), svgd.std(ddof=1) / np.sqrt(3)
    tex = out_tex.read_text()
    rows = [line for line in tex.splitlines() if line.endswith(r"\\")][1:]
    assert len(rows) == 3  # SVGD, sge-WGD, exact iid
    assert rows[0].split(" & ")[2] == "3 seeds"
    # the ED column in one notation, chosen from its values (the methods' means and the iid row)
    ed = list(frame.groupby("method", sort=False)["energy_distance"].mean())
    notation, digits = column_notation(ed)
    column = Column("energy_distance", "ED", "min", digits, notation=notation)
    cell = Cell(mean, se, 3)
    last = rows[0].rstrip(r" \\").split(" & ")[-1]  # noqa: B005 (strips the characters " " and "\\" ending a LaTeX row)
    assert last.removeprefix(r"\textbf{").removesuffix("}") == format_cell(cell, column, pm=r"$\pm$", kind="latex")
    assert format_cell(cell, column, kind="html") in out_html.read_text()


def test_duplicate_runs_are_rejected(tmp_path, gaussian_runs):
    copy = tmp_path / "copy.npz"
    copy.write_bytes(gaussian_runs[0].read_bytes())
    with pytest.raises(ValueError, match="copy.npz"):
        from_runs.write_metrics_table([gaussian_runs[0], copy], tmp_path / "a.csv", tmp_path / "a.tex")


def test_plot_target_panels(tmp_path, gaussian_runs):
    out_png, out_pdf = tmp_path / "fig" / "gaussian.png", tmp_path / "fig" / "gaussian.pdf"
    from_runs.plot_target_panels("gaussian", gaussian_runs, out_png, out_pdf)
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out_png.stat().st_size > 10_000
    assert out_pdf.read_bytes()[:5] == b"%PDF-"
    assert not list((tmp_path / "fig").glob(".*tmp*"))


def test_wrong_target_names_the_file(tmp_path, gaussian_runs):
    x = make_target("funnel").sample(30, torch.Generator().manual_seed(1)).numpy()
    funnel = _write_run(tmp_path / "a_funnel_run.npz", x, dataset="funnel")
    with pytest.raises(ValueError, match="a_funnel_run.npz"):
        from_runs.plot_target_panels("gaussian", gaussian_runs + [funnel], tmp_path / "f.png", tmp_path / "f.pdf")
    assert not (tmp_path / "f.png").exists()


def test_bad_inputs_name_the_file(tmp_path):
    no_job = tmp_path / "no_job.npz"
    np.savez(no_job, particles=np.zeros((5, 2)))
    with pytest.raises(ValueError, match="no_job.npz.*job"):
        rep.load_run(no_job)
    no_particles = tmp_path / "no_particles.npz"
    np.savez(no_particles, job=np.array(json.dumps({"dataset": "gaussian"})))
    with pytest.raises(ValueError, match="no_particles.npz.*particles"):
        from_runs.write_metrics_table([no_particles], tmp_path / "a.csv", tmp_path / "a.tex")
    bad_shape = _write_run(tmp_path / "bad_shape.npz", np.zeros((5, 3)))
    with pytest.raises(ValueError, match="bad_shape.npz"):
        rep.load_run(bad_shape)
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        rep.load_run(tmp_path / "missing.npz")


def test_label_fallbacks(tmp_path):
    x = np.random.default_rng(0).normal(size=(10, 2))
    run = rep.load_run(_write_run(tmp_path / "r.npz", x, method="my-new-method"))
    assert run.label == "my-new-method"
    run = rep.load_run(_write_run(tmp_path / "s.npz", x, method="sge-wgd"))
    assert run.label == "sge-WGD"
    run = rep.load_run(_write_run(tmp_path / "t.npz", x, method="sge-wgd", label="Custom"))
    assert run.label == "Custom"


def test_figures_leave_the_global_matplotlib_style_alone(tmp_path, gaussian_runs):
    import matplotlib as mpl
    import test_toy_report as toy_fixtures

    from repens.report import toy as toy_rep  # noqa: F401 (imported before the rcParams snapshot: import-time changes count)

    before = dict(mpl.rcParams)
    from_runs.plot_target_panels("gaussian", gaussian_runs[:2], tmp_path / "g.png", tmp_path / "g.pdf")
    reg = [toy_fixtures._write_regression(tmp_path, m) for m in ("hmc", "de")]
    from_runs.plot_regression_panels(reg, tmp_path / "r.png", tmp_path / "r.pdf")
    after = dict(mpl.rcParams)
    assert {k for k in before if before[k] != after[k]} == set()


def test_metrics_table_one_notation_per_column_and_the_best_in_bold(tmp_path):
    """A column whose values span 1e-17 to 0.5 is written in scientific notation in every
    cell (never 1.2×10⁻¹⁷ beside 0.500), a column of ordinary values in fixed decimals;
    the lowest mean of each column among the methods is bold, the exact-iid row never."""
    import html
    import re

    target = make_target("gaussian")
    mean = target.moments()[0].numpy()
    x = target.sample(60, torch.Generator().manual_seed(3)).numpy()
    exact_mean = x - x.mean(0) + mean  # mean error ~1e-16
    paths = [
        _write_run(tmp_path / "a.npz", exact_mean, method="svgd"),
        _write_run(tmp_path / "b.npz", x + 0.5, method="sge-wgd"),
    ]
    out_csv, out_tex, out_html = tmp_path / "m.csv", tmp_path / "m.tex", tmp_path / "m.html"
    from_runs.write_metrics_table(paths, out_csv, out_tex, out_html=out_html)
    frame = pd.read_csv(out_csv)
    assert 0 < frame.loc[0, "mean_error"] < 1e-10 and frame.loc[1, "mean_error"] > 0.3
    page = out_html.read_text()
    body = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    cells = [re.findall(r'<td id="T_repens_(row\d+_col\d+)"[^>]*>(.*?)</td>', row) for row in body.split("</tr>")[:-1]]
    head = html.unescape(page.split("<thead>", 1)[1].split("</thead>", 1)[0])
    headers = re.findall(r'class="col_heading level0 col\d+" >([^<]*)<', head)
    assert headers[3:] == ["Mean", "Σxx", "Σxy", "Σyy", "Max", "ED"]
    css = page.split("<style", 1)[1].split("</style>", 1)[0]
    bold = {
        cell_id
        for block in re.findall(r"([^{}]+)\{[^}]*font-weight: bold", css)
        for cell_id in re.findall(r"#T_repens_(row\d+_col\d+)", block)
    }
    for j in range(3, 9):
        texts = [row[j][1] for row in cells]
        sci = ["×10" in t for t in texts]
        assert all(sci) or not any(sci), (headers[j], texts)  # one notation per column
        decimals = {len(t.split("±")[0].split(".")[1]) for t in texts if "×10" not in t}
        assert len(decimals) <= 1, (headers[j], texts)
        assert cells[2][j][0] not in bold  # the iid row (the noise floor) is never bold
    # the mean error and the energy distance: the exact-mean particles are best (the
    # covariances are the same for both: a tie, both bold)
    for j in (3, 8):
        assert cells[0][j][0] in bold and cells[1][j][0] not in bold, headers[j]
    assert cells[0][4][0] in bold and cells[1][4][0] in bold
    assert all("×10" in row[3][1] for row in cells)  # the mean errors: scientific throughout
    tex = out_tex.read_text()
    assert r"\textbf{\boldmath $" in tex  # a bold cell in math is bold in LaTeX too
    assert "$$" not in tex.split(r"\begin{tabular}", 1)[1]  # one math span per cell


def test_a_run_with_a_non_finite_particle_never_reaches_the_table(tmp_path):
    x = np.random.default_rng(0).normal(size=(20, 2))
    x[3, 1] = np.nan
    bad = _write_run(tmp_path / "bad.npz", x)
    with pytest.raises(ValueError, match=r"bad\.npz: particles hold a non-finite number"):
        steps.metrics_summary([bad], reference_samples=500)
