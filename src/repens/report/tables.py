"""Every results table, one path: pandas' ``Styler``.

A :class:`Table` holds what a table shows (its cells in a DataFrame, which cells are
bold, which row labels are in italics, where the rules between groups of rows go, the
captions) and :func:`write_table` writes it as

* booktabs LaTeX: ``Styler.to_latex(hrules=True)`` (``\\toprule``, ``\\midrule``,
  ``\\bottomrule``), text escaped by ``Styler.format(escape="latex")``, bold cells by
  ``Styler.apply`` (``textbf:--rwrap;``), headers may hold TeX math (``latex-math``);
* HTML for the Snakemake report: ``Styler.to_html`` (a whole page, same cells, bold and
  rules as CSS);
* CSV: ``DataFrame.to_csv`` of the table's tidy frame (the numbers, not the text);
* PNG (matplotlib), only where a user asked for one (Table 1's ``table1.png``).

Results tables in the layout of the paper's Table 1 (mean ± standard error over seeds or
splits, one block of rows per dataset, the best value of each column and block in bold,
optional extra rows below a rule) are built by :func:`mean_se_table`; the synthetic and
toy tables build their :class:`Table` from their own frames, and :func:`plain_table`
makes one of any tidy frame (the comparisons with the papers' values).

Nothing outside this module writes table markup or escapes TeX: cells and row labels
are escaped by the Styler, headers and captions are plain text with inline math
(``$...$``) escaped the same way (:func:`latex_text`).
"""

from __future__ import annotations

import html as html_lib
import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from repens.core.atomic import save_figure_atomic, write_text_atomic

__all__ = [
    "Column",
    "Cell",
    "Row",
    "Block",
    "Table",
    "mean_se",
    "build_blocks",
    "best_rows",
    "format_cell",
    "column_notation",
    "mean_se_formatter",
    "number",
    "mean_pm_text",
    "se_decimals",
    "signed_text",
    "latex_text",
    "csv_rows",
    "mean_se_table",
    "plain_table",
    "to_latex",
    "to_html",
    "to_csv",
    "to_markdown",
    "render_png",
    "write_table",
    "with_labels",
    "wraps",
]

#: The output kinds a cell formatter is asked for.
KINDS = ("latex", "html", "text")
#: How a column writes its numbers (Column.notation).
NOTATIONS = ("fixed", "sci")
#: Rules before a row: a full ``\midrule`` (a new block), or one below the first index
#: level only (``\cmidrule(l)``: extra rows of the same block).
RULES = ("", "midrule", "cmidrule")


# --------------------------------------------------------------------------- cells


@dataclass(frozen=True)
class Column:
    """A metric column of a mean +- s.e. table.

    Args:
        key: the metric's name in the per-run records.
        header: LaTeX header (math allowed, e.g. ``r"$H_o/H_t$"``).
        better: ``"max"`` or ``"min"``: which end is bold; ``None``: a diagnostic, never bold.
        digits: decimals shown.
        scale: factor applied before display (100 shows a fraction as a percentage).
        plain: header for HTML, CSV and PNG (default: ``key``).
        notation: ``"fixed"`` (``digits`` decimals) or ``"sci"`` (scientific, ``digits``
            significant digits, the s.e. with 2), for every cell of the column alike:
            :func:`column_notation` picks the one that fits the column's values.
    """

    key: str
    header: str
    better: str | None = "max"
    digits: int = 3
    scale: float = 1.0
    plain: str | None = None
    notation: str = "fixed"

    def __post_init__(self) -> None:
        if self.better not in ("max", "min", None):
            raise ValueError(f"column {self.key}: better must be 'max', 'min' or None, got {self.better!r}")
        if self.notation not in NOTATIONS:
            raise ValueError(f"column {self.key}: notation must be one of {NOTATIONS}, got {self.notation!r}")

    @property
    def name(self) -> str:
        return self.plain or self.key


@dataclass(frozen=True)
class Cell:
    mean: float
    se: float
    n: int


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    cells: dict[str, Cell]
    extra: bool = False
    #: whether the row competes for its block's best (bold) values: False for a row not
    #: comparable with the rest (another protocol, a run that did not converge)
    ranked: bool = True


@dataclass(frozen=True)
class Block:
    key: str
    label: str
    rows: list[Row] = field(default_factory=list)


