"""The one table path (repens.report.tables): Styler LaTeX, HTML, CSV and PNG."""

import io
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from repens.report.tables import (
    Column,
    Table,
    best_rows,
    build_blocks,
    csv_rows,
    format_cell,
    latex_text,
    mean_se,
    mean_se_table,
    number,
    plain_table,
    to_csv,
    to_html,
    to_latex,
    to_markdown,
    write_table,
)

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = [
    Column("acc", "Accuracy", better="max", digits=2, scale=100.0, plain="Accuracy (%)"),
    Column("nll", "$\\mathrm{NLL}_t$", better="min", digits=3, plain="NLL"),
]


def _records():
    # method a: acc 0.90, 0.92 -> mean 0.91, se = sd/sqrt(2) = 0.014142/1.41421 = 0.01
    # method b: acc 0.80, 0.80 (se 0); nll lower than a's
    return [
        {"dataset": "d", "method": "a", "acc": 0.90, "nll": 0.30},
        {"dataset": "d", "method": "a", "acc": 0.92, "nll": 0.34},
        {"dataset": "d", "method": "b", "acc": 0.80, "nll": 0.20},
        {"dataset": "d", "method": "b", "acc": 0.80, "nll": 0.22},
        {"dataset": "d", "method": "x", "acc": 0.95, "nll": 0.50},
        {"dataset": "e", "method": "a", "acc": 0.50, "nll": 0.90},
        {"dataset": "e", "method": "b", "acc": 0.60, "nll": 0.95},
    ]


def _table(**kwargs):
    blocks = build_blocks(
        _records(), COLUMNS, [("d", "Data"), ("e", "Else")], [("a", "A", False), ("b", "B", False), ("x", "X", True)]
    )
    return blocks, mean_se_table(blocks, COLUMNS, title="T", caption="c", label="tab:t", **kwargs)


def _body(tex: str) -> list[str]:
    """The table rows of the LaTeX (not the rules between them)."""
    lines = tex.splitlines()
    head = lines.index(r"\midrule")
    return [line for line in lines[head + 1 : lines.index(r"\bottomrule")] if line.endswith(r"\\")]


def _html_styled(page: str, prop: str) -> set[tuple[int, int]]:
    """(row, column) of the data cells whose CSS has ``prop``."""
    css = page.split("</style>")[0]
    cells = set()
    for selectors, props in re.findall(r"([^{}]+)\{([^}]*)\}", css):
        if prop in props:
            cells |= {(int(r), int(c)) for r, c in re.findall(r"_row(\d+)_col(\d+)", selectors)}
    return cells


def test_mean_se_by_hand():
    cell = mean_se([1.0, 2.0, 3.0])  # sd 1, se 1/sqrt(3)
    assert cell.mean == pytest.approx(2.0)
    assert cell.se == pytest.approx(1 / math.sqrt(3))
    assert cell.n == 3
    assert math.isnan(mean_se([4.0]).se)


def test_blocks_bold_and_pm():
    blocks, table = _table()
    block = blocks[0]
    assert [r.key for r in block.rows] == ["a", "b", "x"]
    assert block.rows[0].cells["acc"].mean == pytest.approx(0.91)
    assert block.rows[0].cells["acc"].se == pytest.approx(0.01)
    assert format_cell(block.rows[0].cells["acc"], COLUMNS[0]) == "91.00±1.00"
    # best accuracy (max) is the extra row x, best NLL (min) is b
    assert best_rows(block, COLUMNS[0]) == {"x"}
    assert best_rows(block, COLUMNS[1]) == {"b"}
    tex = to_latex(table)
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"\cmidrule(l){2-4}" in tex
    assert r"\textbf{95.00}" in tex  # single seed: no s.e.
    assert r"\textbf{0.210$\pm$0.010}" in tex
    assert r"91.00$\pm$1.00" in tex and r"\textbf{91.00" not in tex
    # the rule line comes after the main rows and before the extra row
    assert tex.index(r"\cmidrule") > tex.index("& B &") and tex.index(r"\cmidrule") < tex.index("& X &")
    rows = csv_rows(blocks, COLUMNS)
    assert rows[1]["nll_best"] == 1 and rows[0]["nll_best"] == 0
    assert rows[0]["acc_mean"] == pytest.approx(91.0)


def test_bold_cell_is_the_best_one_for_max_and_min():
    """Row by row, the bold cells of the LaTeX and the HTML are exactly the block's best
    (max for accuracy, min for NLL), and a second block has its own best."""
    _, table = _table()
    body = _body(to_latex(table))
    assert len(body) == 5  # 3 rows of Data, 2 of Else
    bold = [[r"\textbf" in cell for cell in line.removesuffix(r" \\").split(" & ")[2:]] for line in body]
    #          acc (max)  nll (min)
    assert bold == [
        [False, False],  # A: 91 / 0.32
        [False, True],  # B: 80 / 0.21  <- lowest NLL of Data
        [True, False],  # X: 95 / 0.50  <- highest accuracy of Data
        [False, True],  # Else A: 50 / 0.90 <- lowest NLL of Else
        [True, False],
    ]  # Else B: 60 / 0.95 <- highest accuracy of Else
    assert table.bold.to_numpy().tolist() == bold
    expected = {(r, c) for r, row in enumerate(bold) for c, flag in enumerate(row) if flag}
    assert _html_styled(to_html(table), "font-weight: bold") == expected


