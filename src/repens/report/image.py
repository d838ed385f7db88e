"""Table 1: the image-classification metrics of every method, mean +- standard error over
seeds, in the paper's layout, and every cell beside the paper's value.

Reads only the ``metrics.json`` files the training jobs wrote (restyling never retrains).
Methods the paper's table has are the main rows; any other method goes below a rule.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from repens.core import registry
from repens.core.errors import DataFileError
from repens.core.results import check_result
from repens.report.tables import (
    Block,
    Column,
    Table,
    build_blocks,
    mean_pm_text,
    mean_se,
    mean_se_table,
    plain_table,
    signed_text,
    with_labels,
    write_table,
)
from repens.results.files import RecordedJob, read_json

__all__ = [
    "ERROR_BASES",
    "TABLE1_COLUMNS",
    "EXTRA_COLUMNS",
    "DATASET_LABELS",
    "error_bases_note",
    "load_records",
    "runs_path",
    "read_reference",
    "row_label",
    "write_table1",
    "vs_paper_rows",
    "vs_paper_table",
]

#: the paper's column order; accuracy shown in percent as in the paper
TABLE1_COLUMNS = [
    Column("auroc_entropy", "AUROC(H)", "max", 3, plain="AUROC(H)"),
    Column("auroc_md", "AUROC(MD)", "max", 3, plain="AUROC(MD)"),
    Column("accuracy", "Accuracy", "max", 3, scale=100.0, plain="Accuracy (%)"),
    Column("entropy_ratio", r"$H_o/H_t$", "max", 3, plain="H_o/H_t"),
    Column("md_ratio", r"$MD_o/MD_t$", "max", 3, plain="MD_o/MD_t"),
    Column("ece", "ECE", "min", 3, plain="ECE"),
    Column("nll", "NLL", "min", 3, plain="NLL"),
]

#: four of the paper's columns as the authors' released code computes them
#: (repens.evaluation.predictive: ``*_code``), each with the paper's column it stands beside
CODE_COLUMNS = [
    Column("nll_code", "NLL (code)", "min", 3, plain="NLL (code: -log mean p)"),
    Column("ece_code", "ECE (code)", "min", 3, plain="ECE (code: 30 bins)"),
    Column("md_ratio_code", "MD_o/MD_t (code)", "max", 3, plain="MD_o/MD_t (code: mean sd)"),
    Column("auroc_md_code", "AUROC(MD) (code)", "max", 3, plain="AUROC(MD) (code: mean sd)"),
]
CODE_PAPER_KEYS = {"nll_code": "nll", "ece_code": "ece", "md_ratio_code": "md_ratio", "auroc_md_code": "auroc_md"}

#: metrics the field reports beside the paper's (CSV only; the LaTeX and PNG keep the
#: paper's columns); runs written before they existed show NaN
EXTRA_COLUMNS = [
    Column("aupr_entropy", "AUPR(H)", "max", 3, plain="AUPR(H)"),
    Column("aupr_md", "AUPR(MD)", "max", 3, plain="AUPR(MD)"),
    Column("fpr95_entropy", "FPR95(H)", "min", 3, plain="FPR95(H)"),
    Column("fpr95_md", "FPR95(MD)", "min", 3, plain="FPR95(MD)"),
    Column("brier", "Brier", "min", 3, plain="Brier"),
    Column("mi_test", "MI test", "min", 4, plain="MI test"),
    Column("mi_ood", "MI OOD", "max", 4, plain="MI OOD"),
    Column("mi_ratio", "MI_o/MI_t", "max", 3, plain="MI_o/MI_t"),
    Column("auroc_mi", "AUROC(MI)", "max", 3, plain="AUROC(MI)"),
    *CODE_COLUMNS,
]

#: each image data set's label, and the label of its OOD set (repens.core.registry, which config.yaml's `ood:` follows)
DATASET_LABELS = {d: registry.dataset_label(d) for d in registry.image_datasets()}
OOD_LABELS = {d: registry.ood_label(d) for d in registry.datasets_of("image") if registry.ood_of(d)}


def load_records(paths: Sequence[Path | str]) -> list[dict[str, Any]]:
    """One flat record per run (dataset, method, seed, scale, the metrics)."""
    records, seen = [], {}
    for path in paths:
        data = read_json(path, "image metrics", required=("job", "metrics"))
        check_result(path, data=data, seen=seen)  # finite numbers, each job once
        job, metrics = data["job"], data["metrics"]
        recorded = RecordedJob.read(job, path, "a metrics file written by an image job", ("dataset", "method", "seed"))
        if not isinstance(metrics, dict):
            raise DataFileError(path, "not a metrics file written by an image job ('metrics' is not an object)")
        records.append(
            {
                "dataset": recorded.dataset,
                "method": recorded.method,
                "seed": recorded.seed,
                "scale": recorded.scale,
                "particles": recorded.particles,
                "steps": recorded.steps,
                **{c.key: math.nan for c in EXTRA_COLUMNS},
                **metrics,
            }
        )
    scales = {r["scale"] for r in records}
    if len(scales) > 1:
        raise ValueError(f"metrics from different scales {sorted(map(str, scales))}; rerun at one scale")
    return records


#: seeds behind each value of the paper's Table 1 (38-42)
PAPER_SEEDS = 5
#: The paper's Table 1 "±" as the authors' ``utils/generate_results.py`` computes it:
#: ``np.std(values, 0) / len(values)``, the population sd (ddof 0) over n, not over sqrt(n).
#: A standard error, sd (ddof 1) / sqrt(n), is that times n / sqrt(n - 1) (2.5 at n = 5).
#: The two ratios' "±" is a delta-method formula that mixes those errors with an undivided
#: sample covariance and divides by 5 once more: it has no fixed relation to a standard error
#: and is not used as one (:func:`paper_se` gives nan).
PAPER_SE_PER_PRINTED = {
    key: PAPER_SEEDS / math.sqrt(PAPER_SEEDS - 1) for key in ("auroc_entropy", "auroc_md", "accuracy", "ece", "nll")
}


def paper_se(metric: str, printed: float) -> float:
    """The standard error behind the paper's printed Table 1 "±" of ``metric`` (a paper
    column's key; the ``*_code`` columns map to theirs: :data:`CODE_PAPER_KEYS`), nan where
    the printed value is no standard error (:data:`PAPER_SE_PER_PRINTED`)."""
    factor = PAPER_SE_PER_PRINTED.get(CODE_PAPER_KEYS.get(metric, metric))
    return float(printed) * factor if factor is not None else math.nan


def read_reference(path: Path | str) -> dict[tuple[str, str], dict[str, float]]:
    """The transcribed paper table: (dataset, method) -> {metric: value, metric_se: error}."""
    lines = [line for line in Path(path).read_text().splitlines() if line and not line.startswith("#")]
    out = {}
    for row in csv.DictReader(lines):
        key = (row.pop("dataset"), row.pop("method"))
        out[key] = {k: float(v) for k, v in row.items()}
    return out


def vs_paper_rows(
    records: Sequence[Mapping[str, Any]],
    reference: Mapping[tuple[str, str], Mapping[str, float]],
    datasets: Sequence[str],
    methods: Sequence[str],
    paper_rows: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every (dataset, method, metric) cell: ours (mean, s.e., seeds) beside the paper's,
    the difference, and the difference in units of the combined error. A method the
    paper's table has no row for is set beside the row ``paper_rows`` names for it
    (``paper_method``: the paper's row used; empty for none)."""
    rows = []
    for ds in datasets:
        for m in methods:
            runs = [r for r in records if r["dataset"] == ds and r["method"] == m]
            row = m if (ds, m) in reference else (paper_rows or {}).get(m, m)
            paper = reference.get((ds, row))
            if not runs and paper is None:
                continue
            for col in TABLE1_COLUMNS + CODE_COLUMNS:
                values = [r[col.key] * col.scale for r in runs if math.isfinite(r.get(col.key, math.nan))]
                if col in CODE_COLUMNS and not values:
                    continue  # runs written before the code's definitions were recorded
                ours = mean_se(values) if values else None
                key = CODE_PAPER_KEYS.get(col.key, col.key)
                p_mean = paper[key] if paper else math.nan
                p_printed = paper[f"{key}_se"] if paper else math.nan
                p_se = paper_se(key, p_printed)
                o_mean = ours.mean if ours else math.nan
                o_se = ours.se if ours else math.nan
                diff = o_mean - p_mean
                err = math.sqrt(
                    (o_se if math.isfinite(o_se) else 0.0) ** 2 + (p_se if math.isfinite(p_se) else 0.0) ** 2
                )
                rows.append(
                    {
                        "dataset": ds,
                        "method": m,
                        "paper_method": row if paper else "",
                        "metric": col.name,
                        "ours_mean": o_mean,
                        "ours_se": o_se,
                        "ours_seeds": ours.n if ours else 0,
                        "paper_mean": p_mean,
                        "paper_error": p_printed,
                        "paper_se": p_se,
                        "difference": diff,
                        "difference_in_errors": diff / err if err > 0 and math.isfinite(diff) else math.nan,
                        "error_basis": _error_basis(o_se, p_se, ours.n if ours else 0, key),
                    }
                )
    return rows


