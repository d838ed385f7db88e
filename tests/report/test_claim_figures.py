"""The evidence of each claim as a picture: the per-comparison CSV the scorecard writes,
the figures drawn from it alone (repens.report.claim_figures), the HTML page that embeds
them, and the results page that shows the kept ones."""

from __future__ import annotations

import ast
import base64
import csv
import math
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from repens.cli import main
from repens.data.errors import DataFileError
from repens.report import claim_figures as cf
from repens.report import claims as cl
from repens.report import results_page
from repens.report.claims import Claim, Estimate, compare
from repens.report.style import VERDICT_COLOURS

ROOT = Path(__file__).resolve().parents[2]


def est(label, value, se, n=5, converged=None, why=""):
    return Estimate(label, value, se, n, "paper", source="results/t.csv", converged=converged, convergence=why)


#: hand-made comparisons: an ordering (reproduced), an agreement (inconclusive), a
#: not-converged one, and comparisons that were not run
ORDER = compare(est("sge-wgd acc", 92.0, 0.1), ">", est("de acc", 90.0, 0.2))
AGREE = compare(est("fwgd sd", 0.9, 0.1), "~", Estimate.constant("1 (HMC's)", 1.0), margin=0.25)
STUCK = compare(
    est("kde acc", 91.0, 0.1, converged=False, why="image/fashionmnist/kde-wgd/seed38: loss rising"),
    ">",
    est("de acc", 90.0, 0.2),
)
#: one seed on one side: its point estimate, no interval (a difference beyond ORDER's)
SEEDLESS = compare(est("ssge-wgd acc", 95.0, float("nan"), n=1), ">", est("de acc", 90.0, 0.2))
ABSENT = compare(
    Estimate.absent("svgd acc", "results/table1.csv: no fashionmnist/svgd row"), ">", est("de acc", 90.0, 0.2)
)


def _claim(id_, comparisons, diagnostic=False, limit=False):
    return Claim(id_, "test", "words", "reading", (), lambda ev: list(comparisons), diagnostic=diagnostic, limit=limit)


#: "stuck": a claim about a limit (the convergence gate applies); "caveat": the same
#: comparisons in a fixed-budget claim (scored as run, the run named)
CLAIMS = (
    _claim("ordered", [ORDER, AGREE]),
    _claim("all-not-run", [ABSENT, ABSENT]),
    _claim("stuck", [STUCK, ORDER], limit=True),
    _claim("caveat", [STUCK, ORDER]),
    _claim("one-seed", [SEEDLESS, ORDER]),
)
DIAGNOSTICS = (_claim("own-check", [AGREE], diagnostic=True),)


@pytest.fixture
def scorecard(tmp_path):
    out_csv = tmp_path / "claims.csv"
    cl.write_scorecard({}, out_csv, tmp_path / "claims.md", claims=CLAIMS, diagnostics=DIAGNOSTICS)
    return out_csv


def _rows(path):
    return list(csv.DictReader(path.open()))


# --------------------------------------------------------------------------- the CSV


def test_comparisons_csv_has_one_row_per_comparison_with_its_numbers(scorecard):
    path = cl.comparisons_path(scorecard)
    assert path == scorecard.with_name("claims_comparisons.csv")
    rows = _rows(path)
    assert list(rows[0]) == list(cl.COMPARISON_COLUMNS)
    assert [(r["claim"], r["kind"], r["index"]) for r in rows] == [
        ("ordered", "claim", "1"),
        ("ordered", "claim", "2"),
        ("all-not-run", "claim", "1"),
        ("all-not-run", "claim", "2"),
        ("stuck", "claim", "1"),
        ("stuck", "claim", "2"),
        ("caveat", "claim", "1"),
        ("caveat", "claim", "2"),
        ("one-seed", "claim", "1"),
        ("one-seed", "claim", "2"),
        ("own-check", "diagnostic", "1"),
    ]
    first = rows[0]
    assert (first["a"], first["relation"], first["b"]) == ("sge-wgd acc", ">", "de acc")
    assert float(first["a_value"]) == 92.0 and float(first["a_se"]) == 0.1 and first["a_n"] == "5"
    assert float(first["b_value"]) == 90.0 and float(first["b_se"]) == 0.2
    assert float(first["difference"]) == pytest.approx(2.0)
    t4 = 2.7764451  # n = 5 each: Student's t at 4 degrees of freedom
    assert float(first["detectable"]) == pytest.approx(ORDER.detectable) == pytest.approx(t4 * (0.1 + 0.2))
    assert first["margin"] == "" and first["verdict"] == "reproduced" and first["claim_verdict"] == "inconclusive"
    agree = rows[1]
    assert float(agree["margin"]) == 0.25 and agree["verdict"] == AGREE.verdict == "inconclusive"
    assert float(agree["detectable"]) == pytest.approx(AGREE.detectable)
    assert rows[2]["verdict"] == "not run" and "no fashionmnist/svgd row" in rows[2]["reason"]
    assert math.isnan(float(rows[2]["difference"])) and rows[2]["claim_verdict"] == "not run"
    assert rows[4]["reason"].startswith(cl.NOT_CONVERGED) and rows[4]["verdict"] == "inconclusive"


