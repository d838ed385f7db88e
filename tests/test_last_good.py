"""A failed aggregate rule (table, figure) keeps the last good outputs: Snakemake deletes
a failed job's outputs, so each aggregate rule copies its outputs to results/last_good/
after every success, and its log names those copies after a failure."""

from __future__ import annotations

import pytest
import yaml

from repens.pipeline.last_good import last_good_path, main
from test_workflow import ROOT, snakemake


def test_last_good_path():
    assert str(last_good_path("results/synthetic/metrics.csv")) == "results/last_good/synthetic/metrics.csv"
    assert str(last_good_path("results/table1.tex")) == "results/last_good/table1.tex"
    assert str(last_good_path("other/x.png")) == "last_good/other/x.png"


def test_save_then_report(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "results" / "figures" / "a.png"
    out.parent.mkdir(parents=True)
    out.write_bytes(b"png")
    assert main(["save", "results/figures/a.png"]) == 0
    assert (tmp_path / "results/last_good/figures/a.png").read_bytes() == b"png"
    out.unlink()
    assert main(["failed", "results/figures/a.png", "results/b.csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "kept at results/last_good/figures/a.png" in lines[-2]
    assert lines[-1] == "failed; results/b.csv is not rebuilt and has no last good copy"


@pytest.mark.slow  # an end-to-end run: second stage of .ci/run
def test_failed_summary_keeps_the_last_good_outputs(tmp_path):
    """A real Snakemake run: build the table and Figure 2, corrupt one input, rebuild."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    exp = config["experiments"]["synthetic"]
    exp["methods"] = ["svgd", "kde-wgd"]
    exp["quick"] = {"settings": {"steps": 3, "log_every": 1}, "datasets": {"funnel": {"particles": 8}}}
    exp["datasets"]["gaussian"]["particles"] = 8
    targets = ["results/synthetic/metrics.csv", "results/figures/fig2_gaussian.png"]
    rc, out = snakemake(tmp_path, "-c1", *targets, config=config, timeout=600)
    assert rc == 0, out
    outputs = targets + ["results/synthetic/metrics.tex", "results/figures/fig2_gaussian.pdf"]
    good = {path: (tmp_path / path).read_bytes() for path in outputs}
    for path in outputs:
        assert (tmp_path / last_good_path(path)).read_bytes() == good[path], path

    (tmp_path / "results/synthetic/gaussian/svgd/seed42/particles.npz").write_bytes(b"not an npz")
    rc, out = snakemake(tmp_path, "-c1", "--keep-going", *targets, config=config, timeout=600)
    assert rc != 0, out
    assert "summarize_synthetic" in out and "plot_synthetic_figure" in out
    for path in outputs:
        assert not (tmp_path / path).exists(), path  # Snakemake removed the failed job's outputs ...
        assert (tmp_path / last_good_path(path)).read_bytes() == good[path], path  # ... not these
    log = (tmp_path / "logs/synthetic/summarize_synthetic.log").read_text()
    assert "is kept at results/last_good/synthetic/metrics.csv" in log, log