def mean_se(values: Sequence[float]) -> Cell:
    """Mean and standard error ``sd(ddof=1) / sqrt(n)`` (NaN for a single value)."""
    x = np.asarray(list(values), dtype=float)
    if x.size == 0:
        return Cell(math.nan, math.nan, 0)
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan
    return Cell(float(x.mean()), se, int(x.size))


def build_blocks(
    records: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    blocks: Sequence[tuple[str, str]],
    rows: Sequence[tuple[str, str, bool]],
    block_key: str = "dataset",
    row_key: str = "method",
) -> list[Block]:
    """Group per-run records into blocks of rows of :class:`Cell` s.

    Args:
        records: one mapping per run with ``block_key``, ``row_key`` and the metrics.
        columns: the metric columns.
        blocks: ``(key, label)`` in display order.
        rows: ``(key, label, extra)`` in display order; extra rows go below a rule.
    """
    out = []
    for bkey, blabel in blocks:
        block_rows = []
        for rkey, rlabel, extra in rows:
            runs = [r for r in records if r[block_key] == bkey and r[row_key] == rkey]
            if not runs:
                continue
            cells = {c.key: mean_se([float(r[c.key]) for r in runs]) for c in columns}
            block_rows.append(Row(rkey, rlabel, cells, extra))
        out.append(Block(bkey, blabel, block_rows))
    return out


def _shown(value: float, column: Column) -> float:
    """The value as its cell shows it (rounded as :func:`format_cell` writes it)."""
    if column.notation == "sci":
        return float(f"{value * column.scale:.{max(column.digits - 1, 0)}e}")
    return round(value * column.scale, column.digits)


def column_notation(values: Sequence[float], digits: int = 3, max_digits: int = 4) -> tuple[str, int]:
    """``(notation, digits)`` of :class:`Column` for one column's numbers, all written
    alike (a column never mixes ``7.81×10⁻⁴`` with ``0.003``): fixed with ``digits``
    decimals, or up to ``max_digits`` where the smallest finite nonzero magnitude needs
    them for two significant digits (0.0035 at 4), when that is enough and every
    magnitude is below 1e4; else scientific with ``digits`` significant digits."""
    mags = [abs(float(v)) for v in values if v is not None and math.isfinite(float(v)) and float(v) != 0.0]
    if not mags:
        return "fixed", digits
    need = max(digits, 1 - math.floor(math.log10(min(mags))))
    if need <= max_digits and max(mags) < 1e4:
        return "fixed", need
    return "sci", digits


def _sci(value: float, significant: int, kind: str) -> str:
    """``7.81×10<sup>-4</sup>`` (html), ``$7.81\\times 10^{-4}$`` (latex), ``7.81e-4`` (text)."""
    mantissa, exponent = f"{value:.{max(significant - 1, 0)}e}".split("e")
    if kind == "latex":
        return rf"${mantissa}\times 10^{{{int(exponent)}}}$"
    if kind == "html":
        return f"{mantissa}×10<sup>{int(exponent)}</sup>"
    return f"{mantissa}e{int(exponent)}"


def best_rows(block: Block, column: Column) -> set[str]:
    """Keys of the ranked rows (``Row.ranked``) whose displayed mean is the best of those
    of the block (ties: all)."""
    shown = {
        r.key: _shown(r.cells[column.key].mean, column)
        for r in block.rows
        if r.ranked and math.isfinite(r.cells[column.key].mean)
    }
    if not shown or column.better is None:
        return set()
    target = max(shown.values()) if column.better == "max" else min(shown.values())
    return {k for k, v in shown.items() if v == target}


def format_cell(cell: Cell, column: Column, pm: str = "±", kind: str = "text") -> str:
    """``mean±se`` with the column's decimals (the s.e. is left out when undefined); in a
    ``"sci"`` column both in scientific notation as ``kind`` writes it."""
    if not math.isfinite(cell.mean):
        return "n/a"
    if column.notation == "sci":
        if kind == "latex":  # one math span ("$a$$\\pm$$b$" would open display math)
            mean = _sci(cell.mean * column.scale, column.digits, kind)[1:-1]
            se = rf" \pm {_sci(cell.se * column.scale, 2, kind)[1:-1]}" if math.isfinite(cell.se) else ""
            return f"${mean}{se}$"
        mean = _sci(cell.mean * column.scale, column.digits, kind)
        if not math.isfinite(cell.se):
            return mean
        return f"{mean}{pm}{_sci(cell.se * column.scale, 2, kind)}"
    mean = f"{cell.mean * column.scale:.{column.digits}f}"
    if not math.isfinite(cell.se):
        return mean
    return f"{mean}{pm}{cell.se * column.scale:.{column.digits}f}"


