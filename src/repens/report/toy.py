"""The distance-to-HMC table of the BNN toys (Appendix G.2, G.3), and what the toy
reports share (the runs' settings as text).

The numbers come from the files of the pipeline step :mod:`repens.summaries.toy`; this
module reads and formats them. Figures 1 and 3 are drawn by :mod:`repens.report.toy_figures`
(its public functions are re-exported here).

* :func:`write_distance_table_from`: each method's predictive against HMC's
  (Wasserstein-2 per region for regression, KL near/far from the data for
  classification), CSV, booktabs LaTeX and HTML through :mod:`repens.report.tables`,
  from ``results/toy/distances.json``;
* the same from the prediction files, the step run in the same process:
  :mod:`repens.pipeline.from_runs` (``python -m repens toy-table``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from repens.core.errors import DataFileError
from repens.results.files import read_json
from repens.results.toy import (
    CLASSIFICATION_COLUMNS,
    COLUMNS,
    DATASETS,
    NEAR_RADIUS,
    REGRESSION_COLUMNS,
    ToyRun,
    run_from_record,
    run_record,
)

log = logging.getLogger("repens.report")

__all__ = [
    "DATASETS",
    "NEAR_RADIUS",
    "COLUMNS",
    "REGRESSION_COLUMNS",
    "CLASSIFICATION_COLUMNS",
    "ToyRun",
    "run_record",
    "settings_summary",
    "read_distance_summary",
    "distance_frame_from",
    "distance_table",
    "write_distance_table_from",
]

# --------------------------------------------------------------------------- settings as text


#: The HMC settings named in footers and captions (when the job's ``hmc`` block has them).
_HMC_KEYS = ("chains", "warmup", "samples", "thin")


def _fmt_setting(job: dict[str, Any], members: int) -> str:
    if "hmc" in job and isinstance(job["hmc"], dict):
        hmc = job["hmc"]
        keys = [k for k in _HMC_KEYS if k in hmc] or sorted(hmc)
        items = [f"{k} {hmc[k]}" for k in keys if isinstance(hmc[k], (int, float, str, bool))]
        return ", ".join(items + ([f"{members} draws used"] if members else []))
    parts = []
    if "particles" in job:
        parts.append(f"{job['particles']} particles")
    if "steps" in job:
        parts.append(f"{job['steps']} steps")
    return ", ".join(parts) or "?"


def _members(p: ToyRun) -> int:
    """Number of stored functions (regression); 0 when the file does not tell (classification)."""
    return p.members


def _settings_detail(preds: Sequence[ToyRun]) -> tuple[list[str], list[str | None]]:
    """The settings read from the jobs: text parts (methods' settings when they are shared,
    else one part per method; the HMC block) and per-input extra title lines where the
    methods' settings differ (None for HMC and when shared)."""
    others = [p for p in preds if not p.is_hmc]
    method_settings = {p.path: _fmt_setting(p.job, _members(p)) for p in others}
    shared = len(set(method_settings.values())) <= 1
    parts: list[str] = []
    if others and shared:
        parts.append(f"methods: {next(iter(method_settings.values()))}")
    elif others:
        parts += [f"{p.label}: {method_settings[p.path]}" for p in others]
    parts += [
        f"HMC: {_fmt_setting(p.job, _members(p))}"
        + ("" if p.converged is not False else " (not converged: R-hat / ESS fail the paper-scale thresholds)")
        for p in preds
        if p.is_hmc
    ]
    extra = [None if p.is_hmc or shared else method_settings[p.path] for p in preds]
    return parts, extra


def settings_summary(preds: Sequence[ToyRun]) -> tuple[str, list[str | None]]:
    """Figure footer (scale, seed, settings; per-method settings go into the titles) and title extras."""
    parts, extra = _settings_detail(preds)
    if any(extra):
        parts = [part for part in parts if part.startswith("HMC:")]
    return "; ".join([f"scale: {preds[0].scale}", f"seed {preds[0].seed}", *parts]), extra


#: The table's columns: key in the frame -> (plain header, LaTeX header).
_REGRESSION_HEADERS: dict[str, tuple[str, str]] = {
    "w2_data": ("W2 data", "$W_2$ data"),
    "w2_gap": ("W2 gap", "$W_2$ gap"),
    "w2_outside": ("W2 out", "$W_2$ out"),
    "gap_sd": ("gap sd", "gap sd"),
    "gap_sd_ratio": ("ratio", "ratio"),
    "gap_sd_epistemic": ("gap sd (f)", "gap sd$_f$"),
    "gap_sd_epistemic_ratio": ("ratio (f)", "ratio$_f$"),
}
_CLASSIFICATION_HEADERS: dict[str, tuple[str, str]] = {
    "kl_near": ("KL near", "KL near"),
    "kl_far": ("KL far", "KL far"),
    "entropy_near": ("H near", "$H$ near"),
    "entropy_far": ("H far", "$H$ far"),
}