_RATIO = " (the paper's ± of a ratio is no standard error)"
#: each ``error_basis`` a cell can have, and what it divides the difference by, in words
ERROR_BASES = {
    "ours and the paper's": "both standard errors combined, √(ours² + the paper's²), where both exist",
    "the paper's only: one seed of ours, its spread not measured yet": (
        "the paper's alone where we have one seed (its spread not measured yet)"
    ),
    "ours only" + _RATIO: "ours alone for a ratio of several seeds" + _RATIO,
    "ours only": "ours alone where the paper prints a value without ±",
    "none" + _RATIO: "nothing for a ratio of one seed: no difference in errors is shown",
    "none": "nothing where neither has an error: no difference in errors is shown",
}


def _error_basis(o_se: float, p_se: float, n: int, key: str) -> str:
    """Whose errors a comparison's difference in standard errors uses, in words (a key of
    :data:`ERROR_BASES`)."""
    if math.isfinite(o_se) and math.isfinite(p_se):
        return "ours and the paper's"
    if n == 1 and math.isfinite(p_se):
        return "the paper's only: one seed of ours, its spread not measured yet"
    why = "" if key in PAPER_SE_PER_PRINTED else _RATIO
    return ("ours only" if math.isfinite(o_se) else "none") + why


def error_bases_note(bases: Collection[str]) -> str:
    """One sentence: what the differences in errors of cells with these ``error_basis``
    values are divided by, in :data:`ERROR_BASES`' order (a value it does not know: as written)."""
    said = [text for basis, text in ERROR_BASES.items() if basis in bases]
    said += sorted({str(b) for b in bases if b and b not in ERROR_BASES})
    if not said:
        return ""
    return "The difference is divided by " + "; by ".join(said) + ". A row the paper does not have shows none."