def _pm(kind: str) -> str:
    return r"$\pm$" if kind == "latex" else "±"


def mean_se_formatter(column: Column) -> Callable[[Any, str], str]:
    """A column's cells: a :class:`Cell` as mean ± s.e., a plain number in the column's
    notation too (a row of single values, e.g. a noise floor), text as it is."""

    def fmt(cell: Any, kind: str) -> str:
        if isinstance(cell, Cell):
            return format_cell(cell, column, pm=_pm(kind), kind=kind)
        if isinstance(cell, (float, np.floating)) and math.isfinite(cell):
            return format_cell(Cell(float(cell), math.nan, 1), column, kind=kind)
        return number(cell, kind)

    return fmt


def number(value: Any, kind: str = "text", digits: int = 3) -> str:
    """A number for a table: ``digits`` decimals, scientific below 1e-3 or from 1e4,
    a dash for a missing value; text (already escaped by the Styler) passes through."""
    if isinstance(value, str):
        return value
    if value is None or value is pd.NA or (isinstance(value, float) and not math.isfinite(value)):
        return {"latex": "--", "html": "–"}.get(kind, "-")
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    v = float(value)
    if v != 0.0 and (abs(v) < 1e-3 or abs(v) >= 1e4):
        return _sci(v, digits, kind)
    return f"{v:.{digits}f}"


def se_decimals(se: float, digits: int = 3, most: int = 8) -> int:
    """Decimals that show ``se`` to two significant digits, at least ``digits`` (at most
    ``most``): 3 for 0.013, 5 for 0.00036 (so a small s.e. never reads ``± 0.000``)."""
    if not math.isfinite(se) or se <= 0:
        return digits
    return min(most, max(digits, 1 - math.floor(math.log10(se))))


def mean_pm_text(mean: float, se: float, digits: int = 3) -> str:
    """``91.122 ± 0.013`` for a comparison table's cell: ``digits`` decimals, the mean
    alone without an s.e. (one seed), a dash without a mean."""
    if not math.isfinite(mean):
        return "–"
    return f"{mean:.{digits}f}" + (f" ± {se:.{digits}f}" if math.isfinite(se) else "")


def signed_text(z: float) -> str:
    """``+1.2`` / ``−3.4`` (a true minus sign) for a difference in standard errors; a dash
    when undefined."""
    return f"{z:+.1f}".replace("-", "−") if math.isfinite(z) else "–"


def latex_text(text: str) -> str:
    """Plain text with inline math (``$...$``) as LaTeX: everything outside the math
    escaped, as ``Styler.format_index(escape="latex-math")`` escapes the headers
    (captions are written this way: ``"Accuracy in %; mean $\\pm$ s.e."``)."""
    # Styler's own escaper, through its public API: a one-cell table without index and
    # header, formatted with escape="latex-math" and written as LaTeX
    styler = pd.DataFrame([[str(text)]]).style.hide(axis="index").hide(axis="columns")
    out = styler.format(escape="latex-math").to_latex()
    head, tail = "\\begin{tabular}{l}\n", " \\\\\n\\end{tabular}\n"
    if not (out.startswith(head) and out.endswith(tail)):
        raise RuntimeError(f"unexpected Styler.to_latex output: {out!r}")
    return out[len(head) : -len(tail)]


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Table:
    """What a table shows, in every format.

    Args:
        cells: the cells; its index (one or two levels) gives the row labels, its
            columns (one or two levels: groups over headers) the plain headers. A cell is
            a number, a text (escaped in each format), or what ``formats`` turns into text.
        csv: the tidy frame written as CSV (the numbers behind the cells).
        title: plain title (HTML caption, PNG title).
        caption: LaTeX caption: plain text with inline math in ``$...$``, escaped by
            :func:`latex_text` (so ``&``, ``%`` and ``_`` are written as they are).
        label: LaTeX label.
        note: plain footnote (HTML, PNG).
        source: what wrote it, for the comment heading the LaTeX file.
        tex_headers: plain header -> LaTeX header (math allowed), any column level.
        formats: plain header (of the last column level) -> ``fmt(value, kind)`` with kind
            ``"latex"``, ``"html"`` or ``"text"``; default :func:`number`.
        bold: same shape as ``cells``: which cells are bold.
        italic: one per row: the row label (last index level) in italics.
        rules: one per row, one of :data:`RULES`: the rule above the row.
        packages: LaTeX packages the table needs (named in the heading comment).
        size: a font size command for the LaTeX table (``"small"``), or None.
        tabcolsep: LaTeX column separation (``"4pt"``), or None.
        position: LaTeX float position.
        csv_na_rep: how a missing number reads in the CSV.
        wrap: the HTML lets long text wrap (the table as wide as the page, text cells
            wrapped and left-aligned, short cells kept on one line); None (default):
            when some cell or row label is longer than :data:`WRAP_CHARS` characters.
    """

    cells: pd.DataFrame
    csv: pd.DataFrame
    title: str
    caption: str = ""
    label: str = ""
    note: str = ""
    source: str = "repens.report.tables"
    tex_headers: Mapping[str, str] = field(default_factory=dict)
    formats: Mapping[str, Callable[[Any, str], str]] = field(default_factory=dict)
    bold: pd.DataFrame | None = None
    italic: Sequence[bool] | None = None
    rules: Sequence[str] | None = None
    packages: Sequence[str] = ("booktabs",)
    size: str | None = None
    tabcolsep: str | None = None
    position: str = "t"
    csv_na_rep: str = ""
    wrap: bool | None = None

    def __post_init__(self) -> None:
        n = len(self.cells)
        for name in ("italic", "rules"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"table {self.title!r}: {name} has {len(value)} entries for {n} rows")
        if self.rules is not None and set(self.rules) - set(RULES):
            raise ValueError(f"table {self.title!r}: rules must be among {RULES}, got {sorted(set(self.rules))}")
        if self.bold is not None and self.bold.shape != self.cells.shape:
            raise ValueError(f"table {self.title!r}: bold has shape {self.bold.shape}, cells {self.cells.shape}")

    @property
    def show_index(self) -> bool:
        return not isinstance(self.cells.index, pd.RangeIndex)


