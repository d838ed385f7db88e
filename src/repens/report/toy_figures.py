"""Figure 1 and Figure 3 of the BNN toys (Appendix G.2, G.3), drawn from the figure files
of the pipeline step :mod:`repens.summaries.toy` (``figure-data``): per panel the inputs,
the data and the predictive's mean and sd (regression) or entropy (classification).

* :func:`plot_regression_panels_from`: Figure 1, one panel per input (predictive mean,
  +-1/2/3 sd bands of the predictive mixture, training points, ``x sin x``).
* :func:`plot_classification_panels_from`: Figure 3, predictive entropy over the grid.
* the same from the prediction files, the step run in the same process:
  :mod:`repens.pipeline.from_runs` (``python -m repens toy-figure``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from repens.core.errors import DataFileError
from repens.report.figures import save_png_pdf
from repens.report.style import PALETTE, figure_style
from repens.report.toy import settings_summary
from repens.results.files import read_npz
from repens.results.toy import DATASETS, ToyRun, run_from_record

log = logging.getLogger("repens.report")

__all__ = [
    "ToyPanel",
    "read_figure_data",
    "plot_regression_panels_from",
    "plot_classification_panels_from",
]


@dataclass(frozen=True)
class ToyPanel:
    """One panel of a toy figure: the run and what is drawn of it."""

    run: ToyRun
    x_test: np.ndarray  # (T, d)
    x_train: np.ndarray  # (N, d)
    y_train: np.ndarray  # (N,)
    mean: np.ndarray | None = None  # regression: predictive mean and sd (with the noise) at x_test
    sd: np.ndarray | None = None
    xs: np.ndarray | None = None  # classification: grid axes and the entropy image (rows: ys)
    ys: np.ndarray | None = None
    entropy: np.ndarray | None = None
    num_classes: int = 0


_PANEL_KEYS = {
    "regression": ("x_test", "x_train", "y_train", "mean", "sd"),
    "classification": ("x_test", "x_train", "y_train", "xs", "ys", "entropy", "num_classes"),
}


def read_figure_data(
    data: Path | str | Mapping[str, np.ndarray], dataset: str, labels: Mapping[str, str] | None = None
) -> list[ToyPanel]:
    """The panels of a toy figure file (a path, or its arrays); ``labels`` (method key ->
    display name) overrides the files' labels.

    Raises:
        ValueError: the file lacks an array or is for the other dataset (the message names it).
    """
    name = "figure data" if isinstance(data, Mapping) else str(data)
    arrays = dict(data) if isinstance(data, Mapping) else read_npz(Path(data), "figure data")
    if "panels" not in arrays or str(arrays.get("dataset")) not in DATASETS:
        raise DataFileError(name, "not a toy figure file (expected 'repens.summaries.toy figure-data')")
    if str(arrays["dataset"]) != dataset:
        raise ValueError(f"{name}: a {str(arrays['dataset'])!r} figure file, but {dataset!r} inputs are expected")
    panels = []
    for i, record in enumerate(json.loads(str(arrays["panels"][()]))):
        run = run_from_record(record)
        if labels:
            run = replace(run, label=labels.get(run.method, run.label))
        missing = [k for k in _PANEL_KEYS[dataset] if f"{i}/{k}" not in arrays]
        if missing:
            raise DataFileError(name, f"panel {i}: missing array(s) {missing}")
        values = {k: arrays[f"{i}/{k}"] for k in _PANEL_KEYS[dataset]}
        if "num_classes" in values:
            values["num_classes"] = int(values["num_classes"])
        panels.append(ToyPanel(run=run, **values))
    if not panels:
        raise DataFileError(name, "no panels")
    return panels


# --------------------------------------------------------------------------- figures

_NCOLS = 4
#: The +-k sd bands of Figure 1, widest first, with their fill alpha.
_BANDS = ((3, 0.12), (2, 0.16), (1, 0.22))
#: Colormap of the entropy images (Figure 3) and palette of the training classes.
_ENTROPY_CMAP = "viridis"
_CLASS_PALETTE = "tab10"


def _panel_grid(
    k: int,
    panel_w: float,
    panel_h: float,
    top_in: float,
    bottom_in: float,
    left_in: float,
    right_in: float,
    wspace: float,
    hspace: float,
):
    from matplotlib.figure import Figure  # Agg canvas, no pyplot / global backend state

    ncols = min(_NCOLS, k)
    nrows = math.ceil(k / ncols)
    width = left_in + right_in + ncols * panel_w * (1 + wspace)
    height = top_in + bottom_in + nrows * panel_h * (1 + hspace)
    fig = Figure(figsize=(width, height))
    grid = fig.add_gridspec(
        nrows,
        ncols,
        left=left_in / width,
        right=1 - right_in / width,
        bottom=bottom_in / height,
        top=1 - top_in / height,
        wspace=wspace,
        hspace=hspace,
    )
    axes = [fig.add_subplot(grid[i // ncols, i % ncols]) for i in range(k)]
    return fig, axes, ncols, nrows, width, height


def _title(p: ToyPanel, extra: str | None) -> str:
    return p.run.label + (f"\n{extra}" if extra else "")


def _label_outer(ax, i: int, ncols: int, k: int, xlabel: str | None, ylabel: str | None) -> None:
    """Tick labels (and axis labels) only on the left column and the bottom panel of each column."""
    ax.tick_params(labelsize=8)
    if i % ncols:
        ax.tick_params(labelleft=False)
        ax.set_ylabel("")
    elif ylabel is not None:
        ax.set_ylabel(ylabel)
    if i + ncols >= k:  # nothing below this panel
        if xlabel is not None:
            ax.set_xlabel(xlabel)
    else:
        ax.tick_params(labelbottom=False)
        ax.set_xlabel("")


#: Figure 1's y-range: the data and this many predictive sd around HMC's mean (about 95%)
#: over the training span.
_YLIM_SDS = 2.0


def _training_span(preds: Sequence[ToyPanel]) -> tuple[float, float]:
    """The x-range of the training data (both clusters and the gap between them)."""
    x = np.concatenate([p.x_train[:, 0] for p in preds])
    return float(x.min()), float(x.max())


def _regression_ylim(
    preds: Sequence[ToyPanel], truth: np.ndarray | None = None, xx: np.ndarray | None = None
) -> tuple[float, float]:
    """Shared y-limits chosen where the figure's point is, the training span (the two
    clusters and the gap between them): the data, the truth there and HMC's predictive
    mean +- 2 sd (about 95%) over x in that span, padded by 5%. Without an HMC panel,
    every panel's band over the span. What lies beyond (the extrapolating tails, where the
    bands grow to +-20, or a diverged method) is clipped, so the gap's uncertainty is
    not flattened by the tails."""
    lo_x, hi_x = _training_span(preds)
    values = [np.concatenate([p.y_train for p in preds])]
    if truth is not None and xx is not None:
        values.append(truth[(xx >= lo_x) & (xx <= hi_x)])
    for p in [p for p in preds if p.run.is_hmc] or list(preds):
        x = p.x_test[:, 0]
        inside = (x >= lo_x) & (x <= hi_x)
        mean, sd = p.mean, p.sd
        band = np.concatenate([mean[inside] - _YLIM_SDS * sd[inside], mean[inside] + _YLIM_SDS * sd[inside]])
        values.append(band[np.isfinite(band)])
    data = np.concatenate(values)
    lo, hi = float(data.min()), float(data.max())
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    return lo - pad, hi + pad


def _finish_figure(
    fig, title: str, footer: str, height: float, out_png: Path | str, out_pdf: Path | str, panels: int
) -> None:
    """Suptitle, settings footer, and the PNG + PDF written atomically (both toy figures)."""
    fig.suptitle(title, fontsize=11, y=1 - 0.12 / height, va="top")
    fig.text(0.5, 0.008, footer, ha="center", va="bottom", fontsize=7.5, color="0.25", wrap=True)
    save_png_pdf(fig, out_png, out_pdf)
    log.info("wrote %s and %s (%d panels)", out_png, out_pdf, panels)


def _draw_regression(ax, p: ToyPanel, xx: np.ndarray, truth: np.ndarray) -> None:
    """One Figure 1 panel: +-1/2/3 sd bands, ``x sin x`` (dashed), predictive mean, training data."""
    import seaborn as sns

    x = p.x_test[:, 0]
    mean, sd = p.mean, p.sd
    for k, alpha in _BANDS:
        ax.fill_between(x, mean - k * sd, mean + k * sd, color=PALETTE["band"], alpha=alpha, linewidth=0)
    sns.lineplot(
        x=xx,
        y=truth,
        ax=ax,
        color=PALETTE["truth"],
        linestyle="--",
        linewidth=0.7,
        zorder=2,
        estimator=None,
        sort=False,
    )
    sns.lineplot(x=x, y=mean, ax=ax, color=PALETTE["mean"], linewidth=1.3, zorder=3, estimator=None, sort=False)
    sns.scatterplot(
        x=p.x_train[:, 0], y=p.y_train, ax=ax, s=5, color=PALETTE["data"], edgecolor="none", zorder=4, legend=False
    )


def _regression_legend(fig, y: float = 0.03) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Line2D([], [], color=PALETTE["mean"], linewidth=1.3, label="predictive mean"),
        *(
            Patch(color=PALETTE["band"], alpha=a, linewidth=0, label=f"$\\pm{k}$ sd")
            for k, a in ((1, 0.5), (2, 0.3), (3, 0.15))
        ),
        Line2D([], [], color=PALETTE["data"], marker=".", linestyle="none", label="training data"),
        Line2D([], [], color=PALETTE["truth"], linestyle="--", linewidth=0.7, label=r"$x\,\sin x$"),
    ]
    fig.legend(
        handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False, bbox_to_anchor=(0.5, y)
    )


def _draw_regression_figure(
    preds: Sequence[ToyPanel],
    extra: Sequence[str | None],
    footer: str,
    xx: np.ndarray,
    truth: np.ndarray,
    limits: tuple[float, float, float, float],
    out_png: Path | str,
    out_pdf: Path | str,
) -> None:
    """:func:`plot_regression_panels_from`'s figure: the panels in their grid, with the
    shared limits ``(x_lo, x_hi, y_lo, y_hi)``, the legend and the footer, written."""
    import seaborn as sns

    x_lo, x_hi, y_lo, y_hi = limits
    title_lines = 2 if any(extra) else 1
    footer_lines = footer.count("\n") + 1
    with figure_style():
        fig, axes, ncols, _, _, height = _panel_grid(
            len(preds),
            3.0,
            2.1 + 0.15 * (title_lines - 1),
            top_in=0.6 + 0.15 * title_lines,
            bottom_in=0.8 + 0.14 * footer_lines,
            left_in=0.55,
            right_in=0.15,
            wspace=0.12,
            hspace=0.3 + 0.1 * title_lines,
        )
        for i, (ax, p) in enumerate(zip(axes, preds)):
            _draw_regression(ax, p, xx, truth)
            ax.set_xlim(x_lo, x_hi)
            ax.set_ylim(y_lo, y_hi)
            ax.set_title(_title(p, extra[i]), fontsize=10)
            _label_outer(ax, i, ncols, len(preds), "$x$", "$y$")
            sns.despine(ax=ax)
        _regression_legend(fig, (0.06 + 0.14 * footer_lines) / height)  # above the footer
        _finish_figure(
            fig,
            "1-D regression (paper Figure 1): predictive mean and $\\pm$1/2/3 sd of the predictive",
            footer,
            height,
            out_png,
            out_pdf,
            len(preds),
        )


def plot_regression_panels_from(
    data: Path | str | Mapping[str, np.ndarray],
    out_png: Path | str,
    out_pdf: Path | str,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Draw Figure 1 from the figure file of :mod:`repens.summaries.toy` (``data``): the 1-D
    regression predictive of each input, one panel per input.

    Panels follow the input order in a grid of up to four columns, each titled with
    the file's label. A panel shows the predictive mean (line), shaded bands of
    +-1, 2 and 3 standard deviations of the predictive mixture (sd including the
    observation noise), the training points and the true function ``x sin x``
    (thin dashed). All panels share the y-limits, chosen over the training span (both
    clusters and the gap between them): the data and HMC's mean +- 2 sd there; the
    extrapolating tails beyond are clipped (the footer says so). The suptitle names the paper
    figure; the footer gives scale, seed and the settings read from the jobs
    (particles and steps, and the HMC block); where methods' settings differ they
    go into the panel titles instead. Lines and points are drawn with seaborn in
    the report theme (:func:`repens.report.style.figure_style`, local to the figure).

    Raises:
        ValueError: the figure file is malformed or for the other dataset.
    """
    preds = read_figure_data(data, "regression", labels)
    footer, extra = settings_summary([p.run for p in preds])
    x_lo = min(float(p.x_test.min()) for p in preds)
    x_hi = max(float(p.x_test.max()) for p in preds)
    xx = np.linspace(x_lo, x_hi, 400)
    truth = xx * np.sin(xx)
    y_lo, y_hi = _regression_ylim(preds, truth, xx)
    span_lo, span_hi = _training_span(preds)
    reference = "HMC's" if any(p.run.is_hmc for p in preds) else "each panel's"
    footer += (
        f"\ny-axis: the data and {reference} mean $\\pm${_YLIM_SDS:g} sd over the training span "
        f"$x \\in [{span_lo:.1f}, {span_hi:.1f}]$ (both clusters and the gap); the bands beyond it, "
        "where the predictive extrapolates, are clipped"
    )

    _draw_regression_figure(preds, extra, footer, xx, truth, (x_lo, x_hi, y_lo, y_hi), out_png, out_pdf)


