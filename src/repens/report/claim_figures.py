"""The evidence of each claim as a picture: one forest plot per claim and diagnostic.

Reads ``results/claims_comparisons.csv`` only (written by ``python -m repens claims``:
one row per comparison with its numbers and verdict, :data:`COLUMNS`) and never judges:
every verdict drawn is the CSV's. Each figure has a row per comparison, labelled
"a relation b": the difference a - b with the interval the verdict rule reads (± the
``detectable`` half-width), a line at 0 and, for an agreement, its margin shaded (``~``:
the band ±delta; ``<=``: below +delta; ``>=``: above -delta). Points are coloured by
verdict (:data:`repens.report.style.VERDICT_COLOURS`); a comparison that did not
converge is a hollow marker, one with too few seeds its point estimate without a bar
(labelled "no s.e."), one that was not run a line of text with its reason. One
shared x axis per claim (the rule reads each row against 0 or its margin); where the
rows' scales differ by more than :data:`SYMLOG_RATIO` it is symmetric-log.

``python -m repens claim-figures --comparisons F --out-dir D`` writes ``D/<claim>.png``.
"""

from __future__ import annotations

import logging
import math
import re
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from repens.core.atomic import write_bytes_atomic
from repens.core.errors import DataFileError
from repens.report.style import VERDICT_COLOURS, figure_style
from repens.results.files import ResultFileMissing

__all__ = [
    "COLUMNS",
    "NUMERIC",
    "SYMLOG_RATIO",
    "read_comparisons",
    "comparison_label",
    "plot_claim",
    "write_claim_figures",
]

log = logging.getLogger(__name__)

#: the columns the figures read (``claims_comparisons.csv`` holds them, and a few more)
COLUMNS = (
    "claim",
    "kind",
    "claim_verdict",
    "index",
    "a",
    "relation",
    "b",
    "difference",
    "detectable",
    "margin",
    "verdict",
    "reason",
    "caveat",
)
#: the numeric ones (empty or "nan": none)
NUMERIC = ("index", "difference", "detectable", "margin")
#: above this ratio of the largest row scale (|a - b| + detectable, or margin) to the
#: smallest, the x axis is symmetric-log (linear within the smallest scale)
SYMLOG_RATIO = 100.0
#: the reason of a comparison that did not converge starts with this, and the verdict of one
#: resting on a single seed is this (repens.report.verdicts; this module reads files only)
NOT_CONVERGED = "not converged"
TOO_FEW_SEEDS = "too few seeds"
LABEL_WIDTH = 70
REASON_WIDTH = 58
#: a saved figure's palette: greys, and tints of each verdict colour towards white and
#: towards the margin band's grey (a third of the bytes of full colour, every colour kept)
BAND_GREY = 0.85


def read_comparisons(path: Path | str) -> pd.DataFrame:
    """``claims_comparisons.csv`` with its numeric columns as floats; a missing file, or a
    column missing or not numeric, raises an error whose one line names the file and column."""
    path = Path(path)
    if not path.is_file():
        raise ResultFileMissing(f"{path}: no such comparisons file (python -m repens claims writes it)")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as err:
        raise DataFileError(path, f"not a readable CSV ({err})") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise DataFileError(path, f"no column {missing[0]!r} (has {', '.join(frame.columns)})")
    for column in NUMERIC:
        values = pd.to_numeric(frame[column].replace("", "nan"), errors="coerce")
        bad = frame[column][values.isna() & ~frame[column].str.lower().isin(["", "nan"])]
        if len(bad):
            raise DataFileError(path, f"column {column!r}: {bad.iloc[0]!r} is not a number (line {bad.index[0] + 2})")
        frame[column] = values.astype(float)
    return frame


