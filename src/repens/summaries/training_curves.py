"""Table 1's training curves: for each method, the ensemble's NLL on the fixed training
images and on the held-out monitor images against the step, one line per seed, read from
the training logs that ``results/convergence.csv`` names (rule ``plot_training_curves``).
The picture beside the convergence verdicts: a late rise of the training NLL (the gate's
"late degradation") or a held-out NLL still falling is seen at a glance.

From the same logs, the repulsion diagnostic of the repulsive rules: ``repulsion=`` of each
progress line, ||repulsion|| / ||drift|| of that step's update in the space the rule works
in (:func:`repens.methods.updates.repulsion_ratio`), and ``repulsion_adam=``, the same in
weight space after Adam's per-coordinate scaling, against the step and summarised per
method (does the repulsion act at all?).

``python -m repens.summaries.training_curves --convergence results/convergence.csv
--out results/figures/table1_training.png [--repulsion-png P --repulsion-csv C]``
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from repens.summaries.converged import parse_log

__all__ = [
    "CURVES",
    "REPULSION",
    "training_curves",
    "repulsion_ratios",
    "summarize_repulsion",
    "plot_training_curves",
    "plot_repulsion",
    "main",
]

#: the progress fields drawn (the training loop's names) and their legend labels
CURVES = {"train_nll": "training NLL", "monitor_nll": "held-out NLL"}
#: the repulsion diagnostic's progress fields and their labels: the ratio in the space the rule
#: works in, and the same in weight space after Adam's per-coordinate scaling
#: (``repulsion_adam``, :func:`repens.methods.updates.adam_preconditioner`; logs written before it have none)
REPULSION = {"repulsion": "before Adam", "repulsion_adam": "after Adam's scaling"}


def _run_segment(path: Path) -> list[tuple[int, dict[str, float]]]:
    """The points of a job's run in its log: the last segment of the most steps, not a
    burn-in (hyper-DE's search comes before its run, with fewer steps)."""
    segments = [s for s in parse_log(path) if not s.get("burn_in")]
    if not segments:
        return []
    most = max(s["total"] for s in segments)
    points: list[tuple[int, dict[str, float]]] = []
    for segment in segments:  # a resumed run continues its segment; a restart begins anew
        if segment["total"] == most:
            points = [p for p in points if p[0] < segment["points"][0][0]] + segment["points"]
    return points


def _points(convergence_csv: Path | str, dataset: str, fields: dict[str, str]) -> pd.DataFrame:
    """One row per (method, seed, step, field) of the image runs of ``dataset`` in
    ``convergence_csv`` whose logs exist and carry the field (finite values only)."""
    rows = []
    with open(convergence_csv, newline="") as fh:
        runs = [r for r in csv.DictReader(fh) if r["experiment"] == "image" and r["dataset"] == dataset]
    for run in runs:
        log = Path(run["log"]) if run.get("log") else None
        if log is None or not log.is_file():
            continue
        for step, values in _run_segment(log):
            for name, label in fields.items():
                if name in values and math.isfinite(values[name]):
                    rows.append(
                        {
                            "method": run["method"],
                            "seed": int(run["seed"]),
                            "step": step,
                            "curve": label,
                            "value": values[name],
                            "row_converged": run.get("row_converged") == "True",
                        }
                    )
    return pd.DataFrame(rows, columns=["method", "seed", "step", "curve", "value", "row_converged"])


def training_curves(convergence_csv: Path | str, dataset: str = "fashionmnist") -> pd.DataFrame:
    """One row per (method, seed, step, curve) of the image runs of ``dataset`` in
    ``convergence_csv`` whose logs exist: columns method, seed, step, curve (a label of
    :data:`CURVES`), value, and row_converged (the method's row verdict, as a bool)."""
    return _points(convergence_csv, dataset, CURVES)


def repulsion_ratios(convergence_csv: Path | str, dataset: str = "fashionmnist") -> pd.DataFrame:
    """As :func:`training_curves`, for the repulsion diagnostic (:data:`REPULSION`): the
    runs whose logs carry it (a rule without a repulsion term logs none)."""
    return _points(convergence_csv, dataset, REPULSION)


def summarize_repulsion(ratios: pd.DataFrame) -> pd.DataFrame:
    """Per method (in the order of ``ratios``) and ratio (``ratio``: a label of
    :data:`REPULSION`): the runs with the diagnostic (``runs``, ``seeds``), the mean over
    runs of each run's mean ratio over its logged steps (``mean``), the smallest and largest
    logged ratio (``min``, ``max``), the mean ratio at the last logged step of each run
    (``last``) and the logged steps per run (``points``)."""
    columns = ["method", "ratio", "runs", "seeds", "mean", "min", "max", "last", "points"]
    if ratios.empty:
        return pd.DataFrame(columns=columns)
    per_run = ratios.sort_values("step").groupby(["method", "curve", "seed"], sort=False)["value"]
    runs = pd.DataFrame({"mean": per_run.mean(), "last": per_run.last(), "points": per_run.size()}).reset_index()
    present = set(zip(ratios["method"], ratios["curve"]))
    order = [(m, c) for m in dict.fromkeys(ratios["method"]) for c in REPULSION.values() if (m, c) in present]
    out = []
    for method, curve in order:
        mine = runs[(runs["method"] == method) & (runs["curve"] == curve)]
        values = ratios.loc[(ratios["method"] == method) & (ratios["curve"] == curve), "value"]
        out.append(
            {
                "method": method,
                "ratio": curve,
                "runs": len(mine),
                "seeds": " ".join(str(s) for s in sorted(mine["seed"])),
                "mean": mine["mean"].mean(),
                "min": values.min(),
                "max": values.max(),
                "last": mine["last"].mean(),
                "points": int(mine["points"].min()),
            }
        )
    return pd.DataFrame(out, columns=columns)


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


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m repens.summaries.training_curves --convergence F --out PNG [--dataset D]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m repens.summaries.training_curves", description=__doc__)
    parser.add_argument("--convergence", required=True, help="results/convergence.csv (its log column)")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--dataset", default="fashionmnist")
    parser.add_argument("--repulsion-png", help="also draw the repulsion diagnostic here")
    parser.add_argument("--repulsion-csv", help="also write its summary per method (summarize_repulsion) here")
    args = parser.parse_args(argv)
    curves = training_curves(args.convergence, args.dataset)
    plot_training_curves(curves, args.out)
    runs = curves.groupby(["method", "seed"]).ngroups if not curves.empty else 0
    print(f"{args.out}: {runs} runs of {curves['method'].nunique()} methods")
    if args.repulsion_png or args.repulsion_csv:
        ratios = repulsion_ratios(args.convergence, args.dataset)
        if args.repulsion_png:
            plot_repulsion(ratios, args.repulsion_png)
        if args.repulsion_csv:
            from repens.core.atomic import write_text_atomic

            write_text_atomic(
                Path(args.repulsion_csv), summarize_repulsion(ratios).to_csv(index=False, float_format="%.4g")
            )
        n = ratios.groupby(["method", "seed"]).ngroups if not ratios.empty else 0
        print(f"repulsion diagnostic: {n} runs of {ratios['method'].nunique()} methods")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