def _formatters(table: Table, labels: Sequence[Any], kind: str) -> dict[Any, Callable[[Any], str]]:
    """Styler.format's formatter per column (``labels``: the columns as the Styler sees them)."""
    out = {}
    for shown, plain in zip(labels, table.cells.columns):
        header = plain[-1] if isinstance(plain, tuple) else plain
        fmt = table.formats.get(header, number)
        out[shown] = lambda value, fmt=fmt: fmt(value, kind)
    return out


def _styler(table: Table, kind: str):
    """The table's Styler for ``kind`` (``"latex"`` or ``"html"``): formats, escaping,
    bold cells and italic row labels."""
    cells = table.cells
    if kind == "latex" and table.tex_headers:
        cells = cells.rename(columns=dict(table.tex_headers))
    styler = cells.style
    styler.set_uuid("repens")  # fixed element ids: the same table, the same bytes
    escape = "latex" if kind == "latex" else "html"
    styler.format(formatter=_formatters(table, list(cells.columns), kind), escape=escape)
    styler.format_index(escape=escape, axis=0)
    styler.format_index(escape="latex-math" if kind == "latex" else "html", axis=1)
    if not table.show_index:
        styler.hide(axis=0)
    # (Styler.apply is lazy: each function binds its own props, not a shared variable)
    if table.bold is not None:
        mask = table.bold.to_numpy(dtype=bool)
        if kind == "latex":  # a cell in math (scientific notation) needs \boldmath as well
            fmts = [table.formats.get(c[-1] if isinstance(c, tuple) else c, number) for c in table.cells.columns]
            props = np.array(
                [
                    [
                        "textbf:--rwrap;boldmath:;" if "\\times" in fmts[j](v, "latex") else "textbf:--rwrap;"
                        for j, v in enumerate(row)
                    ]
                    for row in cells.itertuples(index=False)
                ],
                dtype=object,
            )
        else:
            props = np.full(mask.shape, "font-weight: bold;", dtype=object)
        styler.apply(lambda frame, props=props: np.where(mask, props, ""), axis=None)
    if table.italic is not None and table.show_index:
        slanted = "textit:--rwrap;" if kind == "latex" else "font-style: italic;"
        italic = list(table.italic)
        styler.apply_index(
            lambda labels, props=slanted: [props if flag else "" for flag in italic],
            axis=0,
            level=cells.index.nlevels - 1,
        )
    return styler


