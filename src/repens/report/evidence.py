"""The evidence of the claim scorecard (:mod:`repens.report.claims`): our estimates, read
from the result tables, and the papers' own printed values."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from repens.core import registry
from repens.core.errors import DataFileError
from repens.report.image import CODE_PAPER_KEYS, PAPER_SEEDS, paper_se, runs_path
from repens.report.verdicts import (
    EXACT,
    PUBLISHED,
    Estimate,
    _finite,
    _num,
)
from repens.results.files import read_json, shown_path

# --------------------------------------------------------------------------- reading tables


def table_scale(path: Path | str) -> str | None:
    """The scale a table was made at, from its provenance sidecar (``<csv>.provenance.json``:
    the table job's ``scale``, else its inputs' job scales); None when it does not say."""
    side = Path(str(path) + ".provenance.json")
    try:
        data = json.loads(side.read_text())
    except (OSError, ValueError):
        return None
    scale = (data.get("provenance") or {}).get("scale")
    if not scale or scale == "unknown":
        scales = sorted({str((r.get("job") or {}).get("scale")) for r in data.get("inputs", []) if r.get("job")})
        scale = ",".join(scales) or None
    return scale


def _read_csv(path: Path | None) -> tuple[list[dict[str, str]] | None, str | None]:
    """(rows, None), or (None, why) when the file is absent or unreadable."""
    if path is None:
        return None, "not given"
    path = Path(path)
    if not path.is_file():
        return None, f"{path}: missing"
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        return list(csv.DictReader(lines)), None
    except (OSError, csv.Error, UnicodeDecodeError) as err:
        return None, f"{path}: unreadable ({err})"


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _rounding(*texts: Any) -> float:
    """Half a unit of the last printed digit of the finest of ``texts`` ("0.07" -> 0.005)."""
    places = [len(str(t).strip().split(".", 1)[1]) if "." in str(t) else 0 for t in texts if str(t).strip()]
    return 0.5 * 10.0 ** -max(places) if places else 0.0


def _int(value: Any) -> int:
    x = _float(value)
    return int(x) if _finite(x) else 0


def _mean_se(values: Sequence[float]) -> tuple[float, float, int]:
    xs = [v for v in values if _finite(v)]
    if not xs:
        return math.nan, math.nan, 0
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return mean, math.nan, len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    return mean, math.sqrt(var / len(xs)), len(xs)


def _seeds(by_seed: Mapping[Any, float]) -> tuple[tuple[str, float], ...]:
    """A quantity's values by seed, for a paired comparison (:func:`repens.report.verdicts.compare`):
    the toys' and synthetic targets' runs of one seed share its data, target draws and HMC
    reference; empty where a seed is not named (a table of means)."""
    if any(seed in (None, "") for seed in by_seed):
        return ()
    return tuple(sorted((str(seed), value) for seed, value in by_seed.items() if _finite(value)))


#: The display names of a few metrics in the figures.
METRIC_LABELS = {
    "accuracy": "accuracy (%)",
    "auroc_entropy": "AUROC(H)",
    "auroc_md": "AUROC(MD)",
    "nll": "NLL",
    "entropy_ratio": "H_o/H_t",
    "md_ratio": "MD_o/MD_t",
    "rmse": "RMSE",
    "energy_distance": "energy distance",
    "gap_sd_epistemic_ratio": "gap sd_f / HMC's",
    "w2_gap": "W2 gap",
    "entropy_far": "H far",
    "entropy_near": "H near",
    "hmc_entropy_far": "HMC's H far",
    "kl_far": "KL far",
    "repulsion_ratio_mean": "||repulsion||/||drift||",
}
DATASET_LABELS = {d: registry.dataset_label(d, short=True) for d in registry.datasets_of("image") if registry.ood_of(d)}


#: the method groups the claims compare (config.yaml keys), as ``repens.pipeline.config.method_groups``
#: derives them from the repository's config.yaml (a test keeps the two equal); the scorecard
#: takes the groups of the config it is built for (``Evidence(groups=...)``, the CLI's
#: ``--groups``), so a method added to the config joins its group
DEFAULT_GROUPS: dict[str, tuple] = {
    "weight_space": ("de", "svgd", "kde-wgd", "sge-wgd", "ssge-wgd"),
    "function_space": ("fsvgd", "kde-fwgd", "sge-fwgd", "ssge-fwgd"),
    "wgd": ("kde-wgd", "sge-wgd", "ssge-wgd"),
    "fwgd": ("kde-fwgd", "sge-fwgd", "ssge-fwgd"),
    "counterparts": (("kde-wgd", "kde-fwgd"), ("sge-wgd", "sge-fwgd"), ("ssge-wgd", "ssge-fwgd")),
}


def _tuples(value: Any) -> Any:
    """JSON lists as tuples, nested (a group of pairs stays a tuple of pairs)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


