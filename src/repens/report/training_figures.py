"""Table 1's training curves and the repulsion diagnostic as figures, from the frames of
:mod:`repens.summaries.training_curves` (rule ``plot_training_curves``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from repens.results.training import REPULSION

__all__ = ["plot_training_curves", "plot_repulsion"]


def plot_training_curves(curves: pd.DataFrame, out_png: Path | str, columns: int = 5) -> None:
    """One panel per method (in the table's order of ``curves``), the seeds as colours and
    the curves as line styles, a shared NLL axis; a method whose row did not converge says
    so in its title. Written atomically as a 150 dpi PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from repens.report.figures import save_figure
    from repens.report.style import figure_style

    methods = list(dict.fromkeys(curves["method"]))
    rows = max(1, -(-len(methods) // columns))
    with figure_style():
        fig, axes = plt.subplots(rows, columns, figsize=(3.0 * columns, 2.4 * rows), sharex=True, sharey=True)
        if not methods:  # a build without Table 1 runs (a quick run of other experiments)
            fig.text(0.5, 0.5, "no Table 1 run with a training log", ha="center", va="center")
        flat = list(getattr(axes, "flat", [axes]))
        for ax, method in zip(flat, methods, strict=False):
            data = curves[curves["method"] == method]
            sns.lineplot(
                data=data, x="step", y="value", hue="seed", style="curve", palette="deep", ax=ax, legend=ax is flat[0]
            )
            converged = bool(data["row_converged"].iloc[0])
            ax.set_title(method + ("" if converged else " (not converged)"), color="black" if converged else "C3")
            ax.set_xlabel("step")
            ax.set_ylabel("NLL (nats)")
        for ax in flat[len(methods) :]:
            ax.set_axis_off()
        if methods and flat[0].get_legend() is not None:
            sns.move_legend(flat[0], "upper right", fontsize="x-small", title_fontsize="x-small")
        fig.tight_layout()
        save_figure(fig, out_png, "png", dpi=150)
        plt.close(fig)


def plot_repulsion(ratios: pd.DataFrame, out_png: Path | str) -> None:
    """The repulsion diagnostic against the step on one log-scaled Axes, a colour per
    method and a line per run. Written atomically as a 150 dpi PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from repens.report.figures import save_figure
    from repens.report.style import figure_style

    with figure_style():
        fig, axes = plt.subplots(1, len(REPULSION), figsize=(11.0, 3.6), sharey=True)
        hue_order = list(dict.fromkeys(ratios["method"]))
        # one distinct colour per method: "deep" repeats after ten
        palette = sns.color_palette("deep" if len(hue_order) <= 10 else "husl", max(1, len(hue_order)))
        for ax, label in zip(axes, REPULSION.values(), strict=True):
            data = ratios[ratios["curve"] == label] if not ratios.empty else ratios
            ax.set_title(f"||repulsion|| / ||drift||, {label}", fontsize="small")
            if data.empty:
                ax.text(0.5, 0.5, "no Table 1 run logged this ratio", ha="center", va="center")
                ax.set_axis_off()
                continue
            sns.lineplot(
                data=data,
                x="step",
                y="value",
                hue="method",
                hue_order=hue_order,
                units="seed",
                estimator=None,
                palette=palette,
                ax=ax,
                legend=label == list(REPULSION.values())[-1],
            )
            ax.set_yscale("log")
            ax.set_xlabel("step")
            ax.set_ylabel("ratio of norms")
            if ax.get_legend() is not None:
                sns.move_legend(
                    ax, "upper left", bbox_to_anchor=(1.0, 1.0), fontsize="x-small", title_fontsize="x-small"
                )
        fig.tight_layout()
        save_figure(fig, out_png, "png", dpi=150)
        plt.close(fig)