def _booktabs_rules(tex: str, table: Table) -> str:
    """Rules ``Styler.to_latex`` does not draw (it draws ``\\toprule``, ``\\midrule`` and
    ``\\bottomrule`` only): ``\\cmidrule`` under each group of a two-level header, and the
    :attr:`Table.rules` between groups of rows."""
    lines = tex.split("\n")
    index_cols = table.cells.index.nlevels if table.show_index else 0
    width = index_cols + table.cells.shape[1]
    top = lines.index(r"\toprule")
    if table.cells.columns.nlevels == 2:
        spans, start = [], 0
        groups = list(table.cells.columns.get_level_values(0))
        for i in range(1, len(groups) + 1):
            if i == len(groups) or groups[i] != groups[start]:
                if str(groups[start]):
                    a, b = index_cols + start + 1, index_cols + i
                    spans.append(rf"\cmidrule(lr){{{a}-{b}}}")
                start = i
        if spans:
            lines.insert(top + 2, " ".join(spans))
    if table.rules is not None:
        head = lines.index(r"\midrule", top)
        bottom = lines.index(r"\bottomrule", head)
        body = lines[head + 1 : bottom]
        if len(body) != len(table.rules):
            raise ValueError(f"table {table.title!r}: {len(body)} LaTeX rows for {len(table.rules)} rows")
        ruled = []
        for above, line in zip(table.rules, body):
            if above == "midrule":
                ruled.append(r"\midrule")
            elif above == "cmidrule":
                ruled.append(rf"\cmidrule(l){{{min(2, width)}-{width}}}")
            ruled.append(line)
        lines[head + 1 : bottom] = ruled
    return "\n".join(lines)


def to_latex(table: Table) -> str:
    """The table as a booktabs LaTeX ``table`` float."""
    styler = _styler(table, "latex")
    styles = []
    if table.size:
        styles.append({"selector": table.size, "props": ":;"})
    if table.tabcolsep:
        styles.append({"selector": "setlength", "props": f":{{\\tabcolsep}}{{{table.tabcolsep}}};"})
    if styles:
        styler.set_table_styles(styles, overwrite=False)
    index_cols = table.cells.index.nlevels if table.show_index else 0
    tex = styler.to_latex(
        hrules=True,
        caption=latex_text(table.caption) if table.caption else None,
        label=table.label or None,
        position=table.position,
        position_float="centering",
        column_format="l" * index_cols + "r" * table.cells.shape[1],
        multicol_align="c",
        multirow_align="naive",
        sparse_index=True,
    )
    packages = ", ".join(rf"\usepackage{{{p}}}" for p in table.packages)
    return f"% Generated by {table.source}; do not edit. Needs {packages}.\n" + _booktabs_rules(tex, table)


_HTML_STYLES = [
    {
        "selector": "",
        "props": "border-collapse: collapse; border-top: 2px solid #222; border-bottom: 2px solid #222;"
        " font-family: sans-serif; font-size: 14px; margin: 0.5em 0;",
    },
    {"selector": "caption", "props": "caption-side: top; text-align: left; font-weight: bold; padding: 0.3em 0;"},
    # the note wraps within the window even where the table is wider than it
    {"selector": "caption small", "props": "display: block; font-weight: normal; color: #555; max-width: 95vw;"},
    {"selector": "th, td", "props": "padding: 0.25em 0.7em; text-align: right; white-space: nowrap;"},
    {"selector": "tbody th", "props": "text-align: left; vertical-align: top; font-weight: normal;"},
    {"selector": "thead tr:last-child th", "props": "border-bottom: 1px solid #222;"},
    {"selector": "thead th", "props": "text-align: center;"},
]


#: A table whose HTML has a cell or row label longer than this wraps its text (Table.wrap).
WRAP_CHARS = 40
#: In a wrapping table, a cell up to this long stays on one line (a number, "0.958 ± 0.001").
NOWRAP_CHARS = 24
#: The wrapping table's styles: as wide as the page, every cell may wrap (long words broken).
_HTML_WRAP_STYLES = [
    {"selector": "", "props": "width: 100%; table-layout: auto;"},
    {
        "selector": "th, td",
        "props": "white-space: normal; word-wrap: break-word; overflow-wrap: break-word;"
        " max-width: 40em; vertical-align: top;",
    },
    {"selector": "tbody th", "props": "min-width: 6em;"},
    {"selector": "td", "props": "white-space: nowrap;"},
]
#: A column of long text in a wrapping table: wrapped, left-aligned.
_TEXT_COLUMN = "white-space: normal; text-align: left; min-width: 10em;"


