"""The paper-scale results that last: the built tables and figures kept in the reference
tree, the check that a rebuild reproduces them, and the results page (``docs/results.md``).

The reference tree (``reference/``, laid out as ``results/``) holds the small files of
every paper-scale run: per job its result file (``metrics.json``, ``particles.npz``,
``predictions.npz``, an HMC run's ``diagnostics.json``), ``benchmark.tsv`` (wall and CPU
time), ``campaign.json`` (the machine and what ran beside it) and, under
``reference/logs/``, its log. Every result file carries its provenance (commit, Python,
torch and snakemake versions, device and CPU, job key: :mod:`repens.jobs.provenance`).

* :func:`publish` copies what a rebuild from the tree built (``snakemake -c2 rebuild
  --config scale=paper from_reference=true``: tables with their provenance sidecars,
  figures) into ``reference/results/``;
* :func:`check` compares a rebuild's tables with those copies, cell by cell;
* :func:`write_page` writes the results page from ``reference/`` alone.

Reads files only: nothing here trains or recomputes a metric.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repens.core.variants import dataset_methods
from repens.jobs.provenance import sidecar_path

__all__ = [
    "PUBLISHED",
    "PUBLISHED_FOLDERS",
    "RTOL",
    "RUN_FILES",
    "Section",
    "SECTIONS",
    "tree_runs",
    "published_runs",
    "publish",
    "check",
    "inventory",
    "write_page",
    "run_benchmark",
    "run_gpu",
    "run_provenance",
]

#: what a rebuild writes that the tree keeps, relative to results/ (tables with their
#: ``.provenance.json`` sidecars, figures as PNG)
PUBLISHED = (
    "synthetic/metrics.csv",
    "figures/fig2_gaussian.png",
    "figures/figF1_funnel.png",
    "toy/distance_to_hmc.csv",
    "figures/fig1_regression.png",
    "figures/fig3_classification.png",
    "table1.csv",
    "table1_runs.csv",
    "table1_vs_paper.csv",
    "table1.png",
    "table2_uci.csv",
    "table2_uci.md",
    "table2_vs_seeds.csv",
    "table2_vs_seeds.md",
    "table2_vs_de.csv",
    "claims.csv",
    "claims_diagnostics.csv",
    "claims_comparisons.csv",
    "claims.md",
    "convergence.csv",
    "figures/table1_training.png",
    "figures/table1_repulsion.png",
    "table1_repulsion.csv",
)
#: what a shown table holds, where its columns do not say it, after its "Table:" line
TABLE_NOTES = {
    "table1_repulsion.csv": (
        "the repulsion diagnostic of the repulsive rules, ||repulsion|| / ||drift|| of the update before Adam's "
        "scaling (in the space the rule works in) and after it (in weight space, logs that carry it), read from the "
        "training logs: per method and ratio, the runs and seeds, the mean over "
        "runs of each run's mean over its logged steps, the smallest and largest logged value, the mean at the last "
        "logged step, and the logged steps per run ([image.md](image.md))"
    ),
}
#: folders of figures a rebuild writes that the tree keeps whole (their PNGs), relative
#: to results/: the evidence figure of each claim (:mod:`repens.report.claim_figures`)
PUBLISHED_FOLDERS = ("figures/claims",)

#: Relative tolerance of :func:`check` for numbers. A rebuild reads the same stored
#: results with the same code, so on one machine every cell comes out the same; on
#: another CPU only the order of floating-point sums can differ (its SIMD width), which
#: moves a float32 result by a few units in the last place (eps32 = 1.2e-7). 1e-5 is
#: 84 eps32: wide for reordering, far below the 3-4 digits a table prints.
RTOL = 1e-5


@dataclass(frozen=True)
class Section:
    """One experiment's part of the results page."""

    experiment: str
    title: str
    paper: str  # what the paper shows for it, and where
    tables: tuple[str, ...]  # relative to reference/results/; shown (as their kept .md where there is one)
    figures: tuple[str, ...]
    linked: tuple[str, ...] = ()  # tables kept and linked, not shown