def _draw_entropy(ax, p: ToyPanel, vmax: float, class_colors: Sequence) -> Any:
    """One Figure 3 panel: the predictive entropy image and the training points by class."""
    import seaborn as sns

    xs, ys, entropy = p.xs, p.ys, p.entropy
    dx, dy = (xs[1] - xs[0]) / 2, (ys[1] - ys[0]) / 2
    image = ax.imshow(
        entropy,
        origin="lower",
        extent=(xs[0] - dx, xs[-1] + dx, ys[0] - dy, ys[-1] + dy),
        cmap=_ENTROPY_CMAP,
        vmin=0.0,
        vmax=vmax,
        interpolation="nearest",
        aspect="equal",
    )
    sns.scatterplot(
        x=p.x_train[:, 0],
        y=p.x_train[:, 1],
        ax=ax,
        s=6,
        c=[class_colors[int(c) % len(class_colors)] for c in p.y_train],
        edgecolor="white",
        linewidth=0.25,
        zorder=3,
        legend=False,
    )
    return image


def _entropy_colorbar(fig, image, num_classes: int, width: float, bottom: float, top: float) -> None:
    vmax = math.log(num_classes)
    cax = fig.add_axes((1 - 0.95 / width, bottom, 0.14 / width, top - bottom))
    bar = fig.colorbar(image, cax=cax)
    bar.set_label("predictive entropy (nats)", fontsize=9)
    ticks = [0.0, 0.5, 1.0, 1.5, vmax]
    bar.set_ticks([t for t in ticks if t <= vmax])
    bar.set_ticklabels([f"{t:g}" for t in ticks[:-1] if t <= vmax] + [f"log {num_classes}"], fontsize=8)
    bar.outline.set_visible(False)