def _text_lengths(table: Table) -> np.ndarray:
    """The length of each cell's text as the HTML shows it (tags left out)."""
    import re

    formats = _formatters(table, list(table.cells.columns), "html")
    out = np.zeros(table.cells.shape, dtype=int)
    for j, column in enumerate(table.cells.columns):
        fmt = formats[column]
        for i, value in enumerate(table.cells.iloc[:, j]):
            out[i, j] = len(re.sub(r"<[^>]+>", "", str(fmt(value))))
    return out


def wraps(table: Table, lengths: np.ndarray | None = None) -> bool:
    """Whether the table's HTML wraps its text (:attr:`Table.wrap`; None: some cell or row
    label longer than :data:`WRAP_CHARS`). ``lengths``: :func:`_text_lengths`, if known."""
    if table.wrap is not None:
        return table.wrap
    labels = (
        [str(v) for level in range(table.cells.index.nlevels) for v in table.cells.index.get_level_values(level)]
        if table.show_index
        else []
    )
    if lengths is None:
        lengths = _text_lengths(table)
    return bool((lengths > WRAP_CHARS).any() or any(len(v) > WRAP_CHARS for v in labels))


def to_html(table: Table) -> str:
    """The table as a whole HTML page (the Snakemake report shows it as it is). A table
    with long text (:func:`wraps`) is as wide as the page and wraps its text cells
    (left-aligned), so every column is seen without scrolling sideways; short cells
    (numbers) stay on one line."""
    styler = _styler(table, "html")
    lengths = _text_lengths(table)
    wrap = wraps(table, lengths)
    if wrap:
        # columns with long text (by position: Styler's class col<j>) wrap it, left-aligned
        text_columns = np.flatnonzero((lengths > NOWRAP_CHARS).any(axis=0))
        if text_columns.size:
            styler.set_table_styles(
                [{"selector": ", ".join(f"td.col{j}" for j in text_columns), "props": _TEXT_COLUMN}], overwrite=False
            )
    if table.rules is not None:
        rules = list(table.rules)
        ncols = table.cells.shape[1]

        def border(above: str, level: int = -1) -> str:
            if above == "midrule" or (above == "cmidrule" and level != 0):
                return "border-top: 1px solid #222;" if above == "midrule" else "border-top: 1px solid #999;"
            return ""

        styler.apply(lambda frame: np.array([[border(r)] * ncols for r in rules], dtype=object), axis=None)
        if table.show_index:
            for level in range(table.cells.index.nlevels):
                styler.apply_index(lambda labels, level=level: [border(r, level) for r in rules], axis=0, level=level)
    caption = html_lib.escape(table.title)
    if table.note:
        caption += f"<small>{html_lib.escape(table.note)}</small>"
    styler.set_caption(caption)
    styler.set_table_styles(_HTML_STYLES + (_HTML_WRAP_STYLES if wrap else []), overwrite=False)
    return styler.to_html(doctype_html=True, encoding="utf-8", sparse_index=True)


def to_csv(table: Table) -> str:
    """The table's tidy frame as CSV text."""
    return table.csv.to_csv(index=False, na_rep=table.csv_na_rep, lineterminator="\n")


def _markdown_cell(text: str, bold: bool = False) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return f"**{text}**" if bold and text else text


def to_markdown(table: Table) -> str:
    """The table as GitHub Markdown: the title in bold, the header (a column group joined
    to its header: ``RMSE: ours``), a line per row (an index label shown only where it
    changes, as in the image), bold cells in bold, and the note below. Its cells are the
    HTML's and the image's (:func:`_png_cells`)."""
    nidx, _, body, bold = _png_cells(table)
    header = [name or "" for name in table.cells.index.names] if nidx else []
    header += [
        ": ".join(str(level) for level in column if str(level)) if isinstance(column, tuple) else str(column)
        for column in table.cells.columns
    ]
    lines = [f"**{_markdown_cell(table.title)}**", ""] if table.title else []
    lines.append("| " + " | ".join(_markdown_cell(h) for h in header) + " |")
    lines.append("|" + "".join(" --- |" if j < nidx else " ---: |" for j in range(len(header))))
    lines += [
        "| " + " | ".join(_markdown_cell(c, b) for c, b in zip(row, flags)) + " |" for row, flags in zip(body, bold)
    ]
    if table.note:
        lines += ["", _markdown_cell(table.note)]
    return "\n".join(lines) + "\n"


