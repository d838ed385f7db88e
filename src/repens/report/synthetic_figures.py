"""Figure 2 and Figure F.1 of the synthetic experiments (Appendix G.1, F), drawn from the runs'
particles and the figure file of the pipeline step :mod:`repens.summaries.synthetic`
(``figure-data``: the exact samples, the view window, the log-density grid).

* :func:`plot_target_panels_from`: one joint plot per method, left to right in input
  order (the paper's layout: SVGD, kde-WGD, sge-WGD, ssge-WGD): target log-density
  contours, particles (blue) and the one-dimensional marginals as KDEs of exact target
  samples (red) and of the particles (blue).
* the same from the runs alone, the step run in the same process: :mod:`repens.pipeline.from_runs`
  (``python -m repens synthetic-figure``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from repens.core.errors import DataFileError
from repens.report.figures import save_png_pdf
from repens.report.style import PALETTE, figure_style
from repens.report.synthetic import PAPER_FIGURES, TARGET_TITLES, load_runs
from repens.results.files import RecordedJob
from repens.results.synthetic import Run, read_npz

log = logging.getLogger("repens.report")

__all__ = ["read_figure_data", "plot_target_panels_from"]


# --------------------------------------------------------------------------- figure

#: Points of the marginal KDE curves, evaluated across the view window only (seaborn's
#: default grid spans the data range, which for the funnel's heavy-tailed x marginal
#: leaves a handful of points inside the view).
_KDE_GRIDSIZE = 300


def _settings_text(job: RecordedJob) -> dict[str, str]:
    def known(value: Any, default: str = "?") -> Any:
        return default if value is None else value

    return {
        "particles": f"n={known(job.particles)}",
        "steps": f"{known(job.steps)} steps",
        "lr": f"{known(job.optimizer, 'adam').capitalize()} lr {known(job.lr)}",
        "bandwidth": f"bandwidth {known(job.bandwidth, 'median')}",
        "seed": f"seed {known(job.seed)}",
    }


@dataclass(frozen=True)
class _Density:
    """The target's log density on the view window (for the contours)."""

    mesh_x: np.ndarray
    mesh_y: np.ndarray
    logp: np.ndarray
    levels: list[float]

    @classmethod
    def of(cls, data: Mapping[str, np.ndarray]) -> _Density:
        return cls(data["mesh_x"], data["mesh_y"], data["logp"], [float(v) for v in data["levels"]])


def _joint_axes(fig, cell):
    """A seaborn-JointGrid-like layout inside one gridspec cell: joint, top and right axes."""
    sub = cell.subgridspec(2, 2, width_ratios=(4, 1), height_ratios=(1, 4), wspace=0.04, hspace=0.04)
    ax = fig.add_subplot(sub[1, 0])
    top = fig.add_subplot(sub[0, 0], sharex=ax)
    right = fig.add_subplot(sub[1, 1], sharey=ax)
    return ax, top, right


def _draw_contours(ax, density: _Density) -> None:
    top_level = float(density.logp.max()) + 1e-9
    ax.contourf(
        density.mesh_x, density.mesh_y, density.logp, levels=density.levels + [top_level], cmap="Greys", alpha=0.25
    )
    ax.contour(
        density.mesh_x,
        density.mesh_y,
        density.logp,
        levels=density.levels,
        colors="0.45",
        linewidths=0.5,
        linestyles="solid",
    )


def _draw_particles(ax, particles: np.ndarray, window: Sequence[tuple[float, float]]) -> None:
    """The particles as a seaborn scatter; the ones outside the window are counted in the panel."""
    import seaborn as sns

    (x_lo, x_hi), (y_lo, y_hi) = window
    finite = np.all(np.isfinite(particles), axis=1)
    p = particles[finite]
    sns.scatterplot(
        x=p[:, 0],
        y=p[:, 1],
        ax=ax,
        s=9,
        color=PALETTE["particles"],
        alpha=0.75,
        edgecolor="none",
        zorder=3,
        legend=False,
    )
    outside = int((~finite).sum() + ((p[:, 0] < x_lo) | (p[:, 0] > x_hi) | (p[:, 1] < y_lo) | (p[:, 1] > y_hi)).sum())
    if outside:
        ax.text(
            0.02,
            0.02,
            f"{outside} of {len(particles)} particles outside view",
            transform=ax.transAxes,
            fontsize=7,
            color="0.2",
            va="bottom",
        )


def _kde_marginal(ax, values: np.ndarray, color, vertical: bool, limits: tuple[float, float]) -> None:
    """One filled seaborn KDE (Scott's rule, fitted to all of ``values``) drawn across ``limits``;
    nothing where a KDE cannot be formed."""
    import seaborn as sns

    values = values[np.isfinite(values)]
    if values.size < 2 or np.ptp(values) == 0:
        return
    data = {"y": values} if vertical else {"x": values}
    sns.kdeplot(
        **data,
        ax=ax,
        color=color,
        fill=True,
        alpha=0.15,
        linewidth=1.2,
        bw_method="scott",
        warn_singular=False,
        clip=limits,
        gridsize=_KDE_GRIDSIZE,
    )