SECTIONS = (
    Section(
        "image",
        "Table 1: BNN image classification (FashionMNIST, OOD MNIST)",
        "D'Angelo & Fortuin (2021), Table 1 and Appendix G.4 (50 particles from the prior, 50,000 Adam "
        "steps, batch 256, seeds 38-42); the paper prints a mean and a ± over the five seeds. Its numbers "
        "came from the authors' released code (PyTorch's default initialisation, the function-space rules on "
        "softmax outputs, the code's NLL and ECE): the rows marked \"authors' code\" run that protocol, the "
        "others G.4's text, the rest are controls ([why](#why-table-1-differs-from-the-paper)).",
        ("table1_vs_paper.csv", "table1_repulsion.csv"),
        ("table1.png", "figures/table1_training.png", "figures/table1_repulsion.png"),
    ),
    Section(
        "uci",
        "Table 2: UCI regression (Pearce et al.'s protocol)",
        "Not in D'Angelo & Fortuin (2021), whose only table is Table 1. Our runs at Pearce et al.'s "
        "(2020) protocol (their Table 4 and App. E.7: anchored ensembles of 5 members), beside Pearce et "
        "al.'s Table 1 (NLL), App. C Tables 2-3 (RMSE and the variants; the ReLU GP) and Wild et al.'s "
        "(2023) poster table (DLE, DRLE): RMSE and NLL over the standard splits.",
        ("table2_uci.csv", "table2_vs_seeds.csv"),
        (),
        ("table2_vs_de.csv",),
    ),
    Section(
        "synthetic",
        "Figure 2 and Figure F.1: sampling a 2-D Gaussian and Neal's funnel",
        "D'Angelo & Fortuin (2021), Sec. 4, Figure 2 and Appendix F, Figure F.1 (G.1 settings); the paper "
        "shows the particles only. The table (energy distance to the target, beyond the paper) is mean ± "
        "s.e. over five seeds.",
        ("synthetic/metrics.csv",),
        ("figures/fig2_gaussian.png", "figures/figF1_funnel.png"),
    ),
    Section(
        "toy",
        "Figures 1 and 3: BNN toys against HMC",
        "D'Angelo & Fortuin (2021), Figure 1 (1-D regression, G.2) and Figure 3 (2-D classification, G.3), "
        "each method's predictive beside HMC's. The distance table (beyond the paper) is mean ± s.e. over "
        "five seeds, each with its own converged HMC reference.",
        ("toy/distance_to_hmc.csv",),
        ("figures/fig1_regression.png", "figures/fig3_classification.png"),
    ),
)

#: why a configured (dataset or experiment) is not in the tree when nothing has run it
NOT_RUN_WHY = {
    ("image", "cifar10"): "CIFAR-10 and SVHN are not on this project's machines, and a paper-scale ResNet32 "
    "step takes about a minute on one CPU core: it needs a GPU and the data",
}


# --------------------------------------------------------------------------- publish, check


#: per-job result files, the ones a rebuild restores from the tree
RUN_FILES = ("metrics.json", "particles.npz", "predictions.npz", "diagnostics.json")
#: the list of runs the kept tables were built from, in reference/results/
RUNS = "runs.json"


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_runs(reference: Path | str) -> list[str]:
    """Every per-job result file in the tree, relative to it (``image/.../metrics.json``)."""
    reference = Path(reference)
    return sorted(
        p.relative_to(reference).as_posix()
        for experiment in ("synthetic", "toy", "uci", "image")
        for p in (reference / experiment).glob("*/*/seed*/*")
        if p.name in RUN_FILES
    )


def published_runs(reference: Path | str) -> dict[str, str] | None:
    """The runs the kept tables were built from (path -> SHA-256), or None before any publish."""
    path = Path(reference) / "results" / RUNS
    return json.loads(path.read_text()) if path.is_file() else None