def _png_cells(table: Table) -> tuple[int, list[str], list[list[str]], list[list[bool]]]:
    """The image's cells as text: the number of index columns, the header, the body (an
    index label shown only where it changes) and which cells are bold."""
    index = table.cells.index if table.show_index else None
    nidx = index.nlevels if index is not None else 0
    header = [""] * nidx + [str(c[-1] if isinstance(c, tuple) else c) for c in table.cells.columns]
    formats = _formatters(table, list(table.cells.columns), "text")
    bold = table.bold.to_numpy(dtype=bool) if table.bold is not None else np.zeros(table.cells.shape, dtype=bool)
    body, bold_cells = [], []
    for i, (_, row) in enumerate(table.cells.iterrows()):
        labels = []
        if index is not None:
            key = index[i] if nidx > 1 else (index[i],)
            prev = (index[i - 1] if nidx > 1 else (index[i - 1],)) if i else None
            labels = [str(v) if prev is None or v != prev[j] or j == nidx - 1 else "" for j, v in enumerate(key)]
        body.append(labels + [formats[c](v) for c, v in row.items()])
        bold_cells.append([False] * nidx + list(bold[i]))
    return nidx, header, body or [[""] * len(header)], bold_cells


def _png_rules(ax, n: int, rules: Sequence[str]) -> None:
    """The image's rules over ``n`` lines (header and body): top, under the header, the
    table's ``midrule`` / ``cmidrule`` (grey) rows, bottom."""

    def hline(row_index: int, color: str = "black", lw: float = 0.8) -> None:
        y = 1.0 - row_index / n
        ax.plot([0, 1], [y, y], color=color, lw=lw, transform=ax.transAxes, clip_on=False)

    hline(0, lw=1.2)
    hline(1)
    for i, above in enumerate(rules):
        if above == "midrule":
            hline(i + 1)
        elif above == "cmidrule":
            hline(i + 1, color="0.6", lw=0.6)
    hline(n, lw=1.2)


def render_png(path: Path, table: Table) -> None:
    """The table as an image: bold cells, a rule under the header, between blocks
    (``midrule``) and, grey, above extra rows (``cmidrule``); title above, note below."""
    from matplotlib.figure import Figure  # Agg canvas, no pyplot / global backend state

    nidx, header, body, bold_cells = _png_cells(table)
    rules = list(table.rules) if table.rules is not None else [""] * len(table.cells)
    widths = [max(len(str(r[j])) for r in body + [header]) for j in range(len(header))]
    total = sum(widths) or 1
    row_h = 0.26
    fig_w = max(6.0, 0.085 * total + 0.6)
    # the note wrapped to the figure's width (6.5 pt text: about 22 characters an inch)
    note = textwrap.wrap(table.note, width=int(fig_w * 22)) if table.note else []
    note_h = 0.12 * len(note) + (0.13 if note else 0.0)
    fig_h = row_h * (len(body) + 1) + 0.75 + note_h
    fig = Figure(figsize=(fig_w, fig_h))
    top = 1.0 - 0.5 / fig_h
    bottom = (0.05 + note_h) / fig_h
    ax = fig.add_axes((0.01, bottom, 0.98, top - bottom))
    ax.axis("off")
    mpl_table = ax.table(
        cellText=body, colLabels=header, cellLoc="center", bbox=(0, 0, 1, 1), colWidths=[w / total for w in widths]
    )
    mpl_table.auto_set_font_size(False)
    mpl_table.set_fontsize(8)
    for (r, c), cell in mpl_table.get_celld().items():
        cell.set_linewidth(0)
        cell.visible_edges = ""
        if c < nidx:
            cell.set_text_props(ha="left")
            cell.PAD = 0.02
        if r == 0 or bold_cells[r - 1][c]:
            cell.set_text_props(weight="bold")
    _png_rules(ax, len(body) + 1, rules)
    fig.suptitle(table.title, fontsize=10, y=1.0 - 0.12 / fig_h, va="top")
    if note:
        fig.text(
            0.01, 0.08 / fig_h, "\n".join(note), fontsize=6.5, color="0.35", ha="left", va="bottom", linespacing=1.3
        )
    save_figure_atomic(fig, Path(path), dpi=160)


def write_table(
    table: Table,
    out_tex: Path | str | None = None,
    out_html: Path | str | None = None,
    out_csv: Path | str | None = None,
    out_png: Path | str | None = None,
    out_md: Path | str | None = None,
) -> None:
    """Write whichever of the LaTeX, HTML, CSV, PNG and Markdown forms are asked for (each
    atomically)."""
    if out_csv is not None:
        write_text_atomic(Path(out_csv), to_csv(table))
    if out_tex is not None:
        write_text_atomic(Path(out_tex), to_latex(table))
    if out_html is not None:
        write_text_atomic(Path(out_html), to_html(table))
    if out_png is not None:
        render_png(Path(out_png), table)
    if out_md is not None:
        write_text_atomic(Path(out_md), to_markdown(table))