class Evidence:
    """Our estimates, read from the result tables (any may be absent: its quantities are
    then "not run", naming the file).

    Args:
        files: ``{"synthetic", "toy", "table1", "uci"}`` -> path (or None); ``"convergence"``:
            ``results/convergence.csv`` (:mod:`repens.summaries.convergence`), the verdict of each run
            behind a Table 1 / Table 2 row (absent key: no check applies).
        labels: method key -> display name (config.yaml's labels).
        variant: read each Table 1 method ``m`` as the variant's ``m-<variant>`` (its row
            and its runs' convergence; :mod:`repens.core.variants`): the claims at the
            variant's settings. A method the variant does not run is then "not run".
        code_metrics: read each Table 1 metric the released code defines otherwise as the
            code defines it, where the table has that column (:data:`CODE_PAPER_KEYS`:
            ``nll`` as ``nll_code``, ``ece`` as ``ece_code``, ``md_ratio`` as ``md_ratio_code``):
            the paper's columns at the protocol that produced them.
    """

    def __init__(
        self,
        files: Mapping[str, Path | str | None],
        labels: Mapping[str, str] | None = None,
        groups: Mapping[str, Sequence[Any]] | None = None,
        variant: str | None = None,
        code_metrics: bool = False,
    ):
        self.labels = dict(labels or {})
        self.variant = variant
        self.code_metrics = code_metrics
        self.group_spec = {**DEFAULT_GROUPS, **{k: _tuples(v) for k, v in (groups or {}).items()}}
        unknown = sorted(set(self.group_spec) - set(DEFAULT_GROUPS))
        if unknown:
            raise ValueError(f"method groups: unknown group(s) {unknown}; known: {sorted(DEFAULT_GROUPS)}")
        self.groups = SimpleNamespace(**self.group_spec)
        self.paths = {key: (Path(p) if p else None) for key, p in files.items()}
        self._rows: dict[str, tuple[list[dict[str, str]] | None, str | None]] = {}
        self._floor_cache: dict[tuple[str, int, str], float] = {}

    def label(self, method: str) -> str:
        return self.labels.get(method, method)

    def rows(self, key: str) -> tuple[list[dict[str, str]] | None, str | None]:
        if key not in self._rows:
            self._rows[key] = _read_csv(self.paths.get(key))
        return self._rows[key]

    def _scale(self, key: str, rows: Sequence[Mapping[str, str]]) -> str | None:
        scales = sorted({r["scale"] for r in rows if r.get("scale")})
        if scales:
            return "+".join(scales)
        path = self.paths.get(key)
        return table_scale(path) if path else None

    # ---- synthetic targets: one row per (target, method, seed); "iid" rows: the noise floor
    def synthetic(self, target: str, method: str, metric: str) -> Estimate:
        label = f"{self.label(method)} {METRIC_LABELS.get(metric, metric)}"
        rows, why = self.rows("synthetic")
        if rows is None:
            return Estimate.absent(label, why or "")
        mine = [r for r in rows if r.get("target") == target and r.get("method") == method]
        if not mine:
            return Estimate.absent(label, f"{self.paths['synthetic']}: no {target}/{method} row")
        by_seed = {r.get("seed"): _float(r.get(metric)) for r in mine}
        mean, se, n = _mean_se(list(by_seed.values()))
        return Estimate(
            label, mean, se, n, self._scale("synthetic", mine), str(self.paths["synthetic"]), per_seed=_seeds(by_seed)
        )

    def iid_floor(self, target: str, metric: str, like: str, with_error: bool = True) -> Estimate:
        """The metric of as many exact i.i.d. target samples as ``like``'s particles (the
        table's ``iid`` row: mean of its draws), with the s.e. of that mean
        (:func:`noise_floor_se`, from the metrics file beside the table; read only if ``with_error``)."""
        label = f"exact iid {METRIC_LABELS.get(metric, metric)}"
        rows, why = self.rows("synthetic")
        if rows is None:
            return Estimate.absent(label, why or "")
        sizes = {_int(r.get("n")) for r in rows if r.get("target") == target and r.get("method") == like}
        floor = [
            r for r in rows if r.get("target") == target and r.get("method") == "iid" and _int(r.get("n")) in sizes
        ]
        if len(sizes) != 1 or len(floor) != 1:
            return Estimate.absent(label, f"{self.paths['synthetic']}: no iid row for the {target}/{like} particles")
        n = sizes.pop()
        label = f"exact iid (n={n}) {METRIC_LABELS.get(metric, metric)}"
        if not with_error:  # the other side is not run: the noise floor's error is not computed
            value = _float(floor[0].get(metric))
            return Estimate(
                f"{label} {_num(value)} (s.e. not computed)", value, 0.0, 0, EXACT, str(self.paths["synthetic"])
            )
        return Estimate(
            label,
            _float(floor[0].get(metric)),
            self._floor_se(target, metric, n),
            0,
            PUBLISHED,
            str(self.paths["synthetic"]),
        )

    def _floor_se(self, target: str, metric: str, n: int) -> float:
        key = (target, n, metric)
        if key not in self._floor_cache:
            summary = synthetic_summary_path(self.paths["synthetic"])
            where = (summary,) if summary.is_file() else ()  # else the default path
            self._floor_cache[key] = noise_floor_se(target, n, metric, *where)
        return self._floor_cache[key]

    # ---- toys vs HMC: a row per method (and seed), or <metric>_mean/_se/_n columns
    def toy(self, method: str, metric: str) -> Estimate:
        label = f"{self.label(method)} {METRIC_LABELS.get(metric, metric)}"
        if metric.startswith("hmc_"):
            label = f"HMC {METRIC_LABELS.get(metric[4:], metric[4:])} (beside {self.label(method)})"
        rows, why = self.rows("toy")
        if rows is None:
            return Estimate.absent(label, why or "")
        mine = [r for r in rows if r.get("method") == method]
        if not mine:
            return Estimate.absent(label, f"{self.paths['toy']}: no {method} row")
        # never scored against an unconverged HMC reference (repens.training.hmc.convergence; the
        # column is absent from tables written before it existed)
        if any(str(r.get("hmc_converged", "")).strip() in ("0", "False") for r in mine):
            return Estimate.absent(
                label, f"{self.paths['toy']}: HMC reference not converged (R-hat / ESS fail the paper-scale thresholds)"
            )
        scale, source = self._scale("toy", mine), str(self.paths["toy"])
        if f"{metric}_mean" in mine[0]:  # already aggregated over seeds
            r = mine[0]
            n = _int(r.get(f"{metric}_n") or r.get("n_seeds") or r.get("seeds"))
            return Estimate(label, _float(r[f"{metric}_mean"]), _float(r.get(f"{metric}_se")), n, scale, source)
        if metric not in mine[0]:
            return Estimate.absent(label, f"{self.paths['toy']}: no column {metric}")
        by_seed = {r.get("seed"): _float(r.get(metric)) for r in mine}
        mean, se, n = _mean_se(list(by_seed.values()))
        return Estimate(label, mean, se, n, scale, source, per_seed=_seeds(by_seed))

    # ---- Table 1: one row per (block = dataset, method), <metric>_mean/_se/_n
    def table1(self, dataset: str, method: str, metric: str) -> Estimate:
        method = f"{method}-{self.variant}" if self.variant else method
        if self.code_metrics:
            code = {paper: code for code, paper in CODE_PAPER_KEYS.items()}.get(metric)
            rows, _ = self.rows("table1")
            if code and rows and f"{code}_mean" in rows[0]:
                label = f"{self.label(method)} {METRIC_LABELS.get(metric, metric)} (code's)"
                return self._block_cell("table1", dataset, method, code, label)
        label = f"{self.label(method)} {METRIC_LABELS.get(metric, metric)}"
        return self._block_cell("table1", dataset, method, metric, label)

    # ---- Table 2 (UCI): one row per (block = dataset, method), mean ± s.e. over splits
    def uci(self, dataset: str, method: str, metric: str) -> Estimate:
        label = f"{self.label(method)} {METRIC_LABELS.get(metric, metric)} ({dataset})"
        return self._block_cell("uci", dataset, method, metric, label)

    def _block_cell(self, key: str, dataset: str, method: str, metric: str, label: str) -> Estimate:
        rows, why = self.rows(key)
        if rows is None:
            return Estimate.absent(label, why or "")
        mine = [r for r in rows if r.get("block") == dataset and r.get("method") == method]
        if not mine:
            return Estimate.absent(label, f"{self.paths[key]}: no {dataset}/{method} row")
        r = mine[0]
        if f"{metric}_mean" not in r:
            return Estimate.absent(label, f"{self.paths[key]}: no column {metric}_mean")
        converged, why = self.convergence(_EXPERIMENTS[key], dataset, method)
        return Estimate(
            label,
            _float(r[f"{metric}_mean"]),
            _float(r.get(f"{metric}_se")),
            _int(r.get(f"{metric}_n")),
            self._scale(key, mine),
            str(self.paths[key]),
            converged=converged,
            convergence=why,
            per_seed=self._per_seed(key, dataset, method, metric, _float(r[f"{metric}_mean"])),
        )

    def _per_seed(self, key: str, dataset: str, method: str, metric: str, mean: float) -> tuple[tuple[str, float], ...]:
        """A block table's cell seed by seed, from the runs file beside it (Table 1's
        ``table1_runs.csv``, :func:`repens.report.image.runs_path`): the runs of one seed
        share it with the other methods' runs of that seed, so comparisons of two cells pair
        them. Empty where the file is absent or its values do not average to the cell's mean
        (a ratio of means, say: the comparison is then unpaired)."""
        if key != "table1" or self.paths.get(key) is None:
            return ()
        runs_key = f"{key}_runs"
        if runs_key not in self._rows:
            self._rows[runs_key] = _read_csv(runs_path(self.paths[key]))
        rows, _ = self._rows[runs_key]
        if not rows:
            return ()
        mine = {
            r.get("seed"): _float(r.get(metric))
            for r in rows
            if (r.get("dataset"), r.get("method")) == (dataset, method)
        }
        values = _seeds(mine)
        if not values or not math.isclose(sum(v for _, v in values) / len(values), mean, rel_tol=1e-9, abs_tol=1e-12):
            return ()
        return values

    # ---- whether the runs behind a Table 1 / Table 2 row converged (results/convergence.csv)
    def convergence(self, experiment: str, dataset: str, method: str) -> tuple[bool | None, str]:
        """(converged, one-line reason) of the runs ``<experiment>/<dataset>/<method>/seed*``:
        the verdict of their table row where the table records one (``row_converged``,
        ``row_reason``: :func:`repens.summaries.converged.row_verdict`); else False if any
        run's check failed (the first failing run's reason), else None if any is unknown
        or there is no row for them, else True. ``(None, "")`` when no convergence table
        is given (no check applies)."""
        if self.paths.get("convergence") is None:
            return None, ""
        rows, why = self.rows("convergence")
        if rows is None:
            return None, f"convergence unknown ({why})"
        mine = [
            r for r in rows if (r.get("experiment"), r.get("dataset"), r.get("method")) == (experiment, dataset, method)
        ]
        if not mine:
            return None, f"no convergence check of the {experiment}/{dataset}/{method} runs"
        where = f"{experiment}/{dataset}/{method}"
        if mine[0].get("row_reason"):  # a table of run verdicts only has none
            value = _verdict_value(mine[0].get("row_converged"))
            reason = _first_part(mine[0].get("row_reason", ""))
            return value, (f"{where}: {reason}" if value is not True else f"{len(mine)} run(s) converged")
        verdicts = [(_verdict_value(r.get("converged")), r) for r in mine]
        for value in (False, None):
            hit = [r for v, r in verdicts if v is value]
            if hit:
                r = hit[0]
                return value, f"{where}/seed{r.get('seed')}: {_first_part(r.get('reason', ''))}"
        return True, f"{len(mine)} run(s) converged"

    # ---- the seed papers' published UCI values (workflow/resources/table2_seeds.csv)
    def seed_value(self, source: str, dataset: str, method: str, metric: str) -> Estimate:
        """A published value: rows of the seeds file whose ``source`` starts with ``source``."""
        label = f"{_SOURCE_NAMES.get(source, source)} {method} {METRIC_LABELS.get(metric, metric)} ({dataset})"
        rows, why = self.rows("uci_seeds")
        if rows is None:
            return Estimate.absent(label, why or "")
        mine = [
            r
            for r in rows
            if r.get("source", "").startswith(source)
            and r.get("dataset") == dataset
            and r.get("method") == method
            and r.get("metric") in (metric, f"{metric}_inferred")
        ]
        if not mine:
            return Estimate.absent(label, f"{self.paths['uci_seeds']}: no {source} {dataset}/{method} {metric}")
        r = mine[0]
        return Estimate(
            label,
            _float(r["mean"]),
            _float(r["se"]),
            0,
            PUBLISHED,
            str(self.paths["uci_seeds"]),
            rounding=_rounding(r["mean"], r["se"]),
        )


