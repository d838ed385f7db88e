import csv
import html
import json
from pathlib import Path

import pytest

from repens.report.image import read_reference, write_table1

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "workflow" / "resources" / "table1_paper.csv"


def _metrics(path, method, seed, acc, nll=0.3, extra=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    m = {
        "accuracy": acc,
        "nll": nll,
        "ece": 0.02,
        "entropy_ratio": 5.0,
        "md_ratio": 6.0,
        "auroc_entropy": 0.9,
        "auroc_md": 0.95,
        **(extra or {}),
    }
    job = {"dataset": "fashionmnist", "method": method, "seed": seed, "scale": "quick", "particles": 10, "steps": 600}
    path.write_text(json.dumps({"metrics": m, "job": job}))
    return path


def test_reference_is_complete():
    ref = read_reference(REFERENCE)
    assert len(ref) == 20
    assert ref[("fashionmnist", "sge-wgd")]["accuracy"] == pytest.approx(91.312)
    assert ref[("cifar10", "de")]["auroc_entropy_se"] == pytest.approx(0.004)


def test_table1_files(tmp_path):
    inputs = [
        _metrics(tmp_path / "a1.json", "de", 38, 0.90, extra={"aupr_entropy": 0.7, "brier": 0.1}),
        _metrics(tmp_path / "a2.json", "de", 39, 0.92, extra={"aupr_entropy": 0.9, "brier": 0.2}),
        _metrics(tmp_path / "b1.json", "dle", 38, 0.95, nll=0.2),
        _metrics(tmp_path / "b2.json", "dle", 39, 0.95, nll=0.2),
    ]
    out = {k: tmp_path / f"t.{k}" for k in ("tex", "png", "csv")}
    write_table1(
        inputs,
        REFERENCE,
        {"de": "Deep ensemble", "dle": "DLE"},
        ["fashionmnist"],
        ["dle", "de"],
        out["tex"],
        out["png"],
        out["csv"],
        tmp_path / "vs.csv",
        out_html=tmp_path / "t.html",
        out_vs_paper_html=tmp_path / "vs.html",
    )
    tex = out["tex"].read_text()
    # DLE is not in the paper: below the rule even though config lists it first
    assert tex.index("Deep ensemble") < tex.index(r"\cmidrule") < tex.index("DLE")
    assert r"91.000$\pm$1.000" in tex and r"\textbf{95.000$\pm$0.000}" in tex
    assert "15 equal-width bins" in tex
    rows = list(csv.DictReader(open(tmp_path / "vs.csv")))
    acc = next(r for r in rows if r["method"] == "de" and r["metric"] == "Accuracy (%)")
    assert float(acc["paper_mean"]) == pytest.approx(91.122)
    assert float(acc["ours_mean"]) == pytest.approx(91.0)
    assert float(acc["difference"]) == pytest.approx(91.0 - 91.122)
    assert int(acc["ours_seeds"]) == 2
    dle = [r for r in rows if r["method"] == "dle"]
    assert dle and all(r["paper_mean"] == "nan" for r in dle)
    # the field's extra metrics: in the CSV, not in the paper's LaTeX columns
    table = list(csv.DictReader(open(out["csv"])))
    de = next(r for r in table if r["method"] == "de")
    assert float(de["aupr_entropy_mean"]) == pytest.approx(0.8) and float(de["brier_mean"]) == pytest.approx(0.15)
    assert de["fpr95_md_mean"] == "nan"  # written before the metric existed
    # each run's metrics beside the table: what a paired comparison reads seed by seed
    runs = list(csv.DictReader(open(tmp_path / "t_runs.csv")))
    assert [(r["method"], r["seed"]) for r in runs] == [("de", "38"), ("de", "39"), ("dle", "38"), ("dle", "39")]
    assert [float(r["accuracy"]) for r in runs if r["method"] == "de"] == pytest.approx([90.0, 92.0])  # in %
    assert "AUPR" not in tex and "Brier" not in tex
    assert r"D'Angelo \& Fortuin" in tex and r"Accuracy in \%" in tex  # the caption, escaped
    assert out["png"].read_bytes()[:4] == b"\x89PNG"  # Table 1 keeps its PNG
    page = (tmp_path / "t.html").read_text()
    assert ">95.000±0.000<" in page and ">Deep ensemble<" in page and "AUPR" not in page
    assert "91.122" in (tmp_path / "vs.html").read_text()  # the paper's value beside ours


def test_a_method_with_a_paper_row_is_set_beside_that_row_and_says_so(tmp_path):
    """``paper_rows``: de-code-init, which the paper's table has no row for, is compared
    with the paper's DE row, named in the CSV (paper_method) and in the row's label;
    DLE (no paper row) stays without a paper value; DE keeps its own row."""
    inputs = [
        _metrics(tmp_path / "a.json", "de", 38, 0.89),
        _metrics(tmp_path / "c.json", "de-code-init", 38, 0.9111),
        _metrics(tmp_path / "d.json", "dle", 38, 0.95),
    ]
    labels = {"de": "Deep ensemble", "de-code-init": "DE (code's init)", "dle": "DLE"}
    args = (["fashionmnist"], ["de", "de-code-init", "dle"], *(tmp_path / f"t.{k}" for k in ("tex", "png", "csv")))
    write_table1(
        inputs,
        REFERENCE,
        labels,
        *args,
        tmp_path / "vs.csv",
        out_vs_paper_html=tmp_path / "vs.html",
        paper_rows={"de-code-init": "de", "dle": "de"} | {"de": "svgd"},
    )
    rows = list(csv.DictReader(open(tmp_path / "vs.csv")))
    acc = {r["method"]: r for r in rows if r["metric"] == "Accuracy (%)"}
    assert acc["de-code-init"]["paper_method"] == "de"
    assert float(acc["de-code-init"]["paper_mean"]) == pytest.approx(91.122)
    # the paper's printed 0.013 is the population sd over n = 5: its s.e. is 0.013 * 5 / sqrt(4) = 0.0325
    assert float(acc["de-code-init"]["paper_se"]) == pytest.approx(0.0325)
    assert float(acc["de-code-init"]["difference_in_errors"]) == pytest.approx((91.11 - 91.122) / 0.0325)
    assert acc["de"]["paper_method"] == "de"  # its own row wins over a paper_row
    assert acc["dle"]["paper_method"] == "de"  # a paper_row for a method the paper lacks is followed
    page = html.unescape((tmp_path / "vs.html").read_text())
    assert "DE (code's init) (beside the paper's Deep ensemble)" in page
    write_table1(inputs, REFERENCE, labels, *args, tmp_path / "vs.csv")
    acc = {r["method"]: r for r in csv.DictReader(open(tmp_path / "vs.csv")) if r["metric"] == "Accuracy (%)"}
    assert acc["de-code-init"]["paper_method"] == "" and acc["de-code-init"]["paper_mean"] == "nan"


def test_mixed_scales_refused(tmp_path):
    a = _metrics(tmp_path / "a.json", "de", 38, 0.9)
    b = _metrics(tmp_path / "b.json", "de", 39, 0.9)
    data = json.loads(b.read_text())
    data["job"]["scale"] = "paper"
    b.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="different scales"):
        write_table1(
            [a, b],
            REFERENCE,
            {},
            ["fashionmnist"],
            ["de"],
            tmp_path / "t.tex",
            tmp_path / "t.png",
            tmp_path / "t.csv",
            tmp_path / "v.csv",
        )