def _seeds_text(seeds: Sequence[Any]) -> str:
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"


def _mean_se_text(n_seeds: int) -> Any:
    """Cell formatter: mean ± s.e. (3 decimals), with ``(n=k)`` where fewer seeds than
    the table's ran."""
    from repens.report.tables import Cell, Column, format_cell, number

    column = Column("value", "value", better=None, digits=3)

    def fmt(cell: Any, kind: str) -> str:
        if not isinstance(cell, Cell):
            return number(cell, kind)
        text = format_cell(cell, column, pm=r"$\pm$" if kind == "latex" else "±")
        return text if cell.n >= n_seeds or not math.isfinite(cell.mean) else f"{text} (n={cell.n})"

    return fmt


def _unconverged(present: Mapping[str, Any]) -> list[str]:
    """The seeds whose HMC reference is not converged."""
    return sorted(
        {str(hmc.seed) for by_seed in present.values() for hmc, _ in by_seed.values() if hmc.converged is False},
        key=str,
    )


def _distance_caption(
    present: Mapping[str, Any], seeds: Sequence[Any], converged_rhat_max: float, converged_ess_min: float
) -> tuple[str, dict[tuple[str, str], str]]:
    """The caption of the distance table and its columns: ``(group, key) -> plain header``."""
    first = next(iter(next(iter(present.values())).values()))[0]
    settings = "; ".join(
        f"{dataset}: " + "; ".join(_settings_detail([hmc, *methods])[0])
        for dataset, by_seed in present.items()
        for hmc, methods in list(by_seed.values())[:1]
    )
    over = (
        ""
        if len(seeds) == 1
        else f" Each cell: mean $\\pm$ standard error over the {len(seeds)} seeds, "
        "each seed's data, method and HMC reference its own."
    )
    unconverged = _unconverged(present)
    warning = (
        f" The HMC reference of seed{'s' if len(unconverged) > 1 else ''} {', '.join(unconverged)} is not "
        f"converged (R-hat / ESS fail the paper-scale thresholds $\\hat R \\le {converged_rhat_max:g}$, ESS "
        f"$\\ge {converged_ess_min:g}$): its distances are no evidence about the methods."
        if unconverged
        else ""
    )
    parts = [
        "Distance of each method's predictive distribution to that of the HMC reference posterior "
        f"(HMC is the reference; scale {first.scale}, {_seeds_text(seeds)}; {settings}).{over}{warning}",
    ]
    headers: dict[tuple[str, str], str] = {}  # (group, key) -> plain header
    if "regression" in present:
        parts.append(
            r"Regression (G.2): the predictive at $x$ is the mixture $\frac1S\sum_s\mathcal N(f_s(x),\sigma^2)$, "
            "approximated by the Gaussian with its mean and standard deviation "
            r"(sd; $\mathrm{sd}^2 = \mathrm{Var}_s f_s(x) + \sigma^2$); "
            r"$W_2 = \sqrt{(m_1-m_2)^2+(s_1-s_2)^2}$ between the method's and HMC's Gaussian, averaged over "
            r"the test points in the data region ($x\in[1.5,2.5]\cup[4.5,6]$), the gap ($2.5<x<4.5$) "
            r"and outside ($[0,1.5)\cup(6,7]$). Gap sd: mean predictive sd over the gap, total (with the "
            r"noise $\sigma$) and epistemic ($f$ only, $\sqrt{\mathrm{Var}_s f_s(x)}$); ratio = method / HMC."
        )
        headers.update({("Regression", key): plain for key, (plain, _) in _REGRESSION_HEADERS.items()})
    if "classification" in present:
        hmc_cls = next(iter(present["classification"].values()))[0]
        n_grid, n_classes = hmc_cls.n_grid, hmc_cls.n_classes
        parts.append(
            r"Classification (G.3): $\mathrm{KL}(p_{\mathrm{HMC}}\,\|\,p_{\mathrm{method}})$ of the predictive "
            f"class probabilities, averaged over the ${n_grid}\\times{n_grid}$ grid points within distance "
            f"{NEAR_RADIUS:g} of a training point (near) and over the rest (far); "
            f"$H$: mean predictive entropy (nats, at most $\\log {n_classes}$) of the method, HMC's in the first row."
        )
        headers.update({("Classification", key): plain for key, (plain, _) in _CLASSIFICATION_HEADERS.items()})
    return " ".join(parts), headers


