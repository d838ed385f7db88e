"""Table 2: UCI regression, test RMSE and NLL (original units), mean +- s.e. over splits.

Reads the ``metrics.json`` files of the UCI jobs (one per dataset and method, all
splits inside; see :mod:`repens.experiments.uci`), writes the table through
:func:`repens.report.tables.write_table` (the layout of Table 1: one block per
dataset, bold best per block; LaTeX, HTML, CSV) and a comparison with the values the
seed papers report (``workflow/resources/table2_seeds.csv``).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from repens.core import registry
from repens.core.errors import DataFileError
from repens.core.results import check_result
from repens.report.tables import (
    Column,
    Table,
    build_blocks,
    mean_pm_text,
    mean_se,
    mean_se_table,
    plain_table,
    se_decimals,
    signed_text,
    with_labels,
    write_table,
)
from repens.results.files import RecordedJob, read_json

__all__ = [
    "UCI_COLUMNS",
    "DATASET_LABELS",
    "load_records",
    "read_seeds",
    "compare_with_seeds",
    "paired_differences",
    "vs_seeds_table",
    "write_uci_tables",
]

UCI_COLUMNS = [
    Column("rmse", "RMSE", better="min", digits=3, plain="RMSE"),
    # Pearce et al.'s predictive N(m, s_model^2 + sigma^2), the seeds' own
    Column("nll", "NLL", better="min", digits=2, plain="NLL"),
    # the members' equal-weight mixture, for comparison (no bold: not the seeds' metric)
    Column("nll_mixture", "NLL (mixture)", better=None, digits=2, plain="NLL (mixture)"),
    # ||repulsion|| / ||drift|| averaged over training: does the repulsion act at all?
    Column("repulsion_ratio_mean", r"$\|r\|/\|d\|$", better=None, digits=3, plain="repulsion/drift"),
]

#: each UCI data set's label (repens.core.registry)
DATASET_LABELS = {d: registry.dataset_label(d) for d in registry.uci_datasets()}


def load_records(paths: Sequence[Path]) -> tuple[list[dict[str, Any]], str]:
    """Per-split records ``{dataset, method, seed, split, rmse, nll, ...}`` and the runs' scale."""
    records, scales, seen = [], set(), {}
    for path in paths:
        summary = read_json(path, "UCI metrics", required=("job", "splits"))
        check_result(path, data=summary, seen=seen)  # finite numbers, each job once
        recorded = RecordedJob.read(summary["job"], path, "a metrics file written by a UCI job", ("dataset", "method"))
        if not isinstance(summary["splits"], list) or not all(isinstance(s, dict) for s in summary["splits"]):
            raise DataFileError(path, "not a metrics file written by a UCI job ('splits' is not a list of objects)")
        scales.add("?" if recorded.scale is None else recorded.scale)
        for split in summary["splits"]:
            # figures a run of an older version did not write show as n/a
            records.append(
                {
                    "dataset": recorded.dataset,
                    "method": recorded.method,
                    "seed": recorded.seed,
                    **{c.key: math.nan for c in UCI_COLUMNS},
                    **split,
                }
            )
    return records, "+".join(sorted(scales))


