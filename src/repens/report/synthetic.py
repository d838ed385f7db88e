"""Figure 2, Figure F.1 and a metrics table for the synthetic experiments (Appendix G.1, F).

The runs are the ``.npz`` files written by ``repens.experiments.synthetic.run_synthetic``:
``particles`` (n, 2) float64, ``initial`` (n, 2) and ``job`` (0-d string array
holding the JSON job spec, with ``dataset`` = target name, ``method``, ``seed``,
``scale``, ``particles``, ``steps``, ``lr``, ``bandwidth``, ...). The numbers come from
the files of the pipeline step :mod:`repens.summaries.synthetic`; this module reads and draws.

* :func:`write_metrics_table_from`: CSV + booktabs LaTeX + HTML table of the metrics file
  (through :mod:`repens.report.tables`).
* :func:`repens.report.synthetic_figures.plot_target_panels_from`: one joint plot per method, left to right in input
  order (the paper's layout: SVGD, kde-WGD, sge-WGD, ssge-WGD): target
  log-density contours, particles (blue) and the one-dimensional marginals as
  KDEs of exact target samples (red) and of the particles (blue).
* the same from the runs alone, the step run in the same process: :mod:`repens.pipeline.from_runs`
  (``python -m repens synthetic-table``, ``synthetic-figure``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from repens.core.errors import DataFileError
from repens.results.files import read_json
from repens.results.synthetic import LABELS, METRIC_KEYS, Run, load_run

log = logging.getLogger("repens.report")

__all__ = [
    "LABELS",
    "TARGET_TITLES",
    "COLUMNS",
    "METRIC_KEYS",
    "Run",
    "load_run",
    "read_summary",
    "metrics_frame",
    "metrics_table",
    "write_metrics_table_from",
    "load_runs",
]

#: Figure titles of the targets and the paper figure each one reproduces.
TARGET_TITLES: dict[str, str] = {"gaussian": "Single Gaussian", "funnel": "Neal's funnel"}
PAPER_FIGURES: dict[str, str] = {"gaussian": "Figure 2", "funnel": "Figure F.1"}
_SHORT_NAMES: dict[str, str] = {"gaussian": "Gaussian", "funnel": "funnel"}

#: Columns of the metrics CSV, in order.
COLUMNS: list[str] = [
    "target",
    "method",
    "label",
    "seed",
    "scale",
    "n",
    "steps",
    *METRIC_KEYS,
    "cov_xy_err_kind",
    "source",
]


def load_runs(inputs: Iterable[Path | str], labels: Mapping[str, str] | None = None) -> list[Run]:
    """Load ``inputs``; ``labels`` (method key -> display name, from ``config.yaml``)
    overrides the labels stored in the files and :data:`LABELS`."""
    runs = [load_run(p) for p in inputs]
    if not runs:
        raise ValueError("no input files")
    if labels:
        runs = [
            replace(run, job=replace(run.job, label=labels[run.method])) if run.method in labels else run
            for run in runs
        ]
    return runs


# --------------------------------------------------------------------------- the metrics file


def read_summary(summary: Path | str | Mapping[str, Any]) -> dict[str, Any]:
    """The metrics file of :mod:`repens.summaries.synthetic` (a path, or the dict itself)."""
    if isinstance(summary, Mapping):
        return dict(summary)
    data = read_json(Path(summary), "sample-quality summary")
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise DataFileError(summary, "not a sample-quality summary (expected a JSON object with 'rows')")
    return data


def _row_label(row: Mapping[str, Any], labels: Mapping[str, str] | None) -> str:
    method = str(row["method"])
    if method == "iid":
        return f"exact iid (n={row['n']})"
    if labels and method in labels:
        return str(labels[method])
    return str(row.get("job_label") or LABELS.get(method, method))


def metrics_frame(summary: Path | str | Mapping[str, Any], labels: Mapping[str, str] | None = None):
    """The metrics table as a pandas DataFrame (columns :data:`COLUMNS`), from the metrics
    file of :mod:`repens.summaries.synthetic`; ``labels`` (method key -> display name)
    overrides the labels stored in the runs and :data:`LABELS`."""
    import pandas as pd

    rows = []
    for row in read_summary(summary)["rows"]:
        iid = row["method"] == "iid"
        source = f"mean of {row['repeats']} draws of n exact samples" if iid else row["source"]
        rows.append({**{key: row.get(key) for key in COLUMNS}, "label": _row_label(row, labels), "source": source})
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["seed"] = frame["seed"].astype("Int64")
    frame["steps"] = frame["steps"].astype("Int64")
    return frame


# --------------------------------------------------------------------------- table

#: The table's metric columns: plain header (HTML, PNG) and LaTeX header.
_METRIC_HEADERS: dict[str, tuple[str, str]] = {
    "mean_error": ("Mean", "Mean"),
    "cov_rel_err_xx": ("Σxx", r"$\Sigma_{xx}$"),
    "cov_xy_err": ("Σxy", r"$\Sigma_{xy}$"),
    "cov_rel_err_yy": ("Σyy", r"$\Sigma_{yy}$"),
    "max_cov_rel_err": ("Max", "Max"),
    "energy_distance": ("ED", "ED"),
}


def _fmt_moment(value: float) -> str:
    return f"{value:.4g}".replace("-", "$-$")


def _moments_text(target_name: str, moments: Mapping[str, Any]) -> str:
    mean, cov = moments["mean"], moments["cov"]
    mean_s = "(" + ", ".join(_fmt_moment(v) for v in mean) + ")"
    cov_s = "(" + ", ".join("(" + ", ".join(_fmt_moment(v) for v in row) + ")" for row in cov) + ")"
    extra = r" ($\Sigma_{xx} = e^{4.5}$)" if target_name == "funnel" else ""
    return f"{TARGET_TITLES.get(target_name, target_name)}: mean {mean_s}, covariance {cov_s}{extra}"


def metrics_table(frame, reference_samples: int, seed: int, moments: Mapping[str, Mapping[str, Any]], iid_repeats: int):
    """The metrics frame (:func:`metrics_frame`) as a :class:`repens.report.tables.Table`:
    rows grouped by target (a rule between targets), the exact-iid rows in italics.
    ``moments``: each target's exact ``mean`` and ``cov``; ``iid_repeats``: the number of
    exact-iid draws per noise-floor row (both from the metrics file).

    Each metric column writes all its numbers in one notation
    (:func:`repens.report.tables.column_notation`: 3 decimals, or scientific with 3
    significant digits when some value of the column is too small or large for that), and
    the best (lowest: every column is an error or a distance) displayed mean of each
    target among the methods is bold (``Column(better="min")``; the exact-iid rows, the
    noise floor, are never bold)."""
    import pandas as pd

    from repens.report.tables import Table, mean_se_formatter

    scales = sorted({str(s) for s in frame.loc[frame["method"] != "iid", "scale"]})
    targets = list(dict.fromkeys(frame["target"]))
    caption = _metrics_caption(frame, scales, reference_samples, seed, moments, iid_repeats)
    # one row per (target, method, n, steps): the mean +- s.e. over its seeds (Cells), the
    # exact-iid rows as they are; the CSV keeps one row per run
    groups = list(frame.groupby(["target", "method", "n", "steps"], sort=False, dropna=False))
    shown = pd.DataFrame([grp.iloc[0] for _, grp in groups]).reset_index(drop=True)
    base = shown["method"] == "iid"
    values, columns = _metric_values(groups, base)
    cells = pd.DataFrame(
        {
            "Seed": [_seeds_cell(grp) for _, grp in groups],
            "n": [int(v) for v in shown["n"]],
            "Steps": ["--" if b or pd.isna(v) else int(v) for b, v in zip(base, shown["steps"])],
            **{c.name: values[c.key] for c in columns},
        }
    )
    bold = _bold_cells(shown, base, values, columns, targets, cells.index)
    cells.index = pd.MultiIndex.from_arrays([[TARGET_TITLES.get(t, t) for t in shown["target"]], list(shown["label"])])
    bold.index = cells.index
    starts = shown["target"].ne(shown["target"].shift()).to_numpy()
    notes = sorted({c.notation for c in columns})
    return Table(
        cells=cells,
        csv=frame,
        caption=caption,
        label="tab:synthetic-metrics",
        title=f"Synthetic targets: sample quality of each method (scale: {', '.join(scales)})",
        note="mean ± s.e. over seeds; bold: lowest (best) per target among the methods; italic: exact iid "
        "samples of the same size (the noise floor); ED: energy distance"
        + ("; a column with a value below 0.001 is in scientific notation throughout" if "sci" in notes else ""),
        source="repens.report.synthetic.write_metrics_table",
        tex_headers={"n": "$n$", **{c.name: c.header for c in columns}},
        formats={c.name: mean_se_formatter(c) for c in columns},
        bold=bold,
        italic=list(base),
        rules=["midrule" if s and i else "" for i, s in enumerate(starts)],
        packages=("booktabs", "amsmath", "amssymb"),
        size="small",
        position="ht",
    )


def _metrics_caption(
    frame,
    scales: Sequence[str],
    reference_samples: int,
    seed: int,
    moments: Mapping[str, Mapping[str, Any]],
    iid_repeats: int,
) -> str:
    """The LaTeX caption of the metrics table: scales, what each column means, the exact moments."""
    targets = list(dict.fromkeys(frame["target"]))
    kinds = {t: frame.loc[frame["target"] == t, "cov_xy_err_kind"].iloc[0] for t in targets}
    xy_text = "; ".join(f"{kinds[t]} for the {_SHORT_NAMES.get(t, t)}" for t in targets)
    return (
        f"Sample quality of the particle methods on the synthetic targets (Appendix G.1/F), "
        f"run scale{'s' if len(scales) != 1 else ''}: {', '.join(scales)}. "
        "One row per method: the mean $\\pm$ standard error over its seeds (one seed: its value); the lowest "
        "(best) value of each target among the methods in bold; each column in one notation (scientific where "
        "a value needs it); "
        "the exact iid rows (in italics) average the same metrics over "
        f"{iid_repeats} independent sets of $n$ exact target samples (the noise floor for $n$ points). "
        r"Mean: $\lVert\hat\mu-\mu\rVert_2$. "
        r"$\Sigma_{xx}$, $\Sigma_{yy}$: relative error "
        r"$\lvert\hat\Sigma_{ii}-\Sigma_{ii}\rvert/\lvert\Sigma_{ii}\rvert$ "
        "of the particle covariance (population form, divided by $n$). "
        f"$\\Sigma_{{xy}}$: relative error where the exact value is nonzero, absolute where it is 0 ({xy_text}). "
        "Max: largest relative error over covariance entries with nonzero exact value. "
        r"ED: energy distance $2\mathbb{E}\lVert X-Y\rVert-\mathbb{E}\lVert X-X'\rVert-\mathbb{E}\lVert Y-Y'\rVert$ "
        f"(V-statistic) to {reference_samples} exact samples (seed {seed}). "
        "Exact moments: " + "; ".join(_moments_text(t, moments[t]) for t in targets) + "."
    )


def _seeds_cell(grp) -> Any:
    import pandas as pd

    seeds = [int(v) for v in grp["seed"] if not pd.isna(v)]
    return "--" if not seeds else seeds[0] if len(seeds) == 1 else f"{len(seeds)} seeds"


def _metric_values(groups, base) -> tuple[dict[str, list[Any]], list[Any]]:
    """Per metric, the shown value of each row (a method's mean ± s.e. over its seeds, an
    exact-iid row's value) and the column, in one notation for all its numbers."""
    from repens.report.tables import Cell, Column, column_notation, mean_se

    values = {
        key: [
            grp[key].astype(float).iloc[0] if b else mean_se(grp[key].astype(float))
            for b, (_, grp) in zip(base, groups)
        ]
        for key in _METRIC_HEADERS
    }
    columns = []
    for key, (plain, tex) in _METRIC_HEADERS.items():
        notation, digits = column_notation([v.mean if isinstance(v, Cell) else v for v in values[key]])
        columns.append(Column(key, tex, better="min", digits=digits, plain=plain, notation=notation))
    return values, columns


def _bold_cells(shown, base, values: Mapping[str, list[Any]], columns: Sequence[Any], targets: Sequence[str], index):
    """Bold: per target, the methods' best displayed mean of each column (the iid rows left out)."""
    import pandas as pd

    from repens.report.tables import Block, Row, best_rows

    bold_keys: dict[str, set[int]] = {c.key: set() for c in columns}
    for target in targets:
        rows = [
            Row(str(i), "", {c.key: values[c.key][i] for c in columns})
            for i in range(len(shown))
            if shown["target"].iloc[i] == target and not base.iloc[i]
        ]
        for c in columns:
            bold_keys[c.key] |= {int(k) for k in best_rows(Block(target, target, rows), c)}
    return pd.DataFrame(
        {
            "Seed": False,
            "n": False,
            "Steps": False,
            **{c.name: [i in bold_keys[c.key] for i in range(len(shown))] for c in columns},
        },
        index=index,
    )


# --------------------------------------------------------------------------- output


def write_metrics_table_from(
    summary: Path | str | Mapping[str, Any],
    out_csv: Path,
    out_tex: Path,
    labels: Mapping[str, str] | None = None,
    out_html: Path | None = None,
) -> None:
    """Write the synthetic metrics table as CSV, booktabs LaTeX and (optionally) HTML, from
    the metrics file of :mod:`repens.summaries.synthetic` (``results/synthetic/sample_quality.json``).

    One row per run (target, method, seed) in input order, grouped by target, followed
    by one ``exact iid (n=...)`` baseline row per target and particle count. Columns:
    see :data:`COLUMNS` (``cov_xy_err_kind`` says whether ``cov_xy_err`` is relative or
    absolute; ``source`` is the run's file name). The LaTeX caption states the scale(s)
    of the runs, the meaning of each column and the targets' exact moments. If the runs
    mix scales, all of them are listed and the ``scale`` column tells the rows apart.
    Written through :func:`repens.report.tables.write_table`.

    Args:
        summary: The metrics file (or its content).
        out_csv: CSV path (parent directories are created).
        out_tex: LaTeX path.
        labels: Method key -> display name (``config.yaml``'s labels); overrides the
            labels of the runs and :data:`LABELS`.
        out_html: HTML path (the Snakemake report shows it), or None.
    """
    from repens.report.tables import write_table

    data = read_summary(summary)
    frame = metrics_frame(data, labels=labels)
    table = metrics_table(
        frame, data["reference_samples"], data["reference_seed"], data["targets"], data["iid_repeats"]
    )
    write_table(table, out_tex=out_tex, out_html=out_html, out_csv=out_csv)
    log.info("wrote %s and %s (%d rows)", out_csv, out_tex, len(frame))