def test_table1_with_one_seed_shows_n_and_says_the_spread_is_not_measured(tmp_path):
    inputs = [
        _metrics(tmp_path / "a.json", "de", 38, 0.91),
        _metrics(tmp_path / "b1.json", "svgd", 38, 0.90),
        _metrics(tmp_path / "b2.json", "svgd", 39, 0.92),
    ]
    out = {k: tmp_path / f"t.{k}" for k in ("tex", "png", "csv")}
    # cifar10 has no run at all (no data here): its block is empty, not an error
    write_table1(
        inputs,
        REFERENCE,
        {"de": "Deep ensemble", "svgd": "SVGD"},
        ["fashionmnist", "cifar10"],
        ["de", "svgd"],
        out["tex"],
        out["png"],
        out["csv"],
        tmp_path / "vs.csv",
        out_html=tmp_path / "t.html",
    )
    tex = out["tex"].read_text()
    assert "n: seeds per row" in tex and "our seed-to-seed spread is not measured yet" in tex
    assert "10 particles, 600 steps" in tex  # sizes as numbers, not lists
    html = (tmp_path / "t.html").read_text()
    assert ">n<" in html and ">1<" in html and ">2<" in html
    assert ">91.000<" in html  # one seed: the mean alone, no ±
    rows = list(csv.DictReader(open(tmp_path / "vs.csv")))
    de = next(r for r in rows if r["method"] == "de" and r["metric"] == "Accuracy (%)")
    assert de["ours_seeds"] == "1" and de["ours_se"] == "nan"
    assert de["error_basis"].startswith("the paper's only")
    assert float(de["difference_in_errors"]) == pytest.approx((91.0 - 91.122) / 0.0325)  # the paper's s.e.
    svgd = next(r for r in rows if r["method"] == "svgd" and r["metric"] == "Accuracy (%)")
    assert svgd["error_basis"] == "ours and the paper's"