def test_the_cli_writes_the_comparisons_csv_beside_the_scorecard(tmp_path):
    out_csv = tmp_path / "claims.csv"
    rc = main(
        [
            "claims",
            "--out-csv",
            str(out_csv),
            "--out-md",
            str(tmp_path / "claims.md"),
            "--synthetic",
            str(tmp_path / "absent.csv"),
        ]
    )
    assert rc == 0
    rows = _rows(tmp_path / "claims_comparisons.csv")
    ids = [c.id for c in (*cl.CLAIMS, *cl.DIAGNOSTICS)]
    assert list(dict.fromkeys(r["claim"] for r in rows)) == ids
    assert {r["verdict"] for r in rows} == {"not run"}


# --------------------------------------------------------------------------- the figures


def _colours(png: Path) -> set[tuple[int, int, int]]:
    return {tuple(c) for c in np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3)}


def _rgb(name: str) -> tuple[int, int, int]:
    return tuple(int(round(255 * x)) for x in VERDICT_COLOURS[name])


def test_one_figure_per_claim_each_coloured_by_its_verdicts(scorecard, tmp_path):
    out = tmp_path / "figures" / "claims"
    written = cf.write_claim_figures(cl.comparisons_path(scorecard), out)
    assert (
        sorted(p.name for p in written)
        == sorted(p.name for p in out.iterdir())
        == ["all-not-run.png", "caveat.png", "one-seed.png", "ordered.png", "own-check.png", "stuck.png"]
    )
    for png in written:
        image = Image.open(png)
        assert image.format == "PNG" and image.width > 300 and png.stat().st_size < 60_000
    ordered, empty, stuck = (_colours(out / f"{name}.png") for name in ("ordered", "all-not-run", "stuck"))
    # the points and title in their verdict's colour; none where nothing ran
    assert _rgb("reproduced") in ordered and _rgb("inconclusive") in ordered
    assert _rgb("contradicted") not in ordered
    assert not {_rgb(v) for v in ("reproduced", "contradicted", "inconclusive")} & empty
    assert _rgb("inconclusive") in stuck and _rgb("reproduced") in stuck


def test_a_one_seed_comparison_is_its_point_estimate_without_a_bar(scorecard, tmp_path):
    rows = cf.read_comparisons(cl.comparisons_path(scorecard))
    one = rows[rows["claim"] == "one-seed"].sort_values("index").reset_index(drop=True)
    assert one["verdict"].tolist() == [cl.TOO_FEW_SEEDS, "reproduced"]
    assert one["claim_verdict"].iloc[0] == cl.TOO_FEW_SEEDS
    assert one["difference"].iloc[0] == 5.0 and math.isnan(one["detectable"].iloc[0])
    ran = one["verdict"] != "not run"
    left, right, _ = cf._x_range(one, ran, False, 1.0)
    assert left < 0 < 5.0 < right  # the axis shows the point, not only the other row's interval
    assert cf._scale(one[ran])[1] >= 5.0
    cf.plot_claim(one, tmp_path / "one-seed.png")
    colours = _colours(tmp_path / "one-seed.png")
    assert _rgb(cl.TOO_FEW_SEEDS) in colours and _rgb("reproduced") in colours


def test_a_not_converged_comparison_is_marked_and_labels_are_short(scorecard):
    frame = cf.read_comparisons(cl.comparisons_path(scorecard))
    stuck = frame[frame["claim"] == "stuck"].sort_values("index")
    assert stuck["reason"].iloc[0].startswith(cf.NOT_CONVERGED)
    caveat = frame[frame["claim"] == "caveat"].sort_values("index")
    assert caveat["caveat"].iloc[0].startswith(cf.NOT_CONVERGED) and caveat["verdict"].iloc[0] == "reproduced"
    assert cf.not_converged(caveat).tolist() == [True, False] == cf.not_converged(stuck).tolist()
    assert cf.NOT_CONVERGED == cl.NOT_CONVERGED  # the figures read the scorecard's marker
    assert cf.TOO_FEW_SEEDS == cl.TOO_FEW_SEEDS and cf.TOO_FEW_SEEDS in cf.VERDICT_COLOURS
    assert cf.comparison_label(stuck.iloc[0]) == "kde acc > de acc"
    long = {"a": "anchored-code RMSE (concrete)", "relation": "~", "b": "Pearce's anchored RMSE (concrete) " * 3}
    label = cf.comparison_label(long)
    assert label.startswith("anchored-code RMSE (concrete) ~ Pearce's") and len(label) <= cf.LABEL_WIDTH