def test_markdown_has_the_htmls_rows_and_bold_cells():
    """The Markdown form: the title, a header, one line per row with the block label only
    where it changes, the same bold cells as the HTML, and the note."""
    _, table = _table()
    md = to_markdown(table).splitlines()
    assert md[0] == "**T**"
    rows = [line for line in md if line.startswith("| ")][2:]  # after the header and its rule
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in rows]
    assert [c[:2] for c in cells] == [["Data", "A"], ["", "B"], ["", "X"], ["Else", "A"], ["", "B"]]
    bold = [[c.startswith("**") for c in row[2:]] for row in cells]
    assert bold == table.bold.to_numpy().tolist()
    assert cells[0][2] == "91.00±1.00"


def test_markdown_joins_column_groups_and_escapes_pipes():
    frame = pd.DataFrame(
        [["1 | 2", 3.0]], index=pd.Index(["r"], name="row"), columns=pd.MultiIndex.from_tuples([("G", "a"), ("", "b")])
    )
    md = to_markdown(Table(cells=frame, csv=frame, title="", note="n"))
    assert md.splitlines()[0] == "| row | G: a | b |"
    assert "| r | 1 \\| 2 | 3.000 |" in md
    assert md.rstrip().endswith("n")


def test_rules_between_blocks_and_above_extra_rows():
    _, table = _table()
    tex = to_latex(table)
    lines = tex.splitlines()
    body_start = lines.index(r"\midrule")
    # Data: A, B, \cmidrule, X; \midrule; Else: A, B
    tail = lines[body_start + 1 : lines.index(r"\bottomrule")]
    assert [line.split(" & ")[:2] if "&" in line else line for line in tail] == [
        ["Data", "A"],
        ["", "B"],
        r"\cmidrule(l){2-4}",
        ["", "X"],
        r"\midrule",
        ["Else", "A"],
        ["", "B"],
    ]


def test_ties_are_all_bold():
    recs = [{"dataset": "d", "method": m, "acc": 0.5, "nll": 0.1} for m in "ab"]
    (block,) = build_blocks(recs, COLUMNS, [("d", "D")], [("a", "A", False), ("b", "B", False)])
    assert best_rows(block, COLUMNS[1]) == {"a", "b"}


def test_special_characters_are_escaped_in_latex_and_html():
    recs = [
        {"dataset": "d_1", "method": "m", "acc": 0.5, "nll": 0.1},
        {"dataset": "d_1", "method": "n", "acc": 0.6, "nll": 0.2},
    ]
    blocks = build_blocks(
        recs, COLUMNS, [("d_1", "Data_1 & 50%")], [("m", "kde_WGD #1 {x}", False), ("n", "<b>n</b> ~", False)]
    )
    table = mean_se_table(
        blocks, COLUMNS, title="T & <i>", caption="Accuracy in % of A & B_1; $\\pm$ stays math", label="tab:x"
    )
    tex = to_latex(table)
    assert r"Data\_1 \& 50\%" in tex and r"kde\_WGD \#1 \{x\}" in tex
    assert r"\caption{Accuracy in \% of A \& B\_1; $\pm$ stays math}" in tex
    assert r"Accuracy (\%)" not in tex and " & Accuracy & $\\mathrm{NLL}_t$ \\\\" in tex  # LaTeX headers, math kept
    assert "kde_WGD" not in tex and "50%" not in tex
    page = to_html(table)
    assert "&lt;b&gt;n&lt;/b&gt;" in page and "<b>n</b>" not in page and "T &amp; &lt;i&gt;" in page
    assert "Data_1 &amp; 50%" in page and "Accuracy (%)" in page and "NLL" in page
    assert latex_text("a_b & 5% $x_1$") == r"a\_b \& 5\% $x_1$"


def test_html_has_the_values():
    _, table = _table()
    page = to_html(table)
    assert page.startswith("<!DOCTYPE html>") and "<table" in page
    for text in (">Data<", ">Else<", ">A<", ">X<", ">91.00±1.00<", ">0.210±0.010<", ">95.00<", ">60.00<"):
        assert text in page, text
    assert 'rowspan="3"' in page  # the block label spans its rows
    assert page == to_html(_table()[1])  # deterministic: no random element ids