def _draw_marginals(
    top, right, particles: np.ndarray, exact: np.ndarray, window: Sequence[tuple[float, float]]
) -> None:
    """Top/right marginal KDEs: exact target samples (red) under the particles (blue)."""
    import seaborn as sns

    for axis, d, vertical in ((top, 0, False), (right, 1, True)):
        _kde_marginal(axis, exact[:, d], PALETTE["exact"], vertical, window[d])
        _kde_marginal(axis, particles[:, d], PALETTE["particles"], vertical, window[d])
        axis.set_xlabel("")
        axis.set_ylabel("")
        if vertical:
            axis.set_xlim(left=0)
            axis.tick_params(axis="x", bottom=False, labelbottom=False)
            axis.tick_params(axis="y", left=False, labelleft=False)
            sns.despine(ax=axis, bottom=True)
        else:
            axis.set_ylim(bottom=0)
            axis.tick_params(axis="y", left=False, labelleft=False)
            axis.tick_params(axis="x", bottom=False, labelbottom=False)
            sns.despine(ax=axis, left=True)


def _panel_title(run: Run, settings: Mapping[str, str], varying: Sequence[str]) -> str:
    return run.label + ("\n" + ", ".join(settings[key] for key in varying) if varying else "")


def _figure_texts(
    target: str, scales: Sequence[str], settings: Mapping[str, str], common: Sequence[str]
) -> tuple[str, str]:
    """Suptitle (target, paper figure, scale, shared settings) and the legend footer."""
    figure = PAPER_FIGURES.get(target)
    head = TARGET_TITLES.get(target, target) + (f" (paper {figure})" if figure else "")
    head += f" \u2014 scale: {', '.join(scales)}"
    if common:
        head += "; " + ", ".join(settings[key] for key in common)
    footer = (
        "grey: target log-density contours; blue dots: particles; marginals: KDE of "
        "exact target samples (red) and of the particles (blue)"
    )
    return head, footer


def _check_target(runs: Sequence[Run], target: str) -> None:
    for run in runs:
        if run.target != target:
            raise ValueError(f"{run.path}: a run on target {run.target!r}, but the figure is for {target!r}")


def read_figure_data(data: Path | str | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The figure file of :mod:`repens.summaries.synthetic` (a path, or its arrays)."""
    arrays = dict(data) if isinstance(data, Mapping) else read_npz(Path(data), "figure data")
    missing = [k for k in ("exact", "window", "mesh_x", "mesh_y", "logp", "levels") if k not in arrays]
    if missing:
        raise DataFileError(
            str(data) if not isinstance(data, Mapping) else "figure data",
            f"missing array(s) {missing} (expected 'repens.summaries.synthetic figure-data')",
        )
    return arrays


def _draw_panel(fig, cell, run: Run, data: Mapping[str, np.ndarray], first: bool, title: str) -> None:
    """One joint plot: contours, particles, marginals, the axes and the title."""
    import seaborn as sns

    window = [tuple(w) for w in data["window"].tolist()]
    ax, top, right = _joint_axes(fig, cell)
    _draw_contours(ax, _Density.of(data))
    _draw_particles(ax, run.particles, window)
    _draw_marginals(top, right, run.particles, data["exact"], window)
    ax.set_xlim(*window[0])
    ax.set_ylim(*window[1])
    ax.set_xlabel("$x$")
    ax.set_ylabel("$y$" if first else "")
    sns.despine(ax=ax)
    top.set_title(title, fontsize=11)


def plot_target_panels_from(
    target: str,
    data: Path | str | Mapping[str, np.ndarray],
    inputs: list[Path],
    out_png: Path,
    out_pdf: Path,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Draw Figure 2 (``gaussian``) or Figure F.1 (``funnel``): one joint plot per method.

    Panels run left to right in input order, each titled with the method label.
    The main axes show the target's log-density contours (levels 0.5 r^2 below
    the maximum, r = 0.5 ... 4.5) and the particles (blue, ``sns.scatterplot``);
    the top and right axes show the marginals as seaborn KDEs of exact target
    samples (red) and of the particles (blue), as in the paper's caption. All
    panels share one view window; particles outside it are counted in the panel.
    The exact samples, the window and the log-density grid are read from ``data``,
    the figure file of :mod:`repens.summaries.synthetic` for these ``inputs``. The
    suptitle states the scale and the settings (n, steps, optimizer, bandwidth,
    seed) read from the jobs. Drawn in the report's seaborn theme
    (:func:`repens.report.style.figure_style`, set only for this figure).

    Args:
        target: ``"gaussian"`` or ``"funnel"``; every input must be a run on it.
        data: The figure file (or its arrays).
        inputs: Result files, one per panel.
        out_png: PNG path (150 dpi); parent directories are created.
        out_pdf: PDF path.
        labels: Method key -> display name (``config.yaml``'s labels) of the panel
            titles; overrides the labels of the files and :data:`LABELS`.

    Raises:
        ValueError: an input is malformed or belongs to another target (the
            message names the file).
    """
    from matplotlib.figure import Figure  # Agg canvas, no pyplot / global backend state

    runs = load_runs(inputs, labels)
    _check_target(runs, target)
    arrays = read_figure_data(data)
    settings = [_settings_text(run.job) for run in runs]
    common = [key for key in settings[0] if all(s[key] == settings[0][key] for s in settings)]
    varying = [key for key in settings[0] if key not in common]
    head, footer = _figure_texts(target, sorted({run.scale for run in runs}), settings[0], common)

    k = len(runs)
    with figure_style():
        fig = Figure(figsize=(3.6 * k, 4.3))
        outer = fig.add_gridspec(1, k, left=0.05, right=0.99, bottom=0.17, top=0.82, wspace=0.22)
        for i, run in enumerate(runs):
            _draw_panel(fig, outer[i], run, arrays, i == 0, _panel_title(run, settings[i], varying))
        fig.suptitle(head, fontsize=11)
        fig.text(0.5, 0.012, footer, ha="center", fontsize=8, color="0.25")
        save_png_pdf(fig, out_png, out_pdf)
    log.info("wrote %s and %s (%d panels)", out_png, out_pdf, k)
