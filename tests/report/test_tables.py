import math

import pytest

from repens.report.tables import (
    Column,
    best_rows,
    build_blocks,
    csv_rows,
    format_cell,
    latex_table,
    mean_se,
    write_table,
)

COLUMNS = [
    Column("acc", "Accuracy", better="max", digits=2, scale=100.0),
    Column("nll", "NLL", better="min", digits=3),
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
    ]


def test_mean_se_by_hand():
    cell = mean_se([1.0, 2.0, 3.0])  # sd 1, se 1/sqrt(3)
    assert cell.mean == pytest.approx(2.0)
    assert cell.se == pytest.approx(1 / math.sqrt(3))
    assert cell.n == 3
    assert math.isnan(mean_se([4.0]).se)


def test_blocks_bold_and_pm():
    blocks = build_blocks(_records(), COLUMNS, [("d", "Data")], [("a", "A", False), ("b", "B", False), ("x", "X", True)])
    (block,) = blocks
    assert [r.key for r in block.rows] == ["a", "b", "x"]
    assert block.rows[0].cells["acc"].mean == pytest.approx(0.91)
    assert block.rows[0].cells["acc"].se == pytest.approx(0.01)
    assert format_cell(block.rows[0].cells["acc"], COLUMNS[0]) == "91.00±1.00"
    # best accuracy is the extra row x, best NLL is b
    assert best_rows(block, COLUMNS[0]) == {"x"}
    assert best_rows(block, COLUMNS[1]) == {"b"}
    tex = latex_table(blocks, COLUMNS, "cap", "tab:t")
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"\cmidrule" in tex
    assert r"\textbf{95.00}" in tex  # single seed: no s.e.
    assert r"\textbf{0.210$\pm$0.010}" in tex
    assert r"91.00$\pm$1.00" in tex and r"\textbf{91.00" not in tex
    # the rule line comes after the main rows and before the extra row
    assert tex.index(r"\cmidrule") > tex.index("& B &") and tex.index(r"\cmidrule") < tex.index("& X &")
    rows = csv_rows(blocks, COLUMNS)
    assert rows[1]["nll_best"] == 1 and rows[0]["nll_best"] == 0
    assert rows[0]["acc_mean"] == pytest.approx(91.0)


def test_ties_are_all_bold():
    recs = [{"dataset": "d", "method": m, "acc": 0.5, "nll": 0.1} for m in "ab"]
    (block,) = build_blocks(recs, COLUMNS, [("d", "D")], [("a", "A", False), ("b", "B", False)])
    assert best_rows(block, COLUMNS[1]) == {"a", "b"}


def test_write_table_files(tmp_path):
    blocks = build_blocks(_records(), COLUMNS, [("d", "Data")], [("a", "A", False), ("b", "B", False)])
    write_table(blocks, COLUMNS, tmp_path / "t.tex", tmp_path / "t.csv", tmp_path / "t.png", caption="c")
    assert (tmp_path / "t.tex").read_text().startswith("%")
    assert (tmp_path / "t.csv").read_text().splitlines()[0].startswith("block,method,label,extra")
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob(".*tmp*"))


def test_bad_direction():
    with pytest.raises(ValueError, match="better"):
        Column("a", "A", better="up")