def test_table1_caption_and_note_print_no_python_lists(tmp_path):
    """Seeds, particles and steps read as numbers ("seeds 38, 39", "10 particles"), never
    as Python lists ("seeds [38, 39]", "[10] particles"), in the LaTeX caption, the HTML
    note and the values helper."""
    from repens.report.image import _values

    inputs = [_metrics(tmp_path / "a.json", "de", 38, 0.91), _metrics(tmp_path / "b.json", "de", 39, 0.92)]
    out = {k: tmp_path / f"t.{k}" for k in ("tex", "png", "csv")}
    write_table1(
        inputs,
        REFERENCE,
        {"de": "Deep ensemble"},
        ["fashionmnist"],
        ["de"],
        out["tex"],
        out["png"],
        out["csv"],
        tmp_path / "vs.csv",
        out_html=tmp_path / "t.html",
    )
    caption = out["tex"].read_text().split(r"\caption{", 1)[1].split(r"\label", 1)[0]
    note = (tmp_path / "t.html").read_text().split("<small>", 1)[1].split("</small>", 1)[0]
    for text in (caption, note):
        assert "[" not in text and "]" not in text, text
        assert "10 particles, 600 steps" in text
    assert "seeds 38, 39" in caption and "seeds 38, 39" in note
    assert _values([10, [10], None, 50]) == "10/50" and _values([None]) == "?" and _values([50000]) == "50,000"


