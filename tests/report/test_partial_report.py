"""`snakemake --report report.html` after a partial run (workflow/rules/common.smk,
partial_report): the report holds the figures and tables that were built, and its main
page lists those of its targets that were not, each with the command that builds it.

The partial run is faked: a few of the outputs marked report(...) are written by hand (a
report reads only the files and, where there is any, Snakemake's metadata), so the test
needs one Snakemake start per report, a few seconds, and no training.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import report_check as rc

ROOT = Path(__file__).resolve().parents[2]

# rule all's figures and tables (Table 2 is not in `all`): path -> the rule that makes it
ALL_MARKED = {
    "results/synthetic/metrics.html": "summarize_synthetic",
    "results/figures/fig2_gaussian.png": "plot_synthetic_figure",
    "results/figures/figF1_funnel.png": "plot_synthetic_figure",
    "results/figures/fig1_regression.png": "plot_toy_figure",
    "results/figures/fig3_classification.png": "plot_toy_figure",
    "results/toy/distance_to_hmc.html": "summarize_toy",
    "results/table1.png": "summarize_image",
    "results/table1.html": "summarize_image",
    "results/table1_vs_paper.html": "summarize_image",
    "results/figures/claims": "plot_claim_evidence",
    "results/claims.html": "write_claims_page",
    "results/figures/table1_training.png": "plot_training_curves",
    "results/figures/table1_repulsion.png": "plot_training_curves",
}


def _write_outputs(workdir: Path, paths: list[str]) -> None:
    """Minimal stand-ins of built outputs: a real PNG, a small HTML table."""
    from PIL import Image

    for path in paths:
        file = workdir / path
        file.parent.mkdir(parents=True, exist_ok=True)
        if file.suffix == ".png":
            Image.new("RGB", (40, 30), (30, 90, 200)).save(file)
        else:
            file.write_text(f"<table><tr><td>{path}</td></tr></table>\n")


def _report(workdir: Path, *args: str) -> tuple[str, str]:
    """``snakemake --report`` in ``workdir`` (its own config.yaml); the page and the log."""
    (workdir / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    report = workdir / "report.html"
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(workdir),
        "--report",
        str(report),
        *args,
    ]
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "REPENS_OFFLINE": "1"}
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return report.read_text(), log


def _missing(description: str) -> dict[str, str]:
    """The "Not built yet" list of the main page: path -> the command that builds it."""
    if "Not built yet" not in description:
        return {}
    section = description.split("Not built yet", 1)[1].split("</ul>", 1)[0]
    found = {}
    for item in re.findall(r"<li>(.*?)</li>", section, re.S):
        literals = [html.unescape(re.sub(r"<[^>]+>", "", t)) for t in re.findall(r"<tt[^>]*>(.*?)</tt>", item, re.S)]
        path, command = literals[0], " ".join(literals[-1].split())
        found[path] = command
    return found


def test_report_after_a_partial_run_shows_what_exists_and_lists_what_is_missing(tmp_path):
    built = ["results/figures/fig2_gaussian.png", "results/synthetic/metrics.html"]
    _write_outputs(tmp_path, built)
    page, log = _report(tmp_path)  # the default target, rule all

    results = rc.read_var(page, "results")
    assert sorted(results) == sorted(built)
    # each built one as a complete run's report holds it: its bytes, caption, category, labels
    assert rc.check_report(page, tmp_path) == []
    description = rc.read_var(page, "workflow_desc")
    assert rc.DESCRIPTION in description
    missing = _missing(description)
    assert sorted(missing) == sorted(set(ALL_MARKED) - set(built))
    for path, command in missing.items():
        assert command == f"snakemake {path} -s {ROOT / 'Snakefile'} -d {tmp_path}"
    assert "results/table2_uci.html" not in description  # not a target of `all`
    assert "11 of the figures and tables its targets make" in description
    # the rule and how far its inputs are, e.g. Table 1's: none of its training runs
    assert re.search(r"summarize_image</tt>, 1 of its \d+ inputs built", description)
    # the log says it too
    for path in missing:
        assert f"not built, listed on the report's main page: {path}" in log


@pytest.mark.slow  # a second Snakemake start: second stage of .ci/run
def test_partial_report_of_named_targets_lists_only_theirs_and_repeats_the_config(tmp_path):
    _write_outputs(tmp_path, ["results/figures/fig2_gaussian.png"])
    page, _ = _report(tmp_path, "results/figures/fig2_gaussian.png", "summarize_toy", "--config", "scale=paper")
    assert sorted(rc.read_var(page, "results")) == ["results/figures/fig2_gaussian.png"]
    assert rc.check_report(page, tmp_path) == []
    missing = _missing(rc.read_var(page, "workflow_desc"))
    assert missing == {
        "results/toy/distance_to_hmc.html": "snakemake results/toy/distance_to_hmc.html"
        f" -s {ROOT / 'Snakefile'} -d {tmp_path} --config scale=paper"
    }

    # every target built: a complete report, no list
    _write_outputs(tmp_path, ["results/toy/distance_to_hmc.html"])
    page, log = _report(tmp_path, "results/figures/fig2_gaussian.png", "summarize_toy")
    assert sorted(rc.read_var(page, "results")) == [
        "results/figures/fig2_gaussian.png",
        "results/toy/distance_to_hmc.html",
    ]
    assert "Not built yet" not in rc.read_var(page, "workflow_desc")
    assert "not built" not in log


def test_the_missing_list_covers_every_marked_output_of_rule_all():
    """The test's list of rule all's figures and tables is the rule files' (Table 2 aside)."""
    marked = set(rc.report_outputs()) - {
        "results/table2_uci.html",
        "results/table2_vs_seeds.html",
        "results/table2_vs_de.html",
    }
    assert marked == set(ALL_MARKED)
