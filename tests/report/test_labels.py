"""A method's label from config.yaml shows in every figure and table.

Every report takes its labels the same way: the workflow passes ``config.yaml``'s
labels as JSON (``--labels``, tests/test_workflow.py checks every report rule does) and
each report function shows them, also for a method key no built-in table knows. Here
each report is drawn from small fake inputs with a new label and the label is looked
for in what it writes: the text of tables (TeX, CSV, HTML) and every text artist of figures
(captured at save time, since PNG/PDF text cannot be grepped).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import test_image_report as image_fixtures
import test_toy_report as toy_fixtures
import torch

from repens.models.targets import make_target
from repens.pipeline import from_runs
from repens.report import figures as figures_rep
from repens.report import image as image_rep
from repens.report import tables as tables_rep
from repens.report import uci as uci_rep
from repens.summaries import synthetic as synthetic_steps

LABEL = "Zeta (our new one)"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def figure_texts(monkeypatch):
    """Every text of every figure saved while the test runs (titles, legends, ...)."""
    import matplotlib.table
    import matplotlib.text

    texts: list[str] = []
    real = figures_rep.save_figure_atomic

    def capture(fig, path, **kwargs):
        texts.extend(t.get_text() for t in fig.findobj(matplotlib.text.Text))
        for table in fig.findobj(matplotlib.table.Table):  # cells are not children of the figure
            texts.extend(cell.get_text().get_text() for cell in table.get_celld().values())
        return real(fig, path, **kwargs)

    monkeypatch.setattr(figures_rep, "save_figure_atomic", capture)
    monkeypatch.setattr(tables_rep, "save_figure_atomic", capture)
    return texts


def _synthetic_runs(tmp_path: Path, target: str) -> list[Path]:
    x = make_target(target).sample(40, torch.Generator().manual_seed(0)).numpy()
    paths = []
    for method in ("svgd", "zeta"):
        job = {
            "experiment": "synthetic",
            "dataset": target,
            "method": method,
            "seed": 42,
            "scale": "quick",
            "particles": 40,
            "steps": 10,
            "lr": 0.1,
            "bandwidth": "median",
        }
        path = tmp_path / f"{target}_{method}.npz"
        np.savez(path, particles=x, initial=np.zeros_like(x), job=np.array(json.dumps(job)))
        paths.append(path)
    return paths


@pytest.mark.parametrize("target", ["gaussian", "funnel"])
def test_synthetic_figures_and_table_show_config_labels(tmp_path, monkeypatch, figure_texts, target):
    monkeypatch.setattr(synthetic_steps, "REFERENCE_SAMPLES", 1000)
    monkeypatch.setattr(synthetic_steps, "IID_REPEATS", 2)
    runs = _synthetic_runs(tmp_path, target)
    labels = {"svgd": "SVGD (config)", "zeta": LABEL}
    from_runs.plot_target_panels(target, runs, tmp_path / "f.png", tmp_path / "f.pdf", labels=labels)
    assert any(LABEL in t for t in figure_texts) and any("SVGD (config)" in t for t in figure_texts)
    from_runs.write_metrics_table(
        runs, tmp_path / "m.csv", tmp_path / "m.tex", labels=labels, out_html=tmp_path / "m.html"
    )
    assert LABEL in (tmp_path / "m.csv").read_text() and LABEL in (tmp_path / "m.html").read_text()
    assert "Zeta (our new one)" in (tmp_path / "m.tex").read_text()
    assert "SVGD (config)" in (tmp_path / "m.csv").read_text()


def test_toy_figures_and_table_show_config_labels(tmp_path, figure_texts):
    reg = {m: toy_fixtures._write_regression(tmp_path, m) for m in ("hmc", "de")}
    cls = {m: toy_fixtures._write_classification(tmp_path, m) for m in ("hmc", "de")}
    labels = {"hmc": "HMC", "de": LABEL}
    from_runs.plot_regression_panels([reg["hmc"], reg["de"]], tmp_path / "r.png", tmp_path / "r.pdf", labels=labels)
    assert any(LABEL in t for t in figure_texts)
    figure_texts.clear()
    from_runs.plot_classification_panels([cls["hmc"], cls["de"]], tmp_path / "c.png", tmp_path / "c.pdf", labels=labels)
    assert any(LABEL in t for t in figure_texts)
    from_runs.write_distance_table(
        (reg["hmc"], [reg["de"]]),
        (cls["hmc"], [cls["de"]]),
        tmp_path / "d.csv",
        tmp_path / "d.tex",
        labels=labels,
        out_html=tmp_path / "d.html",
    )
    assert LABEL in (tmp_path / "d.csv").read_text() and LABEL in (tmp_path / "d.tex").read_text()
    assert LABEL in (tmp_path / "d.html").read_text()


def test_image_table_shows_config_labels(tmp_path, figure_texts):
    inputs = [image_fixtures._metrics(tmp_path / f"{m}{s}.json", m, s, 0.9) for m in ("de", "zeta") for s in (38, 39)]
    out = {k: tmp_path / f"t.{k}" for k in ("tex", "png", "csv")}
    image_rep.write_table1(
        inputs,
        image_fixtures.REFERENCE,
        {"de": "DE (config)", "zeta": LABEL},
        ["fashionmnist"],
        ["de", "zeta"],
        out["tex"],
        out["png"],
        out["csv"],
        tmp_path / "vs.csv",
        out_html=tmp_path / "t.html",
        out_vs_paper_html=tmp_path / "vs.html",
    )
    assert LABEL in out["csv"].read_text() and LABEL in (tmp_path / "vs.csv").read_text()
    assert LABEL in (tmp_path / "t.html").read_text() and LABEL in (tmp_path / "vs.html").read_text()
    assert LABEL in out["tex"].read_text() and "DE (config)" in out["tex"].read_text()
    assert any(LABEL in t for t in figure_texts)


def test_uci_table_shows_config_labels(tmp_path, figure_texts):
    inputs = []
    for method in ("de", "zeta"):
        path = tmp_path / method / "metrics.json"
        path.parent.mkdir()
        splits = [{"split": k, "rmse": 1.0 + k, "nll": 2.0} for k in range(2)]
        path.write_text(json.dumps({"job": {"dataset": "yacht", "method": method, "scale": "quick"}, "splits": splits}))
        inputs.append(path)
    out = {k: tmp_path / "out" / f"t.{k}" for k in ("tex", "csv", "html")}
    uci_rep.write_uci_tables(
        inputs,
        ["yacht"],
        ["de", "zeta"],
        {"de": "DE", "zeta": LABEL},
        ROOT / "workflow" / "resources" / "table2_seeds.csv",
        out["tex"],
        out["csv"],
        out["html"],
        tmp_path / "out" / "vs.csv",
    )
    assert LABEL in out["tex"].read_text() and LABEL in out["csv"].read_text()
    assert LABEL in out["html"].read_text()
    assert "DE" in (tmp_path / "out" / "vs.csv").read_text().splitlines()[1]  # vs the seeds: de rows only