def test_table1_vs_paper_html_is_wide_and_human_named(tmp_path):
    """The comparison a person reads: one row per (dataset, method), each metric's paper,
    ours and Δ / s.e. side by side under human names, the released code's definitions as
    extra columns; the caption states scale, seeds, n, sizes and that quick scale is not a
    reproduction. The CSV stays long and machine-readable."""
    code = {"nll_code": 0.25, "ece_code": 0.03, "md_ratio_code": 5.0, "auroc_md_code": 0.94}
    inputs = [
        _metrics(tmp_path / "a1.json", "de", 38, 0.90, extra=code),
        _metrics(tmp_path / "a2.json", "de", 39, 0.92, extra=code),
        _metrics(tmp_path / "b.json", "svgd", 38, 0.90, extra=code),
    ]
    out = {k: tmp_path / f"t.{k}" for k in ("tex", "png", "csv")}
    write_table1(
        inputs,
        REFERENCE,
        {"de": "Deep ensemble", "svgd": "SVGD"},
        ["fashionmnist"],
        ["de", "svgd", "fsvgd"],
        out["tex"],
        out["png"],
        out["csv"],
        tmp_path / "vs.csv",
        out_vs_paper_html=tmp_path / "vs.html",
    )
    page = html.unescape((tmp_path / "vs.html").read_text())
    body = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert body.count("<tr") == 2  # DE and SVGD; f-SVGD has no run of ours
    for raw in ("ours_mean", "difference_in_errors", "paper_error", "error_basis", "ours_seeds"):
        assert raw not in page
    head = page.split("<thead>", 1)[1].split("</thead>", 1)[0]
    for name in (
        ">paper<",
        ">ours<",
        ">Δ / s.e.<",
        ">Accuracy (%)<",
        ">NLL<",
        "NLL: the released code's definition (-log mean p)",
    ):
        assert name in head, name
    # DE: 91.0 ± 1.0 over two seeds against the paper's 91.122 ± 0.013 as printed, an s.e. of 0.0325
    # (x 5 / sqrt(4)); SVGD one seed: the value alone
    assert ">91.122 ± 0.033<" in body and ">91.000 ± 1.000<" in body and ">90.000<" in body
    z = (91.0 - 91.122) / (1.0**2 + 0.0325**2) ** 0.5
    assert f">{z:+.1f}<".replace("-", "−") in body
    assert f">{(90.0 - 91.134) / 0.06:+.1f}<".replace("-", "−") in body  # n = 1: over the paper's s.e. alone
    note = page.split("<small>", 1)[1].split("</small>", 1)[0]
    for text in (
        "Scale: quick",
        "seeds 38, 39",
        "n: seeds per row",
        "10 particles, 600 steps",
        "the paper's s.e. alone",
        "not a reproduction",
        "the released code's definition",
    ):
        assert text in note, text
    rows = list(csv.DictReader(open(tmp_path / "vs.csv")))  # long: one row per dataset, method and metric
    assert {"ours_mean", "difference_in_errors", "error_basis"} <= set(rows[0])
    assert any(r["metric"] == "NLL (code: -log mean p)" and r["method"] == "de" for r in rows)


def _table1(tmp_path, inputs):
    out = {k: tmp_path / f"t.{k}" for k in ("tex", "png", "csv")}
    write_table1(
        inputs, REFERENCE, {"de": "DE", "svgd": "SVGD"}, ["fashionmnist"], ["de", "svgd"], out["tex"], out["png"],
        out["csv"], tmp_path / "vs.csv",
    )  # fmt: skip
    return out


def test_a_run_copied_over_another_stops_table1_naming_both_files(tmp_path):
    de = [_metrics(tmp_path / f"de/seed{s}/metrics.json", "de", s, 0.9) for s in (38, 39)]
    svgd = [_metrics(tmp_path / f"svgd/seed{s}/metrics.json", "svgd", s, 0.9) for s in (38, 40)]
    svgd[1].write_bytes(de[0].read_bytes())  # DE seed 38 copied over SVGD seed 40
    with pytest.raises(ValueError, match="one run counted twice") as err:
        _table1(tmp_path, de + svgd)
    assert str(svgd[1]) in str(err.value) and str(de[0]) in str(err.value)
    assert not (tmp_path / "t.csv").exists()


def test_a_non_finite_metric_stops_table1_naming_the_file(tmp_path):
    runs = [_metrics(tmp_path / f"de/seed{s}/metrics.json", "de", s, 0.9) for s in (38, 39)]
    runs[1].write_text(runs[1].read_text().replace('"accuracy": 0.9', '"accuracy": NaN'))
    with pytest.raises(ValueError, match="metrics.accuracy is not a finite number") as err:
        _table1(tmp_path, runs)
    assert str(runs[1]) in str(err.value)
    assert not (tmp_path / "t.csv").exists()