def test_csv_round_trips():
    _, table = _table()
    text = to_csv(table)
    back = pd.read_csv(io.StringIO(text))
    pd.testing.assert_frame_equal(back, table.csv, check_dtype=False)
    assert list(back.columns[:4]) == ["block", "method", "label", "extra"]
    assert back.loc[2, "acc_se"] != back.loc[2, "acc_se"]  # single seed: NaN, written "nan"
    assert ",nan," in text


def test_number_formats():
    assert number(0.12345, "latex") == "0.123" and number(12, "html") == "12"
    assert number(float("nan"), "latex") == "--" and number(None, "html") == "–"
    assert number(1.5e-5, "latex") == r"$1.50\times 10^{-5}$"
    assert number(2.5e4, "html") == "2.50×10<sup>4</sup>" and number(2.5e4, "text") == "2.50e4"
    assert number("--", "latex") == "--"


def test_plain_table_and_two_level_headers():
    frame = pd.DataFrame({"method": ["a_b", "c"], "value": [0.5, np.nan], "n": [3, 4]})
    table = plain_table(frame, title="vs")
    assert "a\\_b" in to_latex(table) and ">a_b<" in to_html(table) and ">–<" in to_html(table)
    cols = pd.MultiIndex.from_tuples([("G1", "x"), ("G1", "y"), ("G2", "z")])
    grouped = Table(
        cells=pd.DataFrame([[1.0, 2.0, 3.0]], index=["r"], columns=cols), csv=frame, title="g", tex_headers={"x": "$x$"}
    )
    tex = to_latex(grouped)
    assert r"\multicolumn{2}{c}{G1}" in tex and r"\cmidrule(lr){2-3} \cmidrule(lr){4-4}" in tex and "$x$" in tex


def test_html_wraps_long_text_and_keeps_numbers_on_one_line():
    """A table with long text is as wide as the page and wraps its text columns
    (white-space: normal, word-wrap: break-word, a max-width), left-aligned, while its
    number columns stay on one line; a table of numbers keeps its compact layout."""
    text = "a long claim " * 12
    frame = pd.DataFrame({"id": ["x"], "claim": [text], "value": [0.5], "verdict": ["not run"]})
    page = to_html(plain_table(frame, title="claims"))
    css = page.split("<style", 1)[1].split("</style>", 1)[0]
    compact = lambda s: re.sub(r"\s+", " ", s)  # noqa: E731
    assert re.search(r"#T_repens\s*\{[^}]*width: 100%", css)
    assert re.search(r"#T_repens\s+td \{[^}]*white-space: normal;[^}]*word-wrap: break-word;[^}]*max-width", css)
    # the claim (col1) wraps, left-aligned; the other cells stay on one line
    assert re.search(r"td\.col1 \{[^}]*white-space: normal;[^}]*text-align: left", css)
    assert not re.search(r"td\.col(0|2|3)\b", css)
    assert "td { white-space: nowrap; }" in compact(css)
    numbers = to_html(plain_table(pd.DataFrame({"a": [0.5], "b": [1.25]}), title="n"))
    assert "width: 100%" not in numbers and "white-space: normal" not in numbers
    assert "width: 100%" in to_html(plain_table(pd.DataFrame({"a": [0.5]}), title="n", wrap=True))


def test_table_checks_its_shapes():
    with pytest.raises(ValueError, match="rules"):
        Table(cells=pd.DataFrame({"a": [1]}), csv=pd.DataFrame(), title="t", rules=["", "midrule"])
    with pytest.raises(ValueError, match="rules must be"):
        Table(cells=pd.DataFrame({"a": [1]}), csv=pd.DataFrame(), title="t", rules=["hline"])


def test_write_table_files(tmp_path):
    _, table = _table()
    out = {k: tmp_path / f"t.{k}" for k in ("tex", "csv", "html", "png")}
    write_table(table, out["tex"], out["html"], out["csv"], out["png"])
    assert out["tex"].read_text().startswith("% Generated by")
    assert out["csv"].read_text().splitlines()[0].startswith("block,method,label,extra")
    assert out["html"].read_text().startswith("<!DOCTYPE html>")
    assert out["png"].read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob(".*tmp*"))
    write_table(table, out_csv=tmp_path / "only.csv")
    assert [p.name for p in tmp_path.glob("only.*")] == ["only.csv"]


def test_bad_direction():
    with pytest.raises(ValueError, match="better"):
        Column("a", "A", better="up")


def test_no_table_markup_or_tex_escaping_outside_the_table_module():
    """Every table goes through repens.report.tables (Styler); nothing else
    writes booktabs rules or escapes TeX."""
    out = subprocess.run(
        ["grep", "-rnE", r"toprule|bottomrule|tex_escape|textbackslash|_escape_latex", "src", "workflow"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    offenders = [line for line in out.splitlines() if not line.startswith("src/repens/report/tables.py:")]
    assert offenders == []