def read_seeds(path: Path) -> list[dict[str, Any]]:
    """Rows of the transcribed reference file (``#`` lines are its citation header)."""
    lines = [ln for ln in Path(path).read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    rows = list(csv.DictReader(lines))
    for row in rows:
        # half a unit of the last printed digit: a value printed 0.07 +- 0.00 is anywhere in [0.065, 0.075]
        decimals = len(row["mean"].partition(".")[2])
        row["rounding"] = 0.5 * 10.0**-decimals
        row["mean"], row["se"] = float(row["mean"]), float(row["se"])
        row["ours"] = row.get("ours") or row["method"]
        row["like_for_like"] = int(row.get("like_for_like") or 0)
    return rows


def compare_with_seeds(records: Sequence[Mapping[str, Any]], seeds: Sequence[Mapping[str, Any]]) -> list[dict]:
    """One row per seed value and each of our methods set beside it (the seed row's ``ours``:
    one method key, or several separated by ``;``), with ours beside the seed's.

    ``metric`` ``nll_inferred`` (the poster's unnamed metric) is set beside our NLL.
    ``z = (ours - seed) / sqrt(se_ours^2 + se_seed^2)``; ``within_error_bars`` when the two
    mean +- s.e. intervals overlap (``|diff| <= se_ours + se_seed + rounding``, ``rounding``
    half a unit of the seed's last printed digit), empty where we have no value;
    ``like_for_like`` (from the seed file) says whether the seed's model and protocol are
    ours, so a difference in a 0 row is not evidence either way.
    """
    out = []
    for ref, ours in ((seed, name) for seed in seeds for name in (seed.get("ours") or seed["method"]).split(";")):
        metric = "nll" if ref["metric"] == "nll_inferred" else ref["metric"]
        values = [float(r[metric]) for r in records if r["dataset"] == ref["dataset"] and r["method"] == ours]
        cell = mean_se(values)
        diff = cell.mean - ref["mean"]
        se_ours = cell.se if math.isfinite(cell.se) else 0.0
        combined = math.hypot(se_ours, ref["se"])
        out.append(
            {
                "dataset": ref["dataset"],
                "method": ours,
                "metric": ref["metric"],
                "ours_mean": cell.mean,
                "ours_se": cell.se,
                "ours_splits": cell.n,
                "seed_source": ref["source"],
                "seed_method": ref["method"],
                "seed_mean": ref["mean"],
                "seed_se": ref["se"],
                "like_for_like": int(ref.get("like_for_like") or 0),
                "diff": diff,
                "z": diff / combined if combined > 0 else math.nan,
                "within_error_bars": (
                    int(abs(diff) <= se_ours + ref["se"] + ref.get("rounding", 0.0))
                    if cell.n > 0 and math.isfinite(diff)
                    else ""
                ),
                "seed_what": ref.get("what", ""),
            }
        )
    return out


def paired_differences(
    records: Sequence[Mapping[str, Any]], reference: str = "de", metrics: Sequence[str] = ("rmse", "nll")
) -> list[dict]:
    """Each method against ``reference`` on the same splits: per dataset and metric the
    mean over splits of ``ours_k - reference_k`` (split k of both, of the same seed: the
    same data, so the split-to-split spread of the dataset cancels), its standard error (sd / sqrt(n)),
    ``z = mean / se`` and ``differs`` when ``|mean| > 2 se``. Also the method's
    repulsion / drift ratio averaged over the splits, to read a difference against."""
    by_key: dict[tuple[str, str], dict[tuple[Any, int], Mapping[str, Any]]] = {}
    for r in records:
        by_key.setdefault((r["dataset"], r["method"]), {})[r.get("seed"), int(r["split"])] = r
    out = []
    for (dataset, method), splits in by_key.items():
        ref = by_key.get((dataset, reference))
        if method == reference or ref is None:
            continue
        common = sorted(set(splits) & set(ref), key=lambda k: (str(k[0]), k[1]))
        for metric in metrics:
            diffs = [float(splits[k][metric]) - float(ref[k][metric]) for k in common]
            cell = mean_se(diffs)
            se = cell.se if math.isfinite(cell.se) else math.nan
            out.append(
                {
                    "dataset": dataset,
                    "method": method,
                    "reference": reference,
                    "metric": metric,
                    "splits": cell.n,
                    "diff_mean": cell.mean,
                    "diff_se": se,
                    "z": cell.mean / se if se and math.isfinite(se) else math.nan,
                    "differs": int(abs(cell.mean) > 2 * se) if math.isfinite(se) else "",
                    "repulsion_ratio_mean": mean_se(
                        [float(splits[k].get("repulsion_ratio_mean", math.nan)) for k in common]
                    ).mean,
                }
            )
    return out


#: The seed papers as a person names them (prefix of the seed file's ``source``).
SEED_PAPERS = {"pearce2020": "Pearce et al. 2020", "wild2023": "Wild et al. 2023 (poster)"}
#: The seed papers' methods as a person names them.
SEED_METHODS = {
    "anchored": "anchored ensemble",
    "relu-gp": "ReLU GP",
    "de": "deep ensemble",
    "dle": "DLE",
    "drle": "DRLE",
}
#: The metrics of the comparison with the seeds, in column order: (key, header, decimals).
SEED_METRICS = (("rmse", "RMSE", 3), ("nll", "NLL", 2))
#: The columns each metric has in the wide comparison with the seeds.
VS_SEEDS_SUBCOLUMNS = ("seed paper", "ours", "Δ / s.e.", "within error bars")


#: Where in the seed paper a value is printed (the seed file's ``source``).
SEED_TABLES = {
    "pearce2020_t1": "Table 1",
    "pearce2020_t2": "App. C Table 2",
    "pearce2020_t3": "App. C Table 3",
    "wild2023_poster": "poster table",
}


def _seed_paper(source: str) -> str:
    return next((name for prefix, name in SEED_PAPERS.items() if source.startswith(prefix)), source)


def _vs_seeds_line(metrics: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """One row of :func:`vs_seeds_table`: our splits; per metric the seed's and our mean ±
    s.e., Δ / s.e. and whether they overlap; like for like and the seed's value."""
    line: list[Any] = [max(int(r["ours_splits"]) for r in metrics.values())]
    for metric, _, digits in SEED_METRICS:
        r = metrics.get(metric)
        if r is None:
            line += ["–"] * len(VS_SEEDS_SUBCOLUMNS)
            continue
        within = r["within_error_bars"]
        line += [
            mean_pm_text(r["seed_mean"], r["seed_se"], digits),
            mean_pm_text(r["ours_mean"], r["ours_se"], se_decimals(r["ours_se"], digits)),
            signed_text(r["z"]),
            {1: "yes", 0: "no"}.get(within, "–") if within != "" else "–",
        ]
    first = next(iter(metrics.values()))
    return line + ["yes" if first["like_for_like"] else "no", first.get("seed_what") or ""]


def _vs_seeds_grouped(
    rows: Sequence[Mapping[str, Any]], datasets: Sequence[str], methods: Sequence[str]
) -> tuple[dict[tuple[str, str, str, str], dict[str, Mapping[str, Any]]], list[tuple[str, str, str, str]]]:
    """:func:`vs_seeds_table`'s rows with a run of ours by (dataset, method, seed paper, seed
    method), then metric; and those keys in the order of ``datasets`` and ``methods``."""
    grouped: dict[tuple[str, str, str, str], dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        if not r["ours_splits"]:
            continue
        metric = "nll" if r["metric"] == "nll_inferred" else r["metric"]
        key = (r["dataset"], r["method"], _seed_paper(r["seed_source"]), r["seed_method"])
        grouped.setdefault(key, {})[metric] = r
    order_d = {d: i for i, d in enumerate(datasets)}
    order_m = {m: i for i, m in enumerate(methods)}
    keys = sorted(
        grouped,
        key=lambda k: (order_d.get(k[0], len(order_d)), k[0], order_m.get(k[1], len(order_m)), k[1], k[2], k[3]),
    )
    return grouped, keys


def _seed_label(paper: str, seed_method: str, metrics: Mapping[str, Mapping[str, Any]]) -> str:
    """:func:`vs_seeds_table`'s name of a seed paper's value: paper, method, tables."""
    tables = dict.fromkeys(
        SEED_TABLES.get(source, source) for source in sorted({r["seed_source"] for r in metrics.values()})
    )
    if any(r["metric"] == "nll_inferred" for r in metrics.values()):
        tables["metric unnamed, read as NLL"] = None
    return f"{paper}: {SEED_METHODS.get(seed_method, seed_method)} ({'; '.join(tables)})"


def _vs_seeds_note(scale: str, inferred: bool) -> str:
    """:func:`vs_seeds_table`'s note: what the columns are."""
    reproduction = (
        "Quick scale: fewer splits and shortened training, so a difference measures the shortcut as "
        "much as the method: a quick-scale comparison is not a reproduction. "
        if scale == "quick"
        else ""
    )
    return (
        f"Scale: {scale}. Rows: dataset, our method, and the seed paper's value set beside it. Ours: mean ± s.e. "
        "over splits (splits: how many); seed paper: mean ± s.e. as printed. Δ / s.e. = (ours − seed) / "
        "√(s.e. ours² + s.e. seed²); within error bars: the two mean ± s.e. intervals overlap (widened by half a "
        "unit of the seed's last printed digit). Like for like: the seed's model and protocol are ours (no: a "
        "difference is no evidence either way). "
        + ("The poster does not name its metric: read as a Gaussian NLL (docs/uci.md). " if inferred else "")
        + reproduction
        + "Rows without a run of ours are left out (every row, long form: table2_vs_seeds.csv)."
    )


def vs_seeds_table(
    rows: Sequence[Mapping[str, Any]],
    labels: Mapping[str, str],
    csv_frame: pd.DataFrame,
    *,
    datasets: Sequence[str],
    methods: Sequence[str],
    scale: str,
) -> Table:
    """The comparison with the seed papers in wide form, for a person: one row per
    (dataset, our method, seed paper's value set beside it), and for RMSE and NLL the
    seed's mean ± s.e., ours (mean ± s.e. over splits), Δ / s.e. (``z``: ours - seed over
    the combined s.e.) and whether the two mean ± s.e. intervals overlap, side by side;
    then whether the seed's model and protocol are ours and what its value is.

    ``rows``: :func:`compare_with_seeds`; ``csv_frame``: the long frame the CSV keeps.
    Rows without a run of ours are left out."""
    grouped, keys = _vs_seeds_grouped(rows, datasets, methods)
    columns = [("", "splits")] + [(header, sub) for _, header, _ in SEED_METRICS for sub in VS_SEEDS_SUBCOLUMNS]
    columns += [("", "like for like"), ("", "the seed's value")]
    index, cells, rules, inferred = [], [], [], False
    for key in keys:
        dataset, method, paper, seed_method = key
        metrics = grouped[key]
        cells.append(_vs_seeds_line(metrics))
        inferred = inferred or any(r["metric"] == "nll_inferred" for r in metrics.values())
        label = DATASET_LABELS.get(dataset, dataset)
        rules.append("midrule" if index and index[-1][0] != label else "")
        index.append((label, labels.get(method, method), _seed_label(paper, seed_method, metrics)))
    idx = pd.MultiIndex.from_tuples(index) if index else pd.MultiIndex.from_arrays([[], [], []])
    frame = pd.DataFrame(cells, index=idx, columns=pd.MultiIndex.from_tuples(columns), dtype=object)
    note = _vs_seeds_note(scale, inferred)
    return Table(
        cells=frame,
        csv=csv_frame,
        title=f"Table 2 beside the seed papers' values (scale: {scale})",
        note=note,
        rules=rules,
        csv_na_rep="nan",
        source="repens.report.uci.write_uci_tables",
    )


def _uci_table(blocks: Any, scale: str) -> Table:
    """:func:`write_uci_tables`' Table 2 itself (mean ± s.e. over splits)."""
    caption = (
        "UCI regression, original units: test RMSE of the ensemble mean; NLL under Pearce et al.'s "
        "predictive $\\mathcal{N}(m, s^2_{\\mathrm{model}} + \\sigma^2)$ and under the members' equal-weight "
        "mixture; $\\|r\\|/\\|d\\|$: the repulsion's norm over the drift's, averaged over training "
        f"(0: no repulsion). Mean $\\pm$ s.e. over splits (scale: {scale})."
    )
    return mean_se_table(
        blocks,
        UCI_COLUMNS,
        title=f"Table 2: UCI regression (scale: {scale})",
        caption=caption,
        label="tab:uci",
        source="repens.report.uci.write_uci_tables",
        size="small",
        note="mean ± s.e. over splits; bold: best per dataset; results/uci/<dataset>/<method>/",
    )


def _write_vs_de(
    records: Sequence[Mapping[str, Any]],
    datasets: Sequence[str],
    methods: Sequence[str],
    labels: Mapping[str, str],
    out_vs_de: Path,
    out_vs_de_html: Path | None,
) -> None:
    """:func:`write_uci_tables`' each method against the deep ensemble on the same splits."""
    order = {(d, m): (i, j) for i, d in enumerate(datasets) for j, m in enumerate(methods)}
    vs_de = sorted(
        (r for r in paired_differences(records) if (r["dataset"], r["method"]) in order),
        key=lambda r: order[r["dataset"], r["method"]],
    )
    vs_de = with_labels(vs_de, labels)
    write_table(
        plain_table(
            pd.DataFrame(vs_de),
            title="Table 2: each method minus the deep ensemble, split by split",
            note="diff: mean over splits of (method - DE) on the same split, ± its s.e.; "
            "differs: |diff| > 2 s.e.; repulsion_ratio_mean: ||r||/||d|| over training",
        ),
        out_html=out_vs_de_html,
        out_csv=out_vs_de,
    )


def write_uci_tables(
    inputs: Sequence[Path],
    datasets: Sequence[str],
    methods: Sequence[str],
    labels: Mapping[str, str],
    seeds_file: Path,
    out_tex: Path,
    out_csv: Path,
    out_html: Path | None,
    out_seeds: Path,
    out_seeds_html: Path | None = None,
    out_vs_de: Path | None = None,
    out_vs_de_html: Path | None = None,
    out_md: Path | None = None,
    out_seeds_md: Path | None = None,
) -> None:
    """Table 2 (tex, csv, html, md), the comparison with the seeds (csv, html, md) and each
    method against the deep ensemble on the same splits (:func:`paired_differences`; csv,
    html), all through :func:`repens.report.tables.write_table`."""
    records, scale = load_records(inputs)
    blocks = build_blocks(
        records,
        UCI_COLUMNS,
        blocks=[(d, DATASET_LABELS.get(d, d)) for d in datasets],
        rows=[(m, labels.get(m, m), False) for m in methods],
    )
    table = _uci_table(blocks, scale)
    write_table(table, out_tex=out_tex, out_html=out_html, out_csv=out_csv, out_md=out_md)
    compared = compare_with_seeds(records, read_seeds(seeds_file))
    write_table(
        vs_seeds_table(
            compared,
            labels,
            pd.DataFrame(with_labels(compared, labels)),
            datasets=datasets,
            methods=methods,
            scale=scale,
        ),
        out_html=out_seeds_html,
        out_csv=out_seeds,
        out_md=out_seeds_md,
    )
    if out_vs_de is not None:
        _write_vs_de(records, datasets, methods, labels, out_vs_de, out_vs_de_html)