def _sorted_known(values: Iterable[Any]) -> list[Any]:
    """The distinct values other than None (a list's items taken one by one), numbers
    first in order, then the rest by text."""
    flat = [x for v in values for x in (v if isinstance(v, (list, tuple, set)) else [v])]
    known = {v for v in flat if v is not None}
    return sorted(
        known, key=lambda v: (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))
    )


def _values(values: Iterable[Any]) -> str:
    """``50`` for one value, ``10/50`` for several, ``?`` for none (a caption's sizes:
    numbers as text, never a Python list; unknown values (None) are left out)."""
    return (
        "/".join(f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v) for v in _sorted_known(values))
        or "?"
    )


def _seed_list(values: Iterable[Any]) -> str:
    """``38, 39, 40`` (a caption's seeds: never a Python list), ``?`` for none."""
    return ", ".join(str(v) for v in _sorted_known(values)) or "?"


#: The three columns each metric has in the wide comparison with the paper.
VS_PAPER_SUBCOLUMNS = ("paper", "ours", "Δ / s.e.")


def _code_header(column: Column) -> str:
    """``NLL: the released code's definition (-log mean p)`` for ``nll_code``."""
    paper = next(c for c in TABLE1_COLUMNS if c.key == CODE_PAPER_KEYS[column.key])
    detail = column.name.partition("code: ")[2].rstrip(")")
    return f"{paper.name}: the released code's definition" + (f" ({detail})" if detail else "")