def _distance_cells(frame, headers: Mapping[tuple[str, str], str]):
    """HMC's own values (one per seed; its distances to itself and ratios left empty), then one
    row per method: each cell the mean ± s.e. over the seeds."""
    import pandas as pd

    from repens.report.tables import mean_se

    def cell(values) -> Any:
        return mean_se([float(v) for v in values if np.isfinite(v)])

    hmc_row = []
    for _, key in headers:
        if key in ("gap_sd", "gap_sd_epistemic", "entropy_near", "entropy_far"):
            per_seed = frame.dropna(subset=["hmc_" + key]).groupby("seed", sort=False)["hmc_" + key].first()
            hmc_row.append(cell(per_seed.to_numpy()))
        else:
            hmc_row.append(float("nan"))
    methods = list(dict.fromkeys(frame["method"]))
    by_method = {m: frame[frame["method"] == m] for m in methods}
    rows = [hmc_row] + [[cell(by_method[m][key].to_numpy()) for _, key in headers] for m in methods]
    columns = pd.MultiIndex.from_tuples(
        [(group, plain) for (group, _), plain in headers.items()], names=[None, "Method"]
    )
    index = pd.Index(["HMC (reference)", *(by_method[m]["label"].iloc[0] for m in methods)])
    return pd.DataFrame(rows, index=index, columns=columns, dtype=object)


def distance_table(frame, present: dict[str, Any], converged_rhat_max: float, converged_ess_min: float):
    """The distance frame as a :class:`repens.report.tables.Table` (``present``: per dataset,
    ``{seed: (hmc, methods)}`` as :class:`ToyRun`; the thresholds: the paper scale's HMC
    convergence check, named where a reference fails it): HMC's own values
    (in italics) first, a rule, then one row per method; each cell the mean ± s.e. over
    the seeds (each seed's method against its own seed's HMC); the columns of each
    dataset present under a group header (Regression, Classification)."""
    from repens.report.tables import Table

    seeds = list(dict.fromkeys(seed for by_seed in present.values() for seed in by_seed))
    first = next(iter(next(iter(present.values())).values()))[0]
    caption, headers = _distance_caption(present, seeds, converged_rhat_max, converged_ess_min)
    unconverged = _unconverged(present)
    cells = _distance_cells(frame, headers)
    methods = len(cells) - 1
    tex = {plain: tex for plain, tex in [*_REGRESSION_HEADERS.values(), *_CLASSIFICATION_HEADERS.values()]}
    fmt = _mean_se_text(len(seeds))
    return Table(
        cells=cells,
        csv=frame,
        caption=caption,
        label="tab:toy-distance-to-hmc",
        title=f"BNN toys: distance of each predictive to HMC's "
        f"(scale: {first.scale}, {_seeds_text(seeds)})" + ("; HMC reference NOT converged" if unconverged else ""),
        note="W2: Wasserstein-2 between Gaussian summaries; ratio: method / HMC; KL(HMC || method); "
        "H: predictive entropy (nats); (f): epistemic, without the noise"
        + ("" if len(seeds) == 1 else "; mean ± s.e. over seeds")
        + (
            f"; the HMC reference of seed(s) {', '.join(unconverged)} is not converged (R-hat / ESS fail the "
            f"paper-scale thresholds R-hat <= {converged_rhat_max:g}, ESS >= {converged_ess_min:g}): no evidence "
            "about the methods"
            if unconverged
            else ""
        ),
        source="repens.report.toy.write_distance_table",
        tex_headers=tex,
        formats={plain: fmt for plain in headers.values()},
        italic=[True] + [False] * methods,
        rules=["", "midrule"] + [""] * (methods - 1),
        packages=("booktabs", "amsmath"),
        size="footnotesize",
        tabcolsep="4pt",
        position="ht",
    )


def read_distance_summary(summary: Path | str | Mapping[str, Any]) -> dict[str, Any]:
    """The distance file of :mod:`repens.summaries.toy` (a path, or the dict itself)."""
    if isinstance(summary, Mapping):
        return dict(summary)
    data = read_json(Path(summary), "distance summary")
    if not isinstance(data.get("rows"), list) or not isinstance(data.get("datasets"), dict):
        raise DataFileError(summary, "not a distance summary (expected 'rows' and 'datasets')")
    return data