def _short(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def comparison_label(row: Any, width: int = LABEL_WIDTH) -> str:
    """ "a relation b" in at most ``width`` characters (b shortened first: a names the row)."""
    a, b, rel = " ".join(str(row["a"]).split()), " ".join(str(row["b"]).split()), str(row["relation"])
    room = width - len(rel) - 2
    b = _short(b, max(room - len(a), 12))
    return f"{_short(a, room - len(b))} {rel} {b}"


def not_converged(rows: pd.DataFrame) -> pd.Series:
    """Which comparisons rest on runs that did not converge: gated (the reason) or scored as
    run with a caveat."""
    return rows["reason"].str.startswith(NOT_CONVERGED) | rows["caveat"].str.startswith(NOT_CONVERGED)


def _short_reason(reason: str) -> str:
    """The first part of a "not run" reason, file paths by their name."""
    first = str(reason).split("; ")[0]
    # a file named before what it lacks says less than what it lacks: left out
    words = [w for w in first.split() if not (w.endswith(":") and "." in Path(w.rstrip(":")).name)]
    return _short(" ".join(words), REASON_WIDTH)


def _scale(frame: pd.DataFrame) -> tuple[float, float]:
    """The smallest and largest non-zero scale of the rows that ran (|a - b| + detectable, margin;
    a point estimate without an interval by |a - b| alone)."""
    values = np.concatenate(
        [(frame["difference"].abs() + frame["detectable"].fillna(0.0)).to_numpy(), frame["margin"].abs().to_numpy()]
    )
    values = values[np.isfinite(values) & (values > 0)]
    return (float(values.min()), float(values.max())) if len(values) else (1.0, 1.0)


def _x_range(rows: pd.DataFrame, ran: pd.Series, symlog: bool, lo_scale: float) -> tuple[float, float, float]:
    """The x range (every interval, margin and 0, with some room) and the symlog axis's
    linear threshold (a power of 10; 0 on a linear axis)."""
    ends = [0.0]
    for _, r in rows[ran].iterrows():
        half = r["detectable"] if math.isfinite(r["detectable"]) else 0.0  # a point estimate: no bar
        ends += [r["difference"] - half, r["difference"] + half]
        if math.isfinite(r["margin"]):
            ends += [-r["margin"], r["margin"]]
    ends = [e for e in ends if math.isfinite(e)]
    left, right = min(ends), max(ends)
    if symlog:  # room of a fraction of a decade on either side, and one linear scale
        linthresh = 10.0 ** math.floor(math.log10(lo_scale))
        return min(1.4 * left, -linthresh), max(1.4 * right, linthresh), linthresh
    pad = 0.08 * (right - left) if right > left else 1.0
    return left - pad, right + pad, 0.0


def _draw_rows(ax, rows: pd.DataFrame, y: np.ndarray, stuck: pd.Series, left: float, right: float) -> None:
    """Each comparison: its interval and the agreement band, or why it did not run."""
    for yi, (_, r) in zip(y, rows.iterrows()):
        if r["verdict"] == "not run":
            ax.text(
                0.02,
                yi,
                f"not run: {_short_reason(r['reason'])}",
                transform=ax.get_yaxis_transform(),
                va="center",
                ha="left",
                fontsize=7.5,
                color=VERDICT_COLOURS["not run"],
                style="italic",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5},
            )
            continue
        delta = r["margin"]
        if math.isfinite(delta) and r["relation"] in ("~", "<=", ">="):
            band = {"~": (-delta, delta), "<=": (left, delta), ">=": (-delta, right)}[r["relation"]]
            ax.fill_betweenx([yi - 0.42, yi + 0.42], *band, color=str(BAND_GREY), lw=0, zorder=0)
        colour = VERDICT_COLOURS.get(r["verdict"], (0, 0, 0))
        hollow = bool(stuck.loc[r.name])
        ax.errorbar(
            r["difference"],
            yi,
            xerr=r["detectable"] if math.isfinite(r["detectable"]) else None,
            fmt="o",
            color=colour,
            ecolor=colour,
            elinewidth=1.6,
            capsize=3,
            ms=6,
            mfc="white" if hollow else colour,
            mew=1.5,
            zorder=3,
        )