def row_label(method: str, cells: Iterable[Mapping[str, Any]], labels: Mapping[str, str]) -> str:
    """A comparison row's name: the method's label, and the paper's row it is set beside
    where that is another method's (``paper_method``)."""
    label = labels.get(method, method)
    beside = next((c.get("paper_method") for c in cells if c.get("paper_method")), method)
    return label if beside == method else f"{label} (beside the paper's {labels.get(beside, beside)})"


def _vs_paper_frame(
    by_row: Mapping[tuple[str, str], Mapping[str, Mapping[str, Any]]],
    code: Sequence[Column],
    columns: list[tuple[str, str]],
    labels: Mapping[str, str],
) -> tuple[pd.DataFrame, list[str], set[int]]:
    """:func:`vs_paper_table`'s cells: the frame, the rules between datasets, the seed counts."""
    keys, cells, rules, counts = [], [], [], set()
    for (dataset, method), metrics in by_row.items():
        n = max(int(c["ours_seeds"]) for c in metrics.values())
        counts.add(n)
        line: list[Any] = [n]
        for c in TABLE1_COLUMNS:
            r = metrics.get(c.name)
            line += (
                [
                    mean_pm_text(r["paper_mean"], r["paper_se"]),
                    mean_pm_text(r["ours_mean"], r["ours_se"]),
                    signed_text(r["difference_in_errors"]),
                ]
                if r
                else ["–"] * 3
            )
        for c in code:
            r = metrics.get(c.name)
            line += (
                [mean_pm_text(r["ours_mean"], r["ours_se"]), signed_text(r["difference_in_errors"])] if r else ["–"] * 2
            )
        rules.append("midrule" if keys and keys[-1][0] != DATASET_LABELS.get(dataset, dataset) else "")
        keys.append((DATASET_LABELS.get(dataset, dataset), row_label(method, metrics.values(), labels)))
        cells.append(line)
    index = pd.MultiIndex.from_tuples(keys) if keys else pd.MultiIndex.from_arrays([[], []])
    frame = pd.DataFrame(cells, index=index, columns=pd.MultiIndex.from_tuples(columns), dtype=object)
    return frame, rules, counts


def _vs_paper_note(counts: set[int], *, scale: str, seeds: str, sizes: str) -> str:
    """:func:`vs_paper_table`'s note: the scale, the seeds, how Δ / s.e. is computed."""
    if 1 in counts:
        basis = (
            "Δ / s.e. = (ours − paper) / √(s.e. ours² + s.e. paper²); in rows with n = 1 (one seed of ours, "
            "its spread not measured yet) the paper's s.e. alone"
        )
    else:
        basis = "Δ / s.e. = (ours − paper) / √(s.e. ours² + s.e. paper²)"
    reproduction = (
        "Quick scale: the training is shortened (the sizes above), so a difference measures the shortened "
        "training as much as the method: a quick-scale comparison is not a reproduction of the paper."
        if scale == "quick"
        else f"Scale {scale}."
        if scale != "paper"
        else "Paper scale: the paper's settings (Appendix G.4, G.5)."
    )
    return (
        f"Scale: {scale} ({sizes}). Ours: mean ± s.e. over seeds {seeds}; n: seeds per row; with n = 1 the value "
        f"alone. Paper: D'Angelo & Fortuin 2021, Table 1, its mean ± s.e.: the printed ± times "
        f"{PAPER_SE_PER_PRINTED['accuracy']:g} (the authors' script prints the population sd over n, n = "
        f"{PAPER_SEEDS}); the ratios' printed ± is no standard error and is left out. {basis}. Accuracy in %. "
        f"{reproduction} Columns named \"the released code's definition\" are the metric as the authors' released "
        "code computes it, set beside the paper's value of that metric. Methods with no run of ours are left out "
        "(the paper's values: workflow/resources/table1_paper.csv; every cell, long form: table1_vs_paper.csv)."
    )