_SOURCE_NAMES = {"pearce2020": "Pearce's", "wild2023": "Wild's"}
#: the experiment (results/<experiment>/...) whose runs make each block table's rows
_EXPERIMENTS = {"table1": "image", "uci": "uci"}


def _verdict_value(text: Any) -> bool | None:
    """A ``converged`` cell: True / False, anything else unknown (None)."""
    return {"true": True, "false": False}.get(str(text).strip().lower())


def _first_part(reason: str) -> str:
    """The first clause of a :class:`repens.summaries.converged.Verdict` reason (its failing check
    comes first), so the scorecard's reason stays one short line."""
    return reason.split("; ")[0].split(" [")[0].strip() or "no reason recorded"


class PaperEvidence(Evidence):
    """The source paper's own numbers, read as ours are, so a claim's check runs on them.

    ``which``: ``"table1"`` (D'Angelo & Fortuin's Table 1, ``table1_paper.csv``: 5 seeds),
    ``"pearce"`` (Pearce et al.'s anchored ensemble, Table 1 NLL / App. C Table 2 RMSE)
    or ``"wild"`` (Wild et al.'s poster table, its unnamed metric read as an NLL).
    Quantities the paper does not print are absent.
    """

    def __init__(
        self,
        which: str,
        files: Mapping[str, Path | str | None],
        labels: Mapping[str, str] | None = None,
        groups: Mapping[str, Sequence[Any]] | None = None,
    ):
        super().__init__(files, labels, groups)
        self.which = which

    def table1(self, dataset: str, method: str, metric: str) -> Estimate:
        label = f"{self.label(method)} {METRIC_LABELS.get(metric, metric)}"
        rows, why = self.rows("table1_paper")
        if self.which != "table1" or rows is None:
            return Estimate.absent(label, why or "the paper prints no such value")
        mine = [r for r in rows if r.get("dataset") == dataset and r.get("method") == method]
        if not mine or metric not in mine[0]:
            return Estimate.absent(label, f"{self.paths['table1_paper']}: no {dataset}/{method} {metric}")
        r = mine[0]
        se = paper_se(metric, _float(r.get(f"{metric}_se")))  # the printed ± is no s.e. (image.paper_se)
        return Estimate(
            label,
            _float(r[metric]),
            se,
            PAPER_SEEDS,
            PUBLISHED,
            str(self.paths["table1_paper"]),
            missing=None
            if math.isfinite(se)
            else f"{shown_path(self.paths['table1_paper'])}: the paper's ± of "
            f"{METRIC_LABELS.get(metric, metric)} is no standard error (utils/generate_results.py)",
            rounding=_rounding(r[metric], r.get(f"{metric}_se", "")),
        )

    def uci(self, dataset: str, method: str, metric: str) -> Estimate:
        source = {"pearce": "pearce2020", "wild": "wild2023"}.get(self.which)
        if source is None:
            return Estimate.absent(method, "the paper prints no such value")
        if source == "pearce2020" and method == "anchored":  # Table 1 (NLL) / App. C Table 2 (RMSE)
            return self.seed_value(source, dataset, "anchored", metric)
        return self.seed_value(source, dataset, method, metric)

    def synthetic(self, target: str, method: str, metric: str) -> Estimate:
        return Estimate.absent(method, "the paper shows a figure only")

    def toy(self, method: str, metric: str) -> Estimate:
        return Estimate.absent(method, "the paper shows a figure only")


