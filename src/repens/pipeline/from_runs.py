"""Tables and figures straight from result files, in one process: the summary step of
:mod:`repens.summaries`, then the report that draws from what it returns (the CLI's
``synthetic-table``, ``synthetic-figure``, ``toy-table``, ``toy-figure`` and
``training-curves`` commands). The workflow runs the first four apart (the step writes its
file, the report reads it) and Table 1's training curves in one (rule ``plot_training_curves``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from repens.report.synthetic import write_metrics_table_from
from repens.report.synthetic_figures import plot_target_panels_from
from repens.report.toy import write_distance_table_from
from repens.report.toy_figures import plot_classification_panels_from, plot_regression_panels_from
from repens.report.training_figures import plot_repulsion, plot_training_curves
from repens.summaries import synthetic as synthetic_steps
from repens.summaries import toy as toy_steps
from repens.summaries import training_curves as curve_steps

__all__ = [
    "training_curves",
    "write_metrics_table",
    "plot_target_panels",
    "write_distance_table",
    "plot_regression_panels",
    "plot_classification_panels",
]


def write_metrics_table(
    inputs: list[Path],
    out_csv: Path,
    out_tex: Path,
    labels: Mapping[str, str] | None = None,
    out_html: Path | None = None,
) -> None:
    """The synthetic metrics table (:func:`repens.report.synthetic.write_metrics_table_from`)
    of the result files ``inputs`` (:func:`repens.summaries.synthetic.metrics_summary`).

    Raises:
        ValueError: an input is malformed or two inputs are the same run.
    """
    write_metrics_table_from(
        synthetic_steps.metrics_summary(inputs), out_csv, out_tex, labels=labels, out_html=out_html
    )


def plot_target_panels(
    target: str, inputs: list[Path], out_png: Path, out_pdf: Path, labels: Mapping[str, str] | None = None
) -> None:
    """Figure 2 / F.1 (:func:`repens.report.synthetic_figures.plot_target_panels_from`) with
    the figure data of :func:`repens.summaries.synthetic.figure_data`."""
    plot_target_panels_from(
        target, synthetic_steps.figure_data(target, inputs), inputs, out_png, out_pdf, labels=labels
    )


def write_distance_table(
    regression,
    classification,
    out_csv: Path | str,
    out_tex: Path | str,
    labels: Mapping[str, str] | None = None,
    out_html: Path | str | None = None,
) -> None:
    """The toys' distance-to-HMC table (:func:`repens.report.toy.write_distance_table_from`) of
    the prediction files (:func:`repens.summaries.toy.distance_summary`).

    Args:
        regression: ``(hmc_paths, method_paths)`` for the regression toy (one HMC
            reference per seed, or one path), or None.
        classification: the same for the classification toy, or None.

    Raises:
        ValueError: both are None; a file is malformed, is for the other dataset,
            a reference is not an HMC file or two are for one seed, a method file's
            seed has no reference, a method appears twice in a seed, the inputs mix
            scales, or a method's test/training inputs differ from its reference's
            (messages name the files).
    """
    write_distance_table_from(
        toy_steps.distance_summary(regression, classification), out_csv, out_tex, labels=labels, out_html=out_html
    )


def plot_regression_panels(
    inputs: Sequence[Path | str], out_png: Path | str, out_pdf: Path | str, labels: Mapping[str, str] | None = None
) -> None:
    """Figure 1 (:func:`repens.report.toy_figures.plot_regression_panels_from`) with the figure
    data of :func:`repens.summaries.toy.figure_data`.

    Raises:
        ValueError: no inputs, an input is malformed or is not a regression file, or
            the inputs mix seeds/scales (messages name the files).
    """
    plot_regression_panels_from(toy_steps.figure_data("regression", inputs), out_png, out_pdf, labels=labels)


def plot_classification_panels(
    inputs: Sequence[Path | str], out_png: Path | str, out_pdf: Path | str, labels: Mapping[str, str] | None = None
) -> None:
    """Figure 3 (:func:`repens.report.toy_figures.plot_classification_panels_from`) with the
    figure data of :func:`repens.summaries.toy.figure_data`.

    Raises:
        ValueError: no inputs, an input is malformed or is not a classification file,
            or the inputs mix seeds/scales (messages name the files).
    """
    plot_classification_panels_from(toy_steps.figure_data("classification", inputs), out_png, out_pdf, labels=labels)


def training_curves(
    convergence: Path,
    out_png: Path,
    dataset: str = "fashionmnist",
    repulsion_png: Path | None = None,
    repulsion_csv: Path | None = None,
) -> list[str]:
    """Table 1's training curves of the runs ``convergence`` (``results/convergence.csv``)
    names, drawn to ``out_png``; with ``repulsion_png`` / ``repulsion_csv``, the repulsion
    diagnostic drawn and summarised per method. Returns what was written, one line each."""
    curves = curve_steps.training_curves(convergence, dataset)
    plot_training_curves(curves, out_png)
    runs = curves.groupby(["method", "seed"]).ngroups if not curves.empty else 0
    lines = [f"{out_png}: {runs} runs of {curves['method'].nunique()} methods"]
    if repulsion_png or repulsion_csv:
        ratios = curve_steps.repulsion_ratios(convergence, dataset)
        if repulsion_png:
            plot_repulsion(ratios, repulsion_png)
        if repulsion_csv:
            from repens.core.atomic import write_text_atomic

            summary = curve_steps.summarize_repulsion(ratios).to_csv(index=False, float_format="%.4g")
            write_text_atomic(Path(repulsion_csv), summary)
        n = ratios.groupby(["method", "seed"]).ngroups if not ratios.empty else 0
        lines.append(f"repulsion diagnostic: {n} runs of {ratios['method'].nunique()} methods")
    return lines