def changed_runs(reference: Path | str, only: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """The runs listed in ``reference/results/runs.json`` (``only``: those of them, paths
    relative to the tree) that the tree lacks or holds with another SHA-256: (path, why)."""
    reference = Path(reference)
    listed = published_runs(reference) or {}
    problems = []
    for rel in listed if only is None else [r for r in only if r in listed]:
        if not (reference / rel).is_file():
            problems.append((rel, f"listed in {reference / 'results' / RUNS} but not in the tree"))
        elif _sha256(reference / rel) != listed[rel]:
            problems.append(
                (
                    rel,
                    f"changed since the kept tables were built from it (its SHA-256 is not the one in "
                    f"{reference / 'results' / RUNS})",
                )
            )
    return problems


def _keep_equal_tables(staged: Path, dest: Path) -> None:
    """Put back into ``staged`` each table kept in ``dest`` that the rebuild wrote again
    from the same inputs and that is equal within :data:`RTOL` (another CPU's summation
    order), with its sidecar: a publish changes only what new runs or code changed."""
    for table in sorted(staged.rglob("*.csv")):
        old = dest / table.relative_to(staged)
        if (
            old.is_file()
            and _same_inputs(sidecar_path(old), sidecar_path(table))
            and not _table_differences(old, table)
        ):
            shutil.copy2(old, table)
            if sidecar_path(old).is_file():
                shutil.copy2(sidecar_path(old), sidecar_path(table))


def publish(results: Path | str, reference: Path | str, allow_drop: bool = False) -> list[Path]:
    """Replace ``reference/results/`` by the files of :data:`PUBLISHED` that ``results``
    holds (tables with their provenance sidecars) and ``runs.json``: the tree's runs the
    rebuild read (those in ``results`` equal to the tree's copy), with their SHA-256.
    Returns what was copied. A kept table that the rebuild wrote again from the same inputs
    and that :func:`check` finds equal stays byte for byte as it was, with its sidecar. A
    kept table or figure that ``results`` lacks (a rebuild that failed part way) stops it
    before anything changes, unless ``allow_drop``."""
    results, reference = Path(results), Path(reference)
    dest = reference / "results"
    staged = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(staged, ignore_errors=True)
    runs = {}
    for rel in tree_runs(reference):
        built = results / rel
        if built.is_file() and (digest := _sha256(built)) == _sha256(reference / rel):
            runs[rel] = digest
    copied = []
    figures = [
        p.relative_to(results).as_posix()
        for folder in PUBLISHED_FOLDERS
        for p in sorted((results / folder).glob("*.png"))
    ]
    # the scorecards at a variant's settings (config claims_variants: results/claims_<variant>.*)
    variant_claims = [
        p.name
        for pattern in ("claims_*.md", "claims_*.csv")
        for p in sorted(results.glob(pattern))
        if p.name not in PUBLISHED
    ]
    for rel in [*PUBLISHED, *variant_claims, *figures]:
        for name in (rel, rel + ".provenance.json"):
            if (results / name).is_file():
                (staged / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(results / name, staged / name)
                copied.append(dest / name)
    if not copied:
        shutil.rmtree(staged, ignore_errors=True)
        raise FileNotFoundError(
            f"{results}: none of the tables or figures a rebuild writes ({', '.join(PUBLISHED[:3])}, ...)"
        )
    dropped = sorted(
        p.relative_to(dest).as_posix()
        for p in (dest.rglob("*") if dest.is_dir() else [])
        if p.is_file() and p.name != RUNS and not (staged / p.relative_to(dest)).is_file()
    )
    if dropped and not allow_drop:
        shutil.rmtree(staged, ignore_errors=True)
        raise FileExistsError(
            f"{results} lacks {len(dropped)} file(s) kept in {dest} ({', '.join(dropped[:3])}"
            f"{', ...' if len(dropped) > 3 else ''}): did the rebuild fail? Rebuild into an empty results/ "
            "and publish again, or pass --allow-drop to drop them"
        )
    _keep_equal_tables(staged, dest)
    (staged / RUNS).write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    copied.append(dest / RUNS)
    shutil.rmtree(dest, ignore_errors=True)
    staged.rename(dest)
    return copied


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _cells_equal(a: str, b: str, rtol: float) -> bool:
    if a == b:
        return True
    x, y = _number(a), _number(b)
    if x is None or y is None:
        return False
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return abs(x - y) <= rtol * max(abs(x), abs(y))


def _read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as fh:
        return [row for row in csv.reader(fh)]


def _table_differences(kept: Path, built: Path, rtol: float = RTOL) -> list[str]:
    """Where two CSV tables differ: the same header and rows, each cell the same text or
    the same number within ``rtol``; one line per difference (empty: they agree)."""
    a, b = _read_csv(kept), _read_csv(built)
    if len(a) != len(b) or (a and a[0] != b[0]):
        return [
            f"{len(a)} rows kept, {len(b)} built" + ("" if not a or not b or a[0] == b[0] else "; the headers differ")
        ]
    header, problems = a[0] if a else [], []
    for i, (ra, rb) in enumerate(zip(a[1:], b[1:]), 2):
        for j, (x, y) in enumerate(zip(ra, rb)):
            if not _cells_equal(x, y, rtol):
                problems.append(f"line {i}, {header[j] if j < len(header) else j}: kept {x!r}, built {y!r}")
        if len(ra) != len(rb):
            problems.append(f"line {i} has {len(ra)} cells kept, {len(rb)} built")
    return problems


def _same_inputs(kept: Path, built: Path) -> bool:
    """Whether two provenance sidecars name the same inputs: equal but for their own
    ``provenance`` block (the machine and commit that built the table); both absent counts."""
    if not kept.is_file() or not built.is_file():
        return not kept.is_file() and not built.is_file()
    try:
        a, b = json.loads(kept.read_text()), json.loads(built.read_text())
    except ValueError:
        return False
    if not isinstance(a, dict) or not isinstance(b, dict):
        return a == b
    return {k: v for k, v in a.items() if k != "provenance"} == {k: v for k, v in b.items() if k != "provenance"}


def check(results: Path | str, reference: Path | str, rtol: float = RTOL) -> list[str]:
    """Every table CSV kept in ``reference/results/`` against the one in ``results``:
    the same header and rows, each cell the same text or the same number within ``rtol``.
    Returns one line per difference (empty: they agree)."""
    results, kept = Path(results), Path(reference) / "results"
    tables = sorted(p for p in kept.rglob("*.csv"))
    if not tables:
        return [f"{kept}: no tables kept (python -m repens reference publish)"]
    problems = [f"{rel}: {why}" for rel, why in changed_runs(reference)]
    for table in tables:
        rel = table.relative_to(kept)
        built = results / rel
        if not built.is_file():
            problems.append(f"{rel}: kept in {kept} but not built in {results}")
            continue
        problems += [f"{rel}: {why}" for why in _table_differences(table, built, rtol)]
    return problems


# --------------------------------------------------------------------------- inventory


def _job_files(reference: Path, experiment: str, runs: Sequence[str]) -> list[Path]:
    """The experiment's runs among ``runs`` (an HMC run counts by its predictions)."""
    return [
        reference / rel for rel in runs if rel.startswith(experiment + "/") and not rel.endswith("diagnostics.json")
    ]


def run_provenance(path: Path) -> dict[str, Any]:
    """The provenance stamped in a result file ({} if none); a corrupt file: one line naming it."""
    from repens.core.errors import DataFileError
    from repens.results.files import read_json, read_npz

    if path.suffix == ".json":
        return read_json(path, "result").get("provenance") or {}
    data = read_npz(path, "result")
    try:
        return json.loads(str(data["provenance"])) if "provenance" in data else {}
    except ValueError as err:
        raise DataFileError(path, f"its 'provenance' is not JSON ({err})") from None


def _machine(path: Path) -> dict[str, str]:
    """The CPU model from the job's ``campaign.json``, for runs whose provenance predates it."""
    side = path.parent / "campaign.json"
    if not side.is_file():
        return {}
    cpu = json.loads(side.read_text()).get("cpu")
    return {"cpu": cpu} if cpu and not run_provenance(path).get("cpu") else {}


def run_gpu(prov: Mapping[str, Any]) -> str | None:
    """The GPU a run trained on (its provenance's ``device``), None for a CPU run."""
    device = str(prov.get("device") or "")
    return None if not device or device.lower().startswith(("cpu", "unknown")) else device


def run_benchmark(path: Path) -> dict[str, float]:
    """The wall (``s``) and CPU (``cpu_time``) seconds of a run's Snakemake ``benchmark.tsv``
    (beside its result file ``path``; {} without one)."""
    bench = path.parent / "benchmark.tsv"
    if not bench.is_file():
        return {}
    rows = list(csv.DictReader(bench.read_text().splitlines(), delimiter="\t"))
    out = {}
    for key in ("s", "cpu_time"):
        value = _number(rows[0].get(key, "")) if rows else None
        if value is not None:
            out[key] = value
    return out


def inventory(
    reference: Path | str,
    config: Mapping[str, Any],
    seeds: Mapping[str, Sequence[int]],
    runs: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Per (experiment, dataset): the runs (default: the published ones, else every run in
    the tree) against the grid the config runs at paper scale (``seeds``: each
    experiment's seeds there, :func:`repens.pipeline.config.paper_seeds`), with their seeds,
    software, machines and time."""
    reference = Path(reference)
    if runs is None:
        published = published_runs(reference)
        runs = sorted(published) if published is not None else tree_runs(reference)
    rows = []
    for experiment in ("image", "uci", "synthetic", "toy"):
        exp = config["experiments"][experiment]
        datasets = exp.get("report_datasets") or list(exp["datasets"])
        held = _job_files(reference, experiment, runs)
        for dataset in datasets:
            methods = dataset_methods(config, experiment, dataset) + (["hmc"] if experiment == "toy" else [])
            grid_seeds = list(seeds[experiment])
            mine = [p for p in held if p.parts[-4] == dataset]
            provs = [{**run_provenance(p), **_machine(p)} for p in mine]
            bench = [run_benchmark(p) for p in mine]
            on_gpu = [run_gpu(prov) is not None for prov in provs]
            rows.append(
                {
                    "experiment": experiment,
                    "dataset": dataset,
                    "runs": len(mine),
                    "grid": len(methods) * len(grid_seeds),
                    "methods": sorted({p.parts[-3] for p in mine}),
                    "seeds": sorted({int(p.parts[-2][4:]) for p in mine}),
                    "torch": sorted({str(p.get("torch")) for p in provs}),
                    "cpu": sorted({run_gpu(p) or str(p.get("cpu") or p.get("device")) for p in provs}),
                    "commits": sorted({str(p.get("git_commit", "?"))[:7] for p in provs}),
                    "cpu_hours": sum(b.get("cpu_time", 0.0) for b, g in zip(bench, on_gpu) if not g) / 3600,
                    "gpu_hours": sum(b.get("s", 0.0) for b, g in zip(bench, on_gpu) if g) / 3600,
                    "why": NOT_RUN_WHY.get((experiment, dataset), ""),
                }
            )
    return rows


# --------------------------------------------------------------------------- the page


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _fmt(value: Any, digits: int = 3) -> str:
    from repens.report.tables import number

    x = _number(str(value))
    if x is None:
        return _cell(value)
    return number(int(x) if x.is_integer() and abs(x) < 1e4 and "." not in str(value) else x, "text", digits)


def _mean_pm(mean: float, se: float) -> str:
    """``mean ± se`` with the s.e. to two significant digits and the mean to the same
    decimals (three significant digits without an s.e.)."""
    if not math.isfinite(mean):
        return "-"
    if not math.isfinite(se) or se <= 0:
        return f"{mean:.3g}"
    from repens.report.tables import se_decimals

    decimals = se_decimals(se, digits=0)
    return f"{mean:.{decimals}f} ± {se:.{decimals}f}"


def _markdown(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _vs_paper(path: Path) -> list[str]:
    """Table 1 beside the paper: a row per method, a cell per metric: ours (n), the
    paper's mean ± s.e., and the difference in standard errors (whose: ``error_basis``)."""
    rows = list(csv.DictReader(path.read_text().splitlines()))
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    unrun = [d for d in datasets if all(r["ours_seeds"] == "0" for r in rows if r["dataset"] == d)]
    rows = [r for r in rows if r["dataset"] not in unrun]
    from repens.report.image import PAPER_SE_PER_PRINTED, PAPER_SEEDS, error_bases_note, row_label

    labels = {r["method"]: r["label"] for r in rows}
    out, basis = [], set()
    for key in dict.fromkeys((r["dataset"], r["method"]) for r in rows):
        mine = {r["metric"]: r for r in rows if (r["dataset"], r["method"]) == key}
        first = next(iter(mine.values()))
        n = first["ours_seeds"]
        cells = []
        for m in metrics:
            r = mine.get(m)
            if r is None or n == "0":
                cells.append("not run")
                continue
            basis.add(r.get("error_basis", ""))
            ours = _fmt(r["ours_mean"]) + (
                "" if _number(r["ours_se"]) is None or math.isnan(float(r["ours_se"])) else f" ± {_fmt(r['ours_se'])}"
            )
            paper_se = _number(r.get("paper_se", ""))
            paper = (
                "no value"
                if math.isnan(float(r["paper_mean"]))
                else _fmt(r["paper_mean"])
                + ("" if paper_se is None or math.isnan(paper_se) else f" ± {_fmt(r['paper_se'])}")
            )
            z = r["difference_in_errors"]
            cells.append(f"{ours} vs {paper}" + ("" if math.isnan(float(z)) else f" ({float(z):+.1f})"))
        out.append([key[0], row_label(key[1], mine.values(), labels), n, *cells])
    lines = _markdown(["dataset", "method", "n", *metrics], out)
    lines += [
        "",
        "Each cell: ours vs the paper's mean ± s.e. (the difference in standard errors). The paper's s.e. is its "
        f"printed ± times {PAPER_SE_PER_PRINTED['accuracy']:g}: the authors' script (utils/generate_results.py) "
        f"prints the population sd over n = {PAPER_SEEDS}, not over √n; its ratios' ± is no standard error and is "
        "left out. " + error_bases_note(basis),
    ]
    if unrun:
        lines += ["", f"Not run at all: {', '.join(unrun)} (see above)."]
    return lines


def _mean_se(path: Path) -> list[str]:
    """A mean ± s.e. table (``<key>_mean``, ``_se``, ``_n`` columns) or a plain one."""
    rows = list(csv.DictReader(path.read_text().splitlines()))
    if not rows:
        return ["(empty)"]
    cols = list(rows[0])
    keys = [c[:-5] for c in cols if c.endswith("_mean") and f"{c[:-5]}_se" in cols]
    ident = [
        c
        for c in cols
        if not any(c.startswith(k + "_") for k in keys) and c not in ("extra", "scale") and not c.endswith("_best")
    ]
    if not keys:
        return _markdown(cols, [[_fmt(r[c]) for c in cols] for r in rows])
    table = []
    # rows none of whose own means is measured (a dataset not run yet beside the paper's values)
    mine = [k for k in keys if not k.startswith(("seed", "paper"))] or keys
    rows = [r for r in rows if any((v := _number(r[f"{k}_mean"])) is not None and math.isfinite(v) for k in mine)]
    for r in rows:
        cells = []
        for k in keys:
            se = _number(r[f"{k}_se"])
            n = r.get(f"{k}_n", "")
            mean = _number(r[f"{k}_mean"])
            cells.append(
                _mean_pm(math.nan if mean is None else mean, math.nan if se is None else se)
                + (f" (n={n})" if n else "")
            )
        table.append([_fmt(r[c]) for c in ident] + cells)
    return _markdown(ident + keys, table)


def _per_seed(path: Path, metrics: Sequence[str]) -> list[str]:
    """A table with a row per seed (``seed`` column), shown as mean ± s.e. over seeds
    (s.e. = sd / sqrt(n), ddof 1) per ``target``/``dataset`` and method."""
    import pandas as pd

    frame = pd.read_csv(path)
    keys = [c for c in ("target", "dataset", "label") if c in frame.columns]
    cols = [m for m in metrics if m in frame.columns]
    rows = []
    for key, group in frame.groupby(keys, sort=False, dropna=False):
        cells = []
        for m in cols:
            x = group[m].dropna()
            se = x.std(ddof=1) / len(x) ** 0.5 if len(x) > 1 else math.nan
            cells.append("-" if x.empty else _mean_pm(float(x.mean()), float(se)))
        n = group["seed"].notna().sum()
        rows.append([*(key if isinstance(key, tuple) else (key,)), str(n) if n else "exact", *cells])
    return _markdown([*keys, "seeds", *cols], rows)


#: the columns the page shows of the per-seed tables (every column is in the CSV)
PER_SEED_COLUMNS = {
    "metrics.csv": ("energy_distance", "max_cov_rel_err", "mean_error"),
}


def _table(path: Path) -> list[str]:
    """A kept table as the page shows it: its kept Markdown form (the one the HTML and
    LaTeX share) where the rebuild wrote one, else rendered from the CSV."""
    if (md := path.with_suffix(".md")).is_file():
        return md.read_text().rstrip("\n").splitlines()
    if path.name == "table1_vs_paper.csv":
        return _vs_paper(path)
    with open(path) as fh:
        header = next(csv.reader(fh), [])
    if "seed" in header and path.name in PER_SEED_COLUMNS:
        return _per_seed(path, PER_SEED_COLUMNS[path.name])
    return _mean_se(path)


def _variant_claims_lines(md: Path, link: Path) -> list[str]:
    """A scorecard at a variant's settings (``claims_<variant>.md``), as a section of its own:
    its heading one level down, its verdict rule left to the main scorecard's section."""
    lines = md.read_text().splitlines()
    rule = next((i for i, line in enumerate(lines) if line.startswith("## Verdict rule")), len(lines))
    body = [("##" + line[1:]) if line.startswith("#") else line for line in lines[:rule]]
    return [*body, f"The verdict rule: the claim scorecard below; the file: [`{md.name}`]({link / md.name})."]


def _claims_section(kept: Path, link: Path) -> list[str]:
    """The scorecard (``claims.md``) and, where kept, each claim's evidence figure."""
    md = kept / "claims.md"
    if not md.is_file():
        return ["The scorecard has not been built from the tree yet."]
    lines = md.read_text().splitlines()
    lines = [("##" + line[1:]) if line.startswith("#") else line for line in lines[1:]]
    figures = [p for folder in PUBLISHED_FOLDERS for p in sorted((kept / folder).glob("*.png"))]
    if figures:
        lines += [
            "",
            "### Evidence of each claim",
            "",
            "Each comparison's difference a - b with the interval the verdict rule reads, coloured by its "
            "verdict (grey band: an agreement's margin; hollow: a run that did not converge), from "
            f"[`claims_comparisons.csv`]({link / 'claims_comparisons.csv'}).",
            "",
        ]
        for png in figures:
            rel = png.relative_to(kept).as_posix()
            lines += [f"![{png.stem}]({link / rel})", ""]
    return lines


def _row_groups(path: Path) -> dict[tuple[str, str, str], list[dict[str, str]]]:
    """``convergence.csv``'s runs grouped by table row (experiment, dataset, method)."""
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            groups.setdefault((r["experiment"], r["dataset"], r["method"]), []).append(r)
    return groups


_ROW_WORD = {"True": "converged", "False": "**not converged**", "": "unknown"}


def _convergence_lines(kept: Path, link: Path) -> list[str]:
    """Which Table 1 / Table 2 rows converged (kept ``convergence.csv``): Table 1 row by
    row, Table 2 per data set."""
    path = kept / "convergence.csv"
    if not path.is_file():
        return ["No convergence table kept yet."]
    groups = _row_groups(path)
    if groups and "row_converged" not in next(iter(groups.values()))[0]:
        return [f"[`convergence.csv`]({link / 'convergence.csv'}) records run verdicts only (rebuild to judge rows)."]
    lines = [
        "A comparison of the scorecard resting on a row that did not converge is inconclusive, whatever its "
        "figures. A Table 1 row is judged on its mean over seeds (the held-out NLL and accuracy drifts over the "
        "last fifth of training, pooled; a late rise of the training NLL in any run fails it), a Table 2 row "
        "(one run of 20 splits) on its run ([claims.md](claims.md), Convergence). "
        f"From [`convergence.csv`]({link / 'convergence.csv'}), which gives every run's own verdict and reason.",
        "",
    ]
    image = [(k, rs) for k, rs in groups.items() if k[0] == "image"]
    if image:
        rows = []
        for (_, dataset, method), runs in image:
            verdict = runs[0].get("row_converged", "")
            own = [f"seed {r['seed']}" for r in runs if r["converged"] == "False"]
            why = runs[0].get("row_reason", "").split("; ")[0] if verdict != "True" else ""
            rows.append([dataset, method, len(runs), _ROW_WORD.get(verdict, verdict), ", ".join(own) or "-", why])
        lines += _markdown(["dataset", "method", "runs", "row", "runs failing their own test", "why"], rows)
        lines.append("")
    uci: dict[str, list[tuple[str, str]]] = {}
    for (experiment, dataset, method), runs in groups.items():
        if experiment == "uci":
            uci.setdefault(dataset, []).append((method, runs[0].get("row_converged", "")))
    if uci:
        rows = [
            [d, f"{sum(v == 'True' for _, v in ms)} / {len(ms)}", ", ".join(m for m, v in ms if v != "True") or "-"]
            for d, ms in uci.items()
        ]
        lines += _markdown(["Table 2 data set", "rows converged", "rows not converged (or unknown)"], rows)
    return lines


def _not_run_lines(inv: Sequence[Mapping[str, Any]]) -> list[str]:
    """The runs not held yet, and why, per experiment (nothing when every run is held)."""
    missing = [r for r in inv if r["runs"] < r["grid"]]
    if not missing:
        return []
    lines = ["", "Not run yet, and why:", ""]
    campaign = (
        "the campaign (`workflow/scripts/campaign.py` on the CPU; Table 1 also on GPU leases, "
        "[gpu.md](gpu.md)) has not reached them yet"
    )
    for experiment in dict.fromkeys(r["experiment"] for r in missing):
        rows = [r for r in missing if r["experiment"] == experiment]
        untouched = [r for r in rows if not r["runs"] and not r["why"]]
        if len(untouched) > 1:
            lines.append(
                f"- {experiment}: {', '.join(r['dataset'] for r in untouched)}: all "
                f"{sum(r['grid'] for r in untouched)} runs: {campaign}."
            )
            rows = [r for r in rows if r not in untouched]
        for r in rows:
            lines.append(
                f"- {experiment} / {r['dataset']}: {r['grid'] - r['runs']} of {r['grid']} runs: {r['why'] or campaign}."
            )
    return lines


def _table_link(kept: Path, link: Path, rel: str, also: bool = False) -> str:
    """The line naming a kept table's CSV and, where it is kept, its provenance sidecar."""
    text = ("Also kept: " if also else "Table: ") + f"[`{rel}`]({link / rel})"
    sidecar = rel + ".provenance.json"
    if (kept / sidecar).is_file():
        text += f" (provenance: [`{sidecar}`]({link / sidecar}))"
    if rel in TABLE_NOTES:
        text += f": {TABLE_NOTES[rel]}"
    return text


def _section_lines(section: Any, kept: Path, link: Path) -> list[str]:
    """One section of the page: its kept tables (with their provenance) and figures."""
    lines = ["", f"## {section.title}", "", f"Source: {section.paper}", ""]
    have = False
    for rel in section.tables:
        if (kept / rel).is_file():
            have = True
            lines += _table(kept / rel) + ["", _table_link(kept, link, rel), ""]
    for rel in section.linked:
        if (kept / rel).is_file():
            lines += [_table_link(kept, link, rel, also=True), ""]
    for rel in section.figures:
        if (kept / rel).is_file():
            have = True
            lines += [f"![{Path(rel).stem}]({link / rel})", ""]
    if not have:
        lines += ["Not run at the paper's settings yet (see above)."]
    return lines


def _inventory_table(inv: Sequence[Mapping[str, Any]]) -> list[str]:
    """The page's table of what the tables rest on (:func:`inventory`'s rows)."""
    return _markdown(
        [
            "experiment",
            "dataset",
            "runs held / at the paper's settings",
            "seeds",
            "CPU-hours",
            "GPU-hours",
            "torch",
            "machine",
            "commit",
        ],
        [
            [
                r["experiment"],
                r["dataset"],
                f"{r['runs']} / {r['grid']}",
                ", ".join(map(str, r["seeds"])) or "-",
                f"{r['cpu_hours']:.1f}",
                f"{r['gpu_hours']:.2f}",
                ", ".join(r["torch"]) or "-",
                ", ".join(r["cpu"]) or "-",
                ", ".join(r["commits"]) or "-",
            ]
            for r in inv
        ],
    )


def write_page(
    reference: Path | str, config: Mapping[str, Any], seeds: Mapping[str, Sequence[int]], out: Path | str
) -> str:
    """The results page, from the reference tree alone (links relative to ``out``; ``seeds``:
    as :func:`inventory`)."""
    import os

    from repens.core.atomic import write_text_atomic
    from repens.report.answers import answers_lines

    reference, out = Path(reference), Path(out)
    kept = reference / "results"
    link = Path(os.path.relpath(kept, out.parent))
    inv = inventory(reference, config, seeds)
    lines = [
        "# Paper-scale results",
        "",
        "What held of *Repulsive Deep Ensembles are Bayesian* (D'Angelo & Fortuin 2021) and two related "
        "papers, at which protocol, and why, from the committed paper-scale runs "
        "([how](#how-this-page-is-made)); the tables and figures follow.",
        "",
        *answers_lines(kept, link, config),
        "## How this page is made",
        "",
        "Generated from the reference tree (`reference/`) by `python -m repens reference page`; do not edit. "
        "Every number below comes from a run at the paper's settings whose files are committed under "
        "`reference/`; `snakemake -c2 rebuild --config scale=paper from_reference=true` rebuilds every table "
        'and figure from them without training (README, "Paper-scale results"). A claim counts as reproduced '
        "only at the paper's settings, over its seeds, with error bars: a cell with one seed is compared "
        "with the paper's mean ± s.e. but has no spread of its own yet. Each run was made by the commit "
        "listed for it below; a rerun with today's code agrees with it within the run's own step-to-step "
        "noise, not bit for bit (code changes since change float32 rounding; "
        "[running.md](running.md#reproducing-a-committed-run) has the check).",
        "",
        "### What the tables rest on",
        "",
        f"The runs listed in [`runs.json`]({link / RUNS}) (the tree's runs when the tables were last built); "
        "runs the campaign has committed since then join at the next `python -m repens reference publish`. "
        "CPU-hours: the CPU time of the runs trained on a CPU; GPU-hours: the wall time of those trained on "
        "a GPU; both over every call of a job, interrupted ones included. Machine: the CPU, or the GPU a run "
        "trained on.",
        "",
    ]
    lines += _inventory_table(inv)
    lines += _not_run_lines(inv)
    for section in SECTIONS:
        lines += _section_lines(section, kept, link)
    lines += ["", "## Convergence of the Table 1 and Table 2 rows", ""] + _convergence_lines(kept, link)
    for md in sorted(kept.glob("claims_*.md")):
        lines += ["", *_variant_claims_lines(md, link)]
    lines += ["", "## Claim scorecard", ""] + _claims_section(kept, link)
    text = "\n".join(lines).rstrip() + "\n"
    write_text_atomic(out, text)
    return text