#: the metrics file of repens.summaries.synthetic, beside the synthetic table
SYNTHETIC_SUMMARY_NAME = "sample_quality.json"


def synthetic_summary_path(synthetic_table: Path | str) -> Path:
    """The metrics file of :mod:`repens.summaries.synthetic` beside the synthetic table
    (``results/synthetic/sample_quality.json``): the noise floor's spread over its draws."""
    return Path(synthetic_table).with_name(SYNTHETIC_SUMMARY_NAME)


def noise_floor_se(target: str, n: int, metric: str, summary: Path | str | None = None) -> float:
    """Standard error of the ``iid`` row's mean: the standard deviation of ``metric`` over
    the row's ``repeats`` draws of ``n`` exact samples, over the square root of
    ``repeats``, as :mod:`repens.summaries.synthetic` wrote them in ``summary`` (default:
    ``results/synthetic/sample_quality.json``)."""
    path = Path(summary) if summary is not None else synthetic_summary_path(FILES["synthetic"])
    data = read_json(path, "sample-quality summary")
    rows = [
        r
        for r in data.get("rows", [])
        if r.get("target") == target and r.get("method") == "iid" and _int(r.get("n")) == int(n)
    ]
    if len(rows) != 1 or f"{metric}_sd" not in rows[0]:
        raise DataFileError(path, f"no iid row for {target} with n={n} holding {metric}_sd")
    return float(rows[0][f"{metric}_sd"]) / math.sqrt(rows[0]["repeats"])


#: Where each file key lives in a run (the CLI's options say which path each is).
FILES = {
    "synthetic": "results/synthetic/metrics.csv",
    "toy": "results/toy/distance_to_hmc.csv",
    "table1": "results/table1.csv",
    "uci": "results/table2_uci.csv",
    "table1_paper": "workflow/resources/table1_paper.csv",
    "uci_seeds": "workflow/resources/table2_seeds.csv",
    "convergence": "results/convergence.csv",
}