def vs_paper_table(
    rows: Sequence[Mapping[str, Any]],
    labels: Mapping[str, str],
    csv: pd.DataFrame,
    *,
    scale: str,
    seeds: str,
    sizes: str,
) -> Table:
    """The comparison with the paper in wide form, for a person: one row per (dataset,
    method) with a run of ours, and for each Table 1 metric three columns side by side,
    "paper" (its mean ± s.e.), "ours" (mean ± s.e. over our seeds; the value alone with
    n = 1) and "Δ / s.e." (``difference_in_errors``: ours - paper over the combined
    standard error; with one seed of ours the paper's s.e. alone). The metrics as the
    authors' released code computes them (:data:`CODE_COLUMNS`) follow as extra columns
    ("ours" and "Δ / s.e." against the paper's column of that metric), where recorded.

    ``rows``: :func:`vs_paper_rows`; ``csv``: the long frame the CSV keeps (one row per
    dataset, method and metric, machine-readable names)."""
    by_row: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        by_row.setdefault((r["dataset"], r["method"]), {})[r["metric"]] = r
    by_row = {k: v for k, v in by_row.items() if any(c["ours_seeds"] for c in v.values())}
    code = [c for c in CODE_COLUMNS if any(c.name in v for v in by_row.values())]
    columns = [("", "n")]
    columns += [(c.name, sub) for c in TABLE1_COLUMNS for sub in VS_PAPER_SUBCOLUMNS]
    columns += [(_code_header(c), sub) for c in code for sub in VS_PAPER_SUBCOLUMNS[1:]]
    frame, rules, counts = _vs_paper_frame(by_row, code, columns, labels)
    note = _vs_paper_note(counts, scale=scale, seeds=seeds, sizes=sizes)
    title = "Table 1 beside the paper's values" + (
        " (quick scale: not a reproduction)" if scale == "quick" else f" (scale: {scale})"
    )
    return Table(
        cells=frame,
        csv=csv,
        title=title,
        note=note,
        rules=rules,
        csv_na_rep="nan",
        source="repens.report.image.write_table1",
    )


def _table1_sizes(records: Sequence[Mapping[str, Any]], datasets: Sequence[str]) -> str:
    """:func:`write_table1`'s particles and steps per dataset run (``no runs`` for none)."""
    return (
        ", ".join(
            f"{DATASET_LABELS.get(d, d)}: {_values(r['particles'] for r in records if r['dataset'] == d)} particles, "
            f"{_values(r['steps'] for r in records if r['dataset'] == d)} steps"
            for d in datasets
            if any(r["dataset"] == d for r in records)
        )
        or "no runs"
    )


def _table1_caption_note(
    datasets: Sequence[str], *, scale: str, seeds: str, sizes: str, single: bool
) -> tuple[str, str]:
    """:func:`write_table1`'s LaTeX caption and its note for the HTML and PNG."""
    spread = (
        " Rows with n = 1 show no $\\pm$: one seed, so our seed-to-seed spread is not measured yet." if single else ""
    )
    ood = ", ".join(f"{DATASET_LABELS.get(d, d)} vs {OOD_LABELS.get(d, '?')}" for d in datasets)
    caption = (
        "BNN image classification (Table 1 of D'Angelo & Fortuin 2021, reproduced). Mean $\\pm$ standard "
        f"error over seeds {seeds}; n: seeds per row.{spread} One block of rows per dataset and protocol; "
        "bold: the best value of a block among its rows at that protocol whose runs converged. "
        f"OOD sets: {ood}. "
        "AUROC(H) and AUROC(MD): OOD detection by predictive entropy and by model disagreement; "
        "$H_o/H_t$, $MD_o/MD_t$: OOD over test means. ECE: 15 equal-width bins of the top-label "
        "confidence; (code): the column as the authors' released code computes it, the definition behind the "
        "paper's numbers. Accuracy in %. Rows below the rule are methods the paper does not report. "
        f"Scale: {scale} ({sizes})."
    )
    note = (
        f"mean ± s.e. over seeds; n: seeds per row; bold: best of its block among the block's converged rows "
        f"(none in a block of controls); (code): the authors' code's definition; seeds {seeds}; "
        f"{sizes}; ECE: 15 equal-width top-label bins"
        + ("; n = 1: one seed, no ± (our seed-to-seed spread not measured yet)" if single else "")
    )
    return caption, note