# --------------------------------------------------------------------------- builders


def csv_rows(blocks: Sequence[Block], columns: Sequence[Column]) -> list[dict[str, Any]]:
    """One dict per row: block, method, label, extra and, per column, mean, se, n, best."""
    out = []
    for block in blocks:
        bold = {c.key: best_rows(block, c) for c in columns}
        for row in block.rows:
            rec: dict[str, Any] = {"block": block.key, "method": row.key, "label": row.label, "extra": int(row.extra)}
            for c in columns:
                cell = row.cells[c.key]
                rec[f"{c.key}_mean"] = cell.mean * c.scale
                rec[f"{c.key}_se"] = cell.se * c.scale
                rec[f"{c.key}_n"] = cell.n
                rec[f"{c.key}_best"] = int(row.key in bold[c.key])
            out.append(rec)
    return out


def mean_se_table(
    blocks: Sequence[Block],
    columns: Sequence[Column],
    *,
    title: str,
    caption: str = "",
    label: str = "",
    note: str = "",
    source: str = "repens.report.tables",
    csv_columns: Sequence[Column] | None = None,
    seeds_column: str | None = None,
    **options: Any,
) -> Table:
    """A table in the layout of the paper's Table 1: one block of rows per dataset (the
    block label in the first column), mean ± s.e. cells, the best displayed mean of each
    column and block in bold (``Column.better``; ties all bold), a rule between blocks and
    one above each block's extra rows.

    The CSV has one row per (block, method) with ``<key>_mean``, ``_se``, ``_n`` and
    ``_best`` of every column of ``csv_columns`` (default ``columns``); ``options`` go
    to :class:`Table` (size, tabcolsep, position, ...). ``seeds_column``: the header of a
    first column giving each row's number of runs (the ``n`` of its cells, or a range
    ``lo-hi`` where its columns differ), so a reader sees what each mean rests on.
    """
    keys, cells, bold, rules = [], [], [], []
    for block in blocks:
        best = {c.key: best_rows(block, c) for c in columns}
        ruled = False
        for i, row in enumerate(block.rows):
            keys.append((block.label, row.label))
            counts = sorted({row.cells[c.key].n for c in columns})
            seeds = [str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"] if seeds_column else []
            cells.append(seeds + [row.cells[c.key] for c in columns])
            bold.append([False] * len(seeds) + [row.key in best[c.key] for c in columns])
            if i == 0:
                rules.append("midrule" if keys[:-1] else "")
            elif row.extra and not ruled:
                rules.append("cmidrule")
            else:
                rules.append("")
            ruled = ruled or row.extra
    index = pd.MultiIndex.from_tuples(keys) if keys else pd.MultiIndex.from_arrays([[], []])
    names = ([seeds_column] if seeds_column else []) + [c.name for c in columns]
    frame = pd.DataFrame(cells, index=index, columns=names, dtype=object)
    csv = pd.DataFrame(csv_rows(blocks, csv_columns or columns))
    return Table(
        cells=frame,
        csv=csv,
        title=title,
        caption=caption,
        label=label,
        note=note,
        source=source,
        tex_headers={c.name: c.header for c in columns},
        formats={c.name: mean_se_formatter(c) for c in columns},
        bold=pd.DataFrame(bold, index=index, columns=names, dtype=bool),
        rules=rules,
        csv_na_rep="nan",
        **options,
    )


def plain_table(frame: pd.DataFrame, title: str, note: str = "", **options: Any) -> Table:
    """A tidy frame shown as it is (no index, numbers by :func:`number`), e.g. the
    comparisons with the papers' values; its CSV is the frame."""
    frame = frame.reset_index(drop=True)
    return Table(cells=frame, csv=frame, title=title, note=note, csv_na_rep="nan", **options)


def with_labels(rows: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """``rows`` with a ``label`` column (``labels[method]``, else the key) after ``method``,
    so every CSV a report writes names its methods as config.yaml's labels do."""
    out = []
    for row in rows:
        new: dict[str, Any] = {}
        for key, value in row.items():
            new[key] = value
            if key == "method":
                new["label"] = labels.get(value, value)
        out.append(new)
    return out