def _bold_of(tmp_path, groups, unconverged=()):
    """(method -> {column: best}) from the CSV of a Table 1 with one DE run per protocol,
    kde-WGD best in accuracy and NLL at G.4's text, DE best at the code's protocol."""
    inputs = [
        _metrics(tmp_path / "m/de.json", "de", 38, 0.89, nll=0.31),
        _metrics(tmp_path / "m/kde.json", "kde-wgd", 38, 0.90, nll=0.30),
        _metrics(tmp_path / "m/fsvgd.json", "fsvgd", 38, 0.95, nll=0.10),
        _metrics(tmp_path / "m/dec.json", "de-code-protocol", 38, 0.91, nll=0.13),
        _metrics(tmp_path / "m/kdec.json", "kde-wgd-code-protocol", 38, 0.905, nll=0.14),
        _metrics(tmp_path / "m/ctl.json", "de-wgd-lr", 38, 0.99, nll=0.01),
    ]
    methods = ["de", "kde-wgd", "fsvgd", "de-code-protocol", "kde-wgd-code-protocol", "de-wgd-lr"]
    out = tmp_path / "t1.csv"
    write_table1(
        inputs,
        REFERENCE,
        {},
        ["fashionmnist"],
        methods,
        tmp_path / "t.tex",
        tmp_path / "t.png",
        out,
        tmp_path / "vs.csv",
        groups=groups,
        unconverged=unconverged,
    )
    rows = list(csv.DictReader(out.open()))
    return [r["method"] for r in rows], {r["method"]: (r["accuracy_best"], r["nll_best"]) for r in rows}


GROUPS = {
    "de-code-protocol": "authors' code (the paper's numbers)",
    "kde-wgd-code-protocol": "authors' code (the paper's numbers)",
    "de": "Appendix G.4's text",
    "kde-wgd": "Appendix G.4's text",
    "fsvgd": "Appendix G.4's text",
    "de-wgd-lr": "controls (other settings)",
}


def test_table1_bold_is_the_best_of_each_protocol_never_a_control(tmp_path):
    order, best = _bold_of(tmp_path, GROUPS)
    # blocks in the groups' order: the paper's protocol first, the controls last
    assert order == ["de-code-protocol", "kde-wgd-code-protocol", "de", "kde-wgd", "fsvgd", "de-wgd-lr"]
    assert best["de-code-protocol"] == ("1", "1") and best["kde-wgd-code-protocol"] == ("0", "0")
    assert best["fsvgd"] == ("1", "1") and best["de"] == ("0", "0")
    # the control has the best numbers of the table but ranks in no block
    assert best["de-wgd-lr"] == ("0", "0")


def test_table1_bold_skips_rows_that_did_not_converge(tmp_path):
    _, best = _bold_of(tmp_path, GROUPS, unconverged={("fashionmnist", "fsvgd")})
    assert best["fsvgd"] == ("0", "0") and best["kde-wgd"] == ("1", "1")


def test_table1_without_groups_ranks_every_row_in_one_block(tmp_path):
    order, best = _bold_of(tmp_path, {})
    assert order[0] == "de" and best["de-wgd-lr"] == ("1", "1")
    assert sum(b == ("1", "1") for b in best.values()) == 1


def test_every_error_basis_a_cell_can_have_is_explained_once_in_order():
    import itertools
    import math

    from repens.report.image import ERROR_BASES, _error_basis, error_bases_note

    made = {
        _error_basis(o_se, p_se, n, key)
        for o_se, p_se, n, key in itertools.product(
            (0.01, math.nan), (0.02, math.nan), (1, 3), ("accuracy", "entropy_ratio")
        )
    }
    assert made == set(ERROR_BASES)
    note = error_bases_note(["none", "ours and the paper's", "", "something new"])
    assert note.index(ERROR_BASES["ours and the paper's"]) < note.index(ERROR_BASES["none"])
    assert note.count("; by ") == 2 and "something new" in note
    assert error_bases_note([]) == ""