def _write_vs_paper(
    records: Sequence[Mapping[str, Any]],
    ref: Any,
    datasets: Sequence[str],
    methods: Sequence[str],
    labels: Mapping[str, str],
    scale_seeds_sizes: tuple[str, str, str],
    out_vs_paper: Path,
    out_vs_paper_html: Path | None,
    paper_rows: Mapping[str, str] | None = None,
) -> None:
    """:func:`write_table1`'s comparison with the paper's values (CSV, HTML)."""
    scale, seeds, sizes = scale_seeds_sizes
    vs_paper = vs_paper_rows(records, ref, datasets, methods, paper_rows)
    vs_columns = [
        "dataset",
        "method",
        "label",
        "paper_method",
        "metric",
        "ours_mean",
        "ours_se",
        "ours_seeds",
        "paper_mean",
        "paper_error",
        "paper_se",
        "difference",
        "difference_in_errors",
        "error_basis",
    ]
    long = pd.DataFrame(with_labels(vs_paper, labels), columns=vs_columns)
    write_table(
        vs_paper_table(vs_paper, labels, long, scale=scale, seeds=seeds, sizes=sizes),
        out_html=out_vs_paper_html,
        out_csv=out_vs_paper,
    )


def runs_path(table_csv: Path | str) -> Path:
    """Where a table's runs go, one row per run: ``<stem>_runs.csv`` beside ``table_csv``."""
    table_csv = Path(table_csv)
    return table_csv.with_name(f"{table_csv.stem}_runs.csv")


def _write_runs(records: Sequence[Mapping[str, Any]], columns: Sequence[Column], out_csv: Path) -> None:
    """One row per run (dataset, method, seed and its value of every column, on the table's
    scale): what a paired comparison of two rows of the table reads seed by seed
    (:mod:`repens.report.claims`)."""

    def scaled(value: Any, column: Column) -> float:
        return float(value) * column.scale if isinstance(value, (int, float)) else math.nan

    frame = pd.DataFrame(
        [
            {
                "dataset": r["dataset"],
                "method": r["method"],
                "seed": r["seed"],
                **{c.key: scaled(r.get(c.key), c) for c in columns},
            }
            for r in records
        ],
        columns=["dataset", "method", "seed", *(c.key for c in columns)],
    ).sort_values(["dataset", "method", "seed"], kind="stable")
    write_table(plain_table(frame, title="Table 1: each run's metrics"), out_csv=out_csv)


def protocol_blocks(
    records: Sequence[Mapping[str, Any]],
    datasets: Sequence[str],
    rows: Sequence[tuple[str, str, bool]],
    groups: Mapping[str, str],
    unconverged: Collection[tuple[str, str]],
) -> list[Block]:
    """Table 1's blocks: per dataset, one per protocol of ``groups`` (in its order; a
    method it does not name joins the last), each row ranked for bold unless its block is
    of controls or its runs did not converge."""
    order = list(dict.fromkeys(groups.values())) or [""]
    out = []
    for d in datasets:
        for group in order:
            members = [r for r in rows if groups.get(r[0], order[-1]) == group]
            label = DATASET_LABELS.get(d, d) + (f": {group}" if len(order) > 1 else "")
            for block in build_blocks(records, TABLE1_COLUMNS + EXTRA_COLUMNS, [(d, label)], members):
                ranked = [
                    replace(r, ranked=not group.startswith("controls") and (d, r.key) not in unconverged)
                    for r in block.rows
                ]
                if ranked:
                    out.append(replace(block, rows=ranked))
    return out