def _legend(fig, rows: pd.DataFrame, ran: pd.Series, stuck: pd.Series) -> None:
    """The legend: the verdicts drawn (each always in its colour), hollow, the margin."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    drawn = set(rows.loc[ran, "verdict"])
    handles = [Line2D([], [], marker="o", ls="", color=c, label=v) for v, c in VERDICT_COLOURS.items() if v in drawn]
    if stuck[ran].any():
        handles.append(Line2D([], [], marker="o", ls="", color="0.3", mfc="white", label="not converged"))
    if rows.loc[ran, "margin"].notna().any():
        handles.append(Patch(color=str(BAND_GREY), label="agreement margin"))
    if handles:
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncol=len(handles),
            fontsize=7.5,
            frameon=False,
            handletextpad=0.3,
            columnspacing=1.0,
        )


def _title(rows: pd.DataFrame, claim: str, verdict: str) -> str:
    """ "claim: verdict (its family-wise reading) (diagnostic)", from the comparisons' rows
    (:func:`read_comparisons`: text columns as read, an empty reading ''; a file written before
    the reading existed has no ``claim_familywise`` column)."""
    family = rows["claim_familywise"].iloc[0] if "claim_familywise" in rows else ""
    return (
        f"{claim}: {verdict}"
        + (f" ({family})" if family else "")
        + (" (diagnostic)" if rows["kind"].iloc[0] == "diagnostic" else "")
    )


def plot_claim(rows: pd.DataFrame, out_png: Path | str) -> None:
    """One claim's forest plot (``rows``: its comparisons, as :func:`read_comparisons`
    reads them) written to ``out_png``."""
    import seaborn as sns
    from matplotlib.figure import Figure  # Agg canvas, no pyplot / global backend state
    from matplotlib.ticker import FuncFormatter

    rows = rows.sort_values("index").reset_index(drop=True)
    n = len(rows)
    y = np.arange(n)[::-1].astype(float)  # the first comparison on top
    ran = rows["verdict"] != "not run"
    stuck = not_converged(rows)
    lo_scale, hi_scale = _scale(rows[ran])
    symlog = hi_scale / lo_scale > SYMLOG_RATIO
    left, right, linthresh = _x_range(rows, ran, symlog, lo_scale)

    claim, verdict = rows["claim"].iloc[0], rows["claim_verdict"].iloc[0]
    with figure_style():
        fig = Figure(figsize=(8.5, 1.9 + 0.3 * n), layout="constrained")
        ax = fig.subplots()
        if symlog:  # linear within the smallest scale (a power of 10), ticks outside it
            ax.set_xscale("symlog", linthresh=linthresh, linscale=0.5)
            ax.xaxis.set_major_formatter(
                FuncFormatter(lambda x, _: "0" if x == 0 else "" if abs(x) < 1.5 * linthresh else f"{x:g}")
            )
        ax.set_xlim(left, right)
        ax.set_ylim(-0.6, n - 0.4)
        _draw_rows(ax, rows, y, stuck, left, right)
        ax.axvline(0.0, color="0.2", lw=0.9, zorder=1)
        labels = [
            comparison_label(r)
            + (" (not converged)" if stuck.loc[i] else "")
            + (" (no s.e.)" if r["verdict"] == TOO_FEW_SEEDS else "")
            for i, r in rows.iterrows()
        ]
        ax.set_yticks(y, labels, fontsize=7.5)
        unit = "\n(symmetric-log axis: the rows differ in scale)" if symlog else ""
        ax.set_xlabel(
            f"difference: left side minus right side of each row\n(bar: the interval its verdict reads){unit}",
            fontsize=8.5,
        )
        ax.tick_params(axis="x", labelsize=8)
        sns.despine(ax=ax, left=True)
        ax.grid(axis="x", color="0.92", lw=0.6, zorder=0)
        title = _title(rows, claim, verdict)
        # across the figure's whole width (an axes title starts right of the row labels)
        fig.suptitle(
            textwrap.fill(title, 100),
            x=0.01,
            ha="left",
            fontsize=10.5,
            color=VERDICT_COLOURS.get(verdict, (0, 0, 0)),
            fontweight="bold",
        )
        _legend(fig, rows, ran, stuck)
        _save_png(fig, out_png)


def _palette() -> list[int]:
    """256 RGB entries (flat): 64 greys, then 16 tints of each verdict colour towards white
    and 8 towards :data:`BAND_GREY` (anti-aliased edges on white and on the band)."""
    colours = [(g, g, g) for g in np.linspace(0.0, 1.0, 64)]
    for rgb in VERDICT_COLOURS.values():
        c = np.asarray(rgb, dtype=float)
        colours += [tuple(c + (1.0 - c) * t) for t in np.linspace(0.0, 0.95, 16)]
        colours += [tuple(c + (BAND_GREY - c) * t) for t in np.linspace(0.1, 0.9, 8)]
    flat = [int(round(255 * x)) for colour in colours for x in colour]
    return flat + [255] * (3 * 256 - len(flat))


def _save_png(fig: Any, out_png: Path | str) -> None:
    """``fig`` as a PNG on the palette of :func:`_palette`, written atomically."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    buffer.seek(0)
    palette = Image.new("P", (1, 1))
    palette.putpalette(_palette())
    image = Image.open(buffer).convert("RGB").quantize(palette=palette, dither=Image.Dither.NONE)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    write_bytes_atomic(Path(out_png), out.getvalue())


def write_claim_figures(comparisons_csv: Path | str, out_dir: Path | str) -> list[Path]:
    """One ``<claim>.png`` per claim and diagnostic of ``comparisons_csv`` in ``out_dir``."""
    frame = read_comparisons(comparisons_csv)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for claim, rows in frame.groupby("claim", sort=False):
        if not re.fullmatch(r"[\w.-]+", claim):
            raise DataFileError(comparisons_csv, f"column 'claim': {claim!r} is not a claim id (letters, digits, -_.)")
        out = out_dir / f"{claim}.png"
        plot_claim(rows, out)
        written.append(out)
    log.info("wrote %d evidence figures in %s", len(written), out_dir)
    return written
