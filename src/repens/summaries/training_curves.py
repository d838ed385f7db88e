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

The figures are drawn by :mod:`repens.report.training_figures`; ``python -m repens
training-curves --convergence results/convergence.csv --out results/figures/table1_training.png
[--repulsion-png P --repulsion-csv C]`` runs both (:func:`repens.pipeline.from_runs.training_curves`).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd

from repens.results.training import CURVES, REPULSION
from repens.summaries.converged import parse_log

__all__ = [
    "CURVES",
    "REPULSION",
    "training_curves",
    "repulsion_ratios",
    "summarize_repulsion",
]


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