def _table1(
    blocks: Sequence[Block],
    records: Sequence[Mapping[str, Any]],
    datasets: Sequence[str],
    protocols: Sequence[str],
    scale: str,
    seeds: str,
    sizes: str,
) -> Table:
    """Table 1's table: the paper's columns and the code's beside them, the scale and the
    protocols of its blocks in the title."""
    counts = pd.Series([(r["dataset"], r["method"]) for r in records], dtype=object).value_counts()
    single = bool((counts == 1).any())
    caption, note = _table1_caption_note(datasets, scale=scale, seeds=seeds, sizes=sizes, single=single)
    return mean_se_table(
        blocks,
        TABLE1_COLUMNS + CODE_COLUMNS,
        csv_columns=TABLE1_COLUMNS + EXTRA_COLUMNS,
        title=f"Table 1: BNN image classification, {scale} scale"
        + (f"; blocks by protocol: {', '.join(protocols)}" if len(protocols) > 1 else ""),
        caption=caption,
        label="tab:table1",
        note=note,
        source="repens.report.image.write_table1",
        seeds_column="n",
        size="footnotesize",
        tabcolsep="4pt",
    )


def write_table1(
    inputs: Sequence[Path | str],
    reference: Path | str,
    labels: Mapping[str, str],
    datasets: Sequence[str],
    methods: Sequence[str],
    out_tex: Path,
    out_png: Path,
    out_csv: Path,
    out_vs_paper: Path,
    out_html: Path | None = None,
    out_vs_paper_html: Path | None = None,
    paper_rows: Mapping[str, str] | None = None,
    groups: Mapping[str, str] | None = None,
    unconverged: Collection[tuple[str, str]] = (),
    records: Sequence[dict[str, Any]] | None = None,
) -> None:
    """Write Table 1 (LaTeX, PNG, CSV, HTML), its runs (:func:`runs_path`) and the comparison
    with the paper's values (CSV, HTML), all through :func:`repens.report.tables.write_table`.
    ``paper_rows``: method -> the paper's row a method without its own is set beside.
    ``groups``: method -> its protocol's name, in the order of the blocks (one block per
    dataset and protocol; default: one per dataset); a name starting with ``controls``
    makes a block whose rows are never bold. ``unconverged``: (dataset, method) rows whose
    runs did not converge, never bold either. ``records``: :func:`load_records` of ``inputs``
    where the caller has read them already.

    The CSV has the paper's columns and :data:`EXTRA_COLUMNS` (AUPR, FPR95, Brier, mutual
    information); the LaTeX, HTML and PNG only the paper's."""
    records = load_records(inputs) if records is None else list(records)
    ref = read_reference(reference)
    paper_methods = {m for (_, m) in ref}
    rows = [(m, labels.get(m, m), m not in paper_methods) for m in methods]
    rows = [r for r in rows if not r[2]] + [r for r in rows if r[2]]  # extra rows below the rule
    blocks = protocol_blocks(records, datasets, rows, groups or {}, set(unconverged))
    scale = records[0]["scale"] if records else "?"
    seeds = _seed_list(r["seed"] for r in records)
    sizes = _table1_sizes(records, datasets)
    table = _table1(blocks, records, datasets, list(dict.fromkeys((groups or {}).values())), scale, seeds, sizes)
    write_table(table, out_tex=out_tex, out_html=out_html, out_csv=out_csv, out_png=out_png)
    _write_runs(records, TABLE1_COLUMNS + EXTRA_COLUMNS, runs_path(out_csv))
    _write_vs_paper(
        records,
        ref,
        datasets,
        [r[0] for r in rows],
        labels,
        (scale, seeds, sizes),
        out_vs_paper,
        out_vs_paper_html,
        paper_rows,
    )