def test_a_figure_title_carries_the_family_wise_reading_read_from_the_file(tmp_path):
    """The title shows a contradiction's family-wise reading as the comparisons' file has it
    and nothing for a claim without one (an empty cell, read as '', not as "nan")."""
    wrong = compare(est("de acc", 90.0, 0.1), ">", est("sge-wgd acc", 92.0, 0.1))
    out_csv = tmp_path / "claims.csv"
    claims = (_claim("wrong", [wrong, ORDER]), _claim("ordered", [ORDER, AGREE]))
    cl.write_scorecard({}, out_csv, tmp_path / "claims.md", claims=claims, diagnostics=())
    frame = cf.read_comparisons(cl.comparisons_path(out_csv))
    wrong_rows, ordered_rows = (frame[frame["claim"] == c] for c in ("wrong", "ordered"))
    title = cf._title(wrong_rows, "wrong", "contradicted")
    assert title.startswith("wrong: contradicted (family-wise: holds (1 of 1 contradiction at 97.50% intervals")
    assert cf._title(ordered_rows, "ordered", "reproduced") == "ordered: reproduced"
    assert cf._title(ordered_rows.drop(columns="claim_familywise"), "ordered", "reproduced") == "ordered: reproduced"


def test_the_figure_module_reads_files_and_never_evaluates():
    tree = ast.parse(Path(cf.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    repens = {m for m in imported if m and m.startswith("repens")}
    assert repens <= {"repens.core.atomic", "repens.core.errors", "repens.results.files", "repens.report.style"}, repens


@pytest.mark.parametrize("drop", ["detectable", "verdict", "claim"])
def test_a_missing_column_is_one_line_naming_the_file_and_column(scorecard, tmp_path, drop, capsys):
    rows = _rows(cl.comparisons_path(scorecard))
    bad = tmp_path / "bad.csv"
    with bad.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[c for c in rows[0] if c != drop], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(DataFileError) as err:
        cf.write_claim_figures(bad, tmp_path / "out")
    assert str(bad) in str(err.value) and repr(drop) in str(err.value) and "\n" not in str(err.value)
    assert main(["claim-figures", "--comparisons", str(bad), "--out-dir", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: ") and repr(drop) in lines[0]


def test_a_number_that_is_not_and_a_missing_file_are_named(scorecard, tmp_path):
    text = cl.comparisons_path(scorecard).read_text().splitlines()
    text[1] = text[1].replace(",5,", ",five,", 1)  # a_n is not read; difference is
    head = text[0].split(",")
    cells = text[1].split(",")
    cells[head.index("difference")] = "two"
    text[1] = ",".join(cells)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(text) + "\n")
    with pytest.raises(DataFileError, match=r"bad\.csv: column 'difference': 'two' is not a number \(line 2\)"):
        cf.read_comparisons(bad)
    with pytest.raises(FileNotFoundError, match="nothing.csv: no such comparisons file"):
        cf.read_comparisons(tmp_path / "nothing.csv")


# --------------------------------------------------------------------------- the HTML page


def test_the_page_embeds_each_claims_figure_from_the_files(scorecard, tmp_path):
    out = tmp_path / "figures"
    cf.write_claim_figures(cl.comparisons_path(scorecard), out)
    (out / "stuck.png").unlink()  # a figure not made: said so, not an error
    html = tmp_path / "claims.html"
    assert main(["claims-page", "--claims", str(scorecard), "--figures", str(out), "--out", str(html)]) == 0
    page = html.read_text()
    assert "<table" in page and "Diagnostics" in page
    for name in ("ordered", "all-not-run", "own-check"):
        m = re.search(rf'<figure id="evidence-{name}"[^>]*><img src="data:image/png;base64,([^"]+)"', page)
        assert m and base64.b64decode(m[1]) == (out / f"{name}.png").read_bytes(), name
    assert 'id="evidence-stuck"' not in page and "stuck: no figure" in page
    # the figures come after the two tables
    assert page.index("evidence-ordered") > page.rindex("</table>")


# --------------------------------------------------------------------------- the results page


def test_publish_keeps_the_comparisons_and_the_figures_and_the_page_shows_them(scorecard, tmp_path):
    results = scorecard.parent
    cf.write_claim_figures(cl.comparisons_path(scorecard), results / "figures" / "claims")
    reference = tmp_path / "reference"
    copied = {p.relative_to(reference / "results").as_posix() for p in results_page.publish(results, reference)}
    assert {
        "claims.csv",
        "claims_comparisons.csv",
        "claims.md",
        "figures/claims/ordered.png",
        "figures/claims/all-not-run.png",
    } <= copied
    kept = sorted((reference / "results" / "figures" / "claims").glob("*.png"))
    assert sum(p.stat().st_size for p in kept) < 2_000_000
    lines = results_page._claims_section(reference / "results", Path("../reference/results"))
    assert "### Evidence of each claim" in lines
    assert "![ordered](../reference/results/figures/claims/ordered.png)" in lines