def distance_frame_from(summary: Path | str | Mapping[str, Any], labels: Mapping[str, str] | None = None):
    """The distance-to-HMC frame (columns :data:`COLUMNS`, one row per method and seed) of the
    distance file; ``labels`` (method key -> display name) overrides the files' labels."""
    import pandas as pd

    rows = [
        {**row, "label": (labels or {}).get(row["method"], row["label"])}
        for row in read_distance_summary(summary)["rows"]
    ]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for col in REGRESSION_COLUMNS + CLASSIFICATION_COLUMNS:
        frame[col] = frame[col].astype(float)
    frame["seed"] = frame["seed"].astype("Int64")
    frame["hmc_converged"] = frame["hmc_converged"].astype("Int64")
    return frame


def _present(
    summary: Mapping[str, Any], labels: Mapping[str, str] | None = None
) -> dict[str, dict[Any, tuple[ToyRun, list[ToyRun]]]]:
    """Per dataset, ``{seed: (hmc, methods)}`` of the distance file; the methods relabelled."""
    present: dict[str, dict[Any, tuple[ToyRun, list[ToyRun]]]] = {}
    for dataset, record in summary["datasets"].items():
        grid = {key: record[key] for key in ("n_grid", "n_classes") if key in record}
        present[dataset] = {}
        for group in record["groups"]:
            methods = [run_from_record(m) for m in group["methods"]]
            if labels:
                methods = [replace(m, label=labels.get(m.method, m.label)) for m in methods]
            present[dataset][group["seed"]] = (replace(run_from_record(group["hmc"]), **grid), methods)
    return present


def write_distance_table_from(
    summary: Path | str | Mapping[str, Any],
    out_csv: Path | str,
    out_tex: Path | str,
    labels: Mapping[str, str] | None = None,
    out_html: Path | str | None = None,
) -> None:
    """Write the distance-to-HMC table of the toys as CSV, booktabs LaTeX and (optionally) HTML,
    from the distance file of :mod:`repens.summaries.toy` (``results/toy/distances.json``).

    The CSV has one row per method and seed, methods in input order (the regression
    methods first, then any classification-only ones), seeds in the order of the HMC
    references; each method file is compared with the HMC reference of its own seed.
    The LaTeX and HTML tables show one row per method, each cell the mean ± s.e. over
    seeds (``(n=k)`` where fewer seeds than the table's ran). Columns of the CSV
    (see :data:`COLUMNS`, NaN where a dataset is absent):

    * regression, with the predictive at x summarised by the Gaussian with the
      mixture's mean and sd (:func:`repens.evaluation.distances.mixture_moments`):
      ``w2_data``, ``w2_gap``, ``w2_outside``: mean over the test points of a
      region (:func:`repens.summaries.toy.regression_regions`) of ``W2(method, HMC) =
      sqrt((m - m_HMC)^2 + (s - s_HMC)^2)``; ``gap_sd`` / ``hmc_gap_sd``: mean total
      predictive sd (with the noise) over the gap, ``gap_sd_ratio`` their ratio
      (method / HMC); ``gap_sd_epistemic`` / ``hmc_gap_sd_epistemic`` /
      ``gap_sd_epistemic_ratio``: the same for the sd of f alone (no noise; the
      sharper test of in-between uncertainty, since the noise floor is shared);
    * classification: ``kl_near`` / ``kl_far``: mean over grid points of
      ``KL(p_HMC || p_method)`` (:func:`repens.evaluation.distances.categorical_kl`) within
      :data:`NEAR_RADIUS` of a training point / farther; ``entropy_near`` /
      ``entropy_far`` and ``hmc_entropy_near`` / ``hmc_entropy_far``: mean
      predictive entropies (nats);
    * ``method``, ``label``, ``seed``, ``scale``, and the source files.

    Args:
        summary: The distance file (or its content).
        out_csv: CSV path (parent directories are created).
        out_tex: LaTeX path.
        labels: Method key -> display name (``config.yaml``'s labels).
        out_html: HTML path (the Snakemake report shows it), or None.
    """
    from repens.report.tables import write_table

    data = read_distance_summary(summary)
    frame = distance_frame_from(data, labels)
    table = distance_table(frame, _present(data, labels), data["converged_rhat_max"], data["converged_ess_min"])
    write_table(table, out_tex=out_tex, out_html=out_html, out_csv=out_csv)
    log.info("wrote %s and %s (%d methods, %d rows)", out_csv, out_tex, frame["method"].nunique(), len(frame))