def plot_classification_panels_from(
    data: Path | str | Mapping[str, np.ndarray],
    out_png: Path | str,
    out_pdf: Path | str,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Draw Figure 3 from the figure file of :mod:`repens.summaries.toy` (``data``): predictive
    entropy of each input over the 2-D grid, one panel per input.

    Panels follow the input order in a grid of up to four columns, each titled
    with the file's label. The entropy (nats) is an image on one shared colour
    scale from 0 to ``log C`` (``log 5``) with one colorbar; the training points are
    overlaid (``sns.scatterplot``), coloured by class. Suptitle and footer as in
    :func:`plot_regression_panels_from`.

    Raises:
        ValueError: the figure file is malformed or for the other dataset.
    """
    import seaborn as sns

    preds = read_figure_data(data, "classification", labels)
    footer, extra = settings_summary([p.run for p in preds])
    num_classes = max(p.num_classes for p in preds)
    class_colors = sns.color_palette(_CLASS_PALETTE)

    title_lines = 2 if any(extra) else 1
    top_in, bottom_in = 0.6 + 0.15 * title_lines, 0.5
    with figure_style():
        fig, axes, ncols, _, width, height = _panel_grid(
            len(preds),
            2.5,
            2.5 + 0.15 * (title_lines - 1),
            top_in=top_in,
            bottom_in=bottom_in,
            left_in=0.5,
            right_in=1.1,
            wspace=0.1,
            hspace=0.1 + 0.1 * title_lines,
        )
        image = None
        for i, (ax, p) in enumerate(zip(axes, preds)):
            image = _draw_entropy(ax, p, math.log(num_classes), class_colors)
            ax.set_title(_title(p, extra[i]), fontsize=10)
            _label_outer(ax, i, ncols, len(preds), None, None)
        _entropy_colorbar(fig, image, num_classes, width, bottom_in / height, 1 - top_in / height)
        _finish_figure(
            fig,
            "2-D classification (paper Figure 3): predictive entropy; dots: training points by class",
            footer,
            height,
            out_png,
            out_pdf,
            len(preds),
        )
