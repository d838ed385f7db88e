"""The checks of the report stage (tests/report/report_check.py) on a fake report, and
which outputs the rule files put in the report (every figure and table, as
HTML tables; PNG only for Table 1's table1.png)."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import report_check as rc

ROOT = Path(__file__).resolve().parents[2]


def test_the_report_has_every_figure_and_table_of_the_workflow():
    assert sorted(rc.report_outputs()) == sorted(
        [
            "results/synthetic/metrics.html",
            "results/figures/fig2_gaussian.png",
            "results/figures/figF1_funnel.png",
            "results/figures/fig1_regression.png",
            "results/figures/fig3_classification.png",
            "results/toy/distance_to_hmc.html",
            "results/table1.png",
            "results/table1.html",
            "results/table1_vs_paper.html",
            "results/table2_uci.html",
            "results/table2_vs_seeds.html",
            "results/table2_vs_de.html",
            "results/figures/claims",
            "results/claims.html",
            "results/figures/table1_training.png",
            "results/figures/table1_repulsion.png",
        ]
    )


def test_every_report_output_has_a_category_labels_and_a_caption():
    for path in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for call in re.findall(r"report\((.*?)\n        \)", path.read_text(), re.DOTALL):
            assert "category=" in call and "subcategory=" in call and "labels=" in call, (path.name, call)
            caption = re.search(r'caption="\.\./report/([\w.]+)"', call)
            assert caption and (ROOT / "workflow" / "report" / caption[1]).read_text().strip(), call
    assert 'report: "workflow/report/workflow.rst"' in (ROOT / "Snakefile").read_text()
    assert rc.DESCRIPTION in (ROOT / "workflow" / "report" / "workflow.rst").read_text()


def _uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def _fake_run(tmp_path: Path) -> tuple[Path, dict]:
    files = {"results/figures/fig2_gaussian.png": b"\x89PNG fig", "results/synthetic/metrics.html": b"<table>"}
    for path, data in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    results = {
        path: {
            "mime_type": rc.MIME[Path(path).suffix],
            "data_uri": _uri(data, rc.MIME[Path(path).suffix]),
            "caption": "<p>what it shows</p>",
            "labels": {"output": "x", "format": "y"},
        }
        for path, data in files.items()
    }
    return tmp_path, results


def _page(results: dict, categories: dict | None = None, description: str = rc.DESCRIPTION) -> str:
    categories = {"1. Synthetic": {"Figures": sorted(results)}} if categories is None else categories
    # the bundled libraries declare the same names first
    return (
        f"<script>var results = new Array(3);</script>\n<script id='workflow-desc'>var workflow_desc = "
        f"{json.dumps('<h1>' + description + '</h1>')};</script>\n"
        f"<script id='results'>var results = {json.dumps(results)};</script>\n"
        f"<script id='categories'>var categories = {json.dumps(categories)};</script>"
    )


def test_check_report_passes_a_complete_report(tmp_path):
    workdir, results = _fake_run(tmp_path)
    assert rc.check_report(_page(results), workdir) == []


def test_check_report_finds_what_is_missing_or_wrong(tmp_path):
    workdir, results = _fake_run(tmp_path)
    missing = {k: v for k, v in results.items() if "metrics" not in k}
    assert rc.check_report(_page(missing), workdir) == ["results/synthetic/metrics.html: not in the report"]
    changed = json.loads(json.dumps(results))
    changed["results/figures/fig2_gaussian.png"]["data_uri"] = _uri(b"other", "image/png")
    changed["results/synthetic/metrics.html"]["caption"] = ""
    changed["results/synthetic/metrics.html"]["labels"] = {"output": "x"}
    problems = rc.check_report(_page(changed, {"c": {"s": ["results/figures/fig2_gaussian.png"]}}, "other"), workdir)
    assert problems == [
        "no workflow description page (no 'Repulsive Deep Ensembles are Bayesian' in workflow_desc)",
        "results/figures/fig2_gaussian.png: the report's copy differs from the file",
        "results/synthetic/metrics.html: no caption",
        "results/synthetic/metrics.html: labels {'output': 'x'} lack output/format",
        "results/synthetic/metrics.html: in no category",
    ]
    # a table the run made but no rule marks for the report
    (workdir / "results" / "table9.html").write_text("<table>")
    assert rc.check_report(_page(results), workdir) == [
        "results/table9.html: made by the run but not marked report(...) in workflow/rules/"
    ]


def test_blank_screenshots_are_found(tmp_path):
    from PIL import Image

    white = np.full((200, 300, 3), 255, dtype=np.uint8)
    Image.fromarray(white).save(tmp_path / "blank.png")
    assert "colours" in rc.blank(tmp_path / "blank.png")
    drawn = white.copy()
    rng = np.random.default_rng(0)
    drawn[50:150, 50:250] = rng.integers(0, 255, size=(100, 200, 3), dtype=np.uint8)
    Image.fromarray(drawn).save(tmp_path / "drawn.png")
    assert rc.blank(tmp_path / "drawn.png") is None


def test_tiny_config_leaves_out_what_has_no_data(tmp_path, capsys):
    config, experiments = rc.tiny_config(tmp_path)  # an empty data folder
    assert experiments == ["synthetic", "toy"]
    assert "LEFT OUT: Table 1" in capsys.readouterr().out
    assert config["experiments"]["toy"]["methods"] == ["de", "svgd"]
    (tmp_path / "uci" / "yacht" / "data").mkdir(parents=True)
    (tmp_path / "uci" / "yacht" / "data" / "data.txt").write_text("0 1\n")
    config, experiments = rc.tiny_config(tmp_path)
    assert experiments == ["synthetic", "toy", "uci"]
    assert list(config["experiments"]["uci"]["datasets"]) == ["yacht"] and config["uci_data"] == str(tmp_path / "uci")


@pytest.mark.parametrize("name", ["results", "categories"])
def test_read_var_skips_the_libraries(name):
    page = _page({"a": {"x": 1}}, {"c": {"s": ["a"]}})
    assert rc.read_var(page, name)


def test_shown_problems_wants_each_result_alone_in_its_own_element(tmp_path):
    _, results = _fake_run(tmp_path)
    fig, table = "results/figures/fig2_gaussian.png", "results/synthetic/metrics.html"
    assert rc.shown_problems({fig: [f"img {fig}"], table: [f"iframe {table}"]}, results) == []
    problems = rc.shown_problems({fig: [f"iframe {fig}"], table: [f"iframe {table}", f"img {fig}"]}, results)
    assert [p.split(":")[0] for p in problems] == [fig, table]
    assert "one <img> with its data" in problems[0] and "alone" in problems[1]
    assert rc.shown_problems({fig: []}, results) == [
        f"{fig}: the report does not show it alone (one <img> with its data in the rendered page; it held no result)",
        f"{table}: never selected in the rendered page",
    ]


@pytest.mark.parametrize("command", ["false", "sleep 0.5; exit 3"])
def test_a_browser_that_does_not_start_is_an_error_not_a_hang(tmp_path, command):
    # exits before (false) or after (sleep) the first command is written
    fake = tmp_path / "browser"
    fake.write_text(f"#!/bin/sh\n{command}\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match="closed its pipe"):
        rc.Browser(str(fake), timeout=30)


def test_a_browser_that_never_answers_times_out(tmp_path):
    fake = tmp_path / "browser"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(0o755)
    with pytest.raises(TimeoutError, match="did not answer within 1 s"):
        rc.Browser(str(fake), timeout=1)


#: A stand-in for the report's app: selecting a result draws it, but draws the table's
#: data as an <img> when ``wrong`` is true.
_FAKE_APP = """<html><body><div id="view"></div><script>
var results = {results};
var app = {{setView: function (v) {{
  var tag = v.content === "html" && !{wrong} ? "iframe" : "img";
  document.getElementById("view").innerHTML = "<" + tag + " src='" + v.contentPath + "'></" + tag + ">";
}}}};
</script></body></html>"""


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs a headless Chromium (the report stage installs it)")
@pytest.mark.parametrize("wrong", [False, True])
def test_select_records_what_a_browser_renders(tmp_path, wrong):
    _, results = _fake_run(tmp_path)
    page = tmp_path / "app.html"
    page.write_text(_FAKE_APP.format(results=json.dumps(results), wrong=json.dumps(wrong)))
    with rc.Browser("chromium") as browser:
        browser.open(page)
        seen = {path: browser.evaluate(rc.SELECT.format(path=json.dumps(path), settle=50)) for path in results}
        browser.screenshot(tmp_path / "shot.png")
    from PIL import Image

    assert Image.open(tmp_path / "shot.png").size == (1800, 1100)
    problems = rc.shown_problems(seen, results)
    if wrong:
        assert problems == [
            "results/synthetic/metrics.html: the report does not show it alone (one <iframe> with its data "
            "in the rendered page; it held ['img results/synthetic/metrics.html'])"
        ]
    else:
        assert problems == []
