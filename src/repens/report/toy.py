"""Figure 1, Figure 3 and the distance-to-HMC table for the BNN toys (Appendix G.2, G.3).

Inputs are the prediction files ``results/toy/<dataset>/<method>/seed<seed>/predictions.npz``
written by the training jobs and by the HMC job:

* every file: ``x_train`` (N, d), ``y_train`` (N,), ``x_test`` (T, d), ``job`` (0-d
  string array, the JSON job spec with ``dataset``, ``method``, ``seed``, ``scale``
  and ``particles``/``steps``, or an ``hmc`` dict for the HMC job) and ``label``
  (0-d string array, the display name);
* regression (d = 1): ``f_test`` (S, T), the function value of each particle or
  posterior sample at the test inputs, and ``noise_std`` (0-d). The predictive
  at x is the mixture ``(1/S) sum_s N(f_s(x), noise_std^2)``;
* classification (d = 2, test inputs a y-major square grid): ``probs_test``
  (T, C), the predictive class probabilities.

Functions:

* :func:`load_predictions`: read and check one file.
* :func:`plot_regression_panels`: Figure 1, one panel per input (predictive mean,
  +-1/2/3 sd bands of the predictive mixture, training points, ``x sin x``).
* :func:`plot_classification_panels`: Figure 3, predictive entropy over the grid.
* :func:`distance_frame` / :func:`write_distance_table`: each method's predictive
  against HMC's (Wasserstein-2 per region for regression, KL near/far from the
  data for classification), CSV, booktabs LaTeX and HTML through :mod:`repens.report.tables`.

Distances are defined in :mod:`repens.distances`.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from repens.data.errors import DataFileError
from repens.data.toy import REGRESSION_CLUSTERS
from repens.distances import categorical_kl, gaussian_w2, mixture_moments, predictive_entropy
from repens.hmc import CONVERGED_ESS_MIN, CONVERGED_RHAT_MAX
from repens.report.style import PALETTE, figure_style
from repens.report.synthetic import LABELS, _save_figure, read_npz

log = logging.getLogger("repens.report")

__all__ = [
    "DATASETS",
    "NEAR_RADIUS",
    "COLUMNS",
    "ToyPredictions",
    "ToyInputs",
    "load_predictions",
    "regression_regions",
    "near_mask",
    "distance_frame",
    "distance_table",
    "write_distance_table",
    "plot_regression_panels",
    "plot_classification_panels",
]

DATASETS = ("regression", "classification")

#: Classification grid points within this Euclidean distance of a training point are "near".
NEAR_RADIUS = 2.0

_COMMON_KEYS = ("x_train", "y_train", "x_test", "job", "label")
_DATASET_KEYS = {"regression": ("f_test", "noise_std"), "classification": ("probs_test",)}

#: Columns of the distance CSV, in order (one row per method; NaN where a dataset is absent).
REGRESSION_COLUMNS = [
    "w2_data", "w2_gap", "w2_outside",
    "gap_sd", "hmc_gap_sd", "gap_sd_ratio",
    "gap_sd_epistemic", "hmc_gap_sd_epistemic", "gap_sd_epistemic_ratio",
]
CLASSIFICATION_COLUMNS = [
    "kl_near", "kl_far", "entropy_near", "entropy_far", "hmc_entropy_near", "hmc_entropy_far",
]
COLUMNS = (["method", "label", "seed", "scale"] + REGRESSION_COLUMNS + CLASSIFICATION_COLUMNS
           + ["regression_source", "classification_source", "hmc_converged"])


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class ToyPredictions:
    """One prediction file (a method's job or the HMC reference)."""

    path: Path
    dataset: str  # "regression" | "classification"
    method: str  # config key or "hmc"
    label: str
    job: dict[str, Any]
    x_train: np.ndarray  # (N, d) float64
    y_train: np.ndarray  # (N,) float64 targets or int64 labels
    x_test: np.ndarray  # (T, d) float64
    f_test: np.ndarray | None = None  # regression: (S, T) float64
    noise_std: float | None = None  # regression
    probs_test: np.ndarray | None = None  # classification: (T, C) float64
    #: an HMC reference: converged at the paper-scale thresholds (repens.hmc.convergence);
    #: None for a method's file
    converged: bool | None = None

    @property
    def seed(self) -> Any:
        return self.job.get("seed")

    @property
    def scale(self) -> str:
        return str(self.job.get("scale", "?"))

    @property
    def is_hmc(self) -> bool:
        return self.method == "hmc"

    def predictive(self, noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Regression: (mean, sd) of the predictive mixture at ``x_test``; ``noise=False``
        gives the epistemic sd (spread of f alone)."""
        if self.f_test is None:
            raise ValueError(f"{self.path}: not a regression prediction file")
        return mixture_moments(self.f_test, self.noise_std if noise else 0.0)


def _grid_axes(path: Path, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The axes (xs, ys) of a y-major square grid; ValueError naming ``path`` otherwise."""
    t = x_test.shape[0]
    n = math.isqrt(t)
    if n * n != t or n < 2:
        raise DataFileError(path, f"x_test has {t} points, not a square grid")
    grid = x_test.reshape(n, n, 2)
    xs, ys = grid[0, :, 0], grid[:, 0, 1]
    expected = np.stack(np.broadcast_arrays(xs[None, :], ys[:, None]), axis=-1)
    if not (np.allclose(grid, expected, atol=1e-5) and np.all(np.diff(xs) > 0) and np.all(np.diff(ys) > 0)):
        raise DataFileError(path, "x_test is not a y-major grid "
                         "(expected x_test.reshape(n, n, 2)[i, j] = (xs[j], ys[i]), both increasing)")
    return xs, ys


def load_predictions(path: Path | str) -> ToyPredictions:
    """Read a toy prediction file and check its format.

    Args:
        path: ``predictions.npz`` of a toy training job or of the HMC job.

    Returns:
        The parsed :class:`ToyPredictions` (arrays as float64; classification labels int64).
        The method key is the job's ``method``, else ``"hmc"`` for a job with an ``hmc``
        block, else the name of the file's grandparent folder (``<method>/seed<s>/``).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: unreadable, a required array is missing (the message names the file
            and the key), the job has no known ``dataset``, or shapes do not fit.
    """
    path = Path(path)
    arrays = read_npz(path, "prediction")
    for key in _COMMON_KEYS:
        if key not in arrays:
            raise DataFileError(path, f"missing array {key!r}; has {sorted(arrays)}")
    try:
        job = json.loads(str(arrays["job"][()]))
    except (json.JSONDecodeError, TypeError, IndexError) as err:
        raise DataFileError(path, f"'job' is not a JSON job spec ({err})") from err
    if not isinstance(job, dict):
        raise DataFileError(path, "'job' is not a JSON object")
    dataset = job.get("dataset")
    if dataset not in DATASETS:
        raise DataFileError(path, f"job 'dataset' is {dataset!r}, expected one of {list(DATASETS)}")
    for key in _DATASET_KEYS[dataset]:
        if key not in arrays:
            raise DataFileError(path, f"missing array {key!r} (required for {dataset}); has {sorted(arrays)}")

    method = job.get("method") or ("hmc" if "hmc" in job else path.parent.parent.name)
    label = str(arrays["label"][()]) or LABELS.get(method, method)
    x_train = np.asarray(arrays["x_train"], dtype=np.float64)
    x_test = np.asarray(arrays["x_test"], dtype=np.float64)
    y_train = np.asarray(arrays["y_train"])
    d = 1 if dataset == "regression" else 2
    if x_train.ndim != 2 or x_train.shape[1] != d or x_train.shape[0] < 1:
        raise DataFileError(path, f"'x_train' must have shape (N, {d}), got {x_train.shape}")
    if y_train.shape != (x_train.shape[0],):
        raise DataFileError(path, f"'y_train' must have shape ({x_train.shape[0]},), got {y_train.shape}")
    if x_test.ndim != 2 or x_test.shape[1] != d or x_test.shape[0] < 2:
        raise DataFileError(path, f"'x_test' must have shape (T, {d}), got {x_test.shape}")
    t = x_test.shape[0]
    fields: dict[str, Any] = {}
    if dataset == "regression":
        f_test = np.asarray(arrays["f_test"], dtype=np.float64)
        if f_test.ndim != 2 or f_test.shape[1] != t or f_test.shape[0] < 1:
            raise DataFileError(path, f"'f_test' must have shape (S, {t}), got {f_test.shape}")
        noise = np.asarray(arrays["noise_std"], dtype=np.float64)
        if noise.shape != () or not noise >= 0:
            raise DataFileError(path, f"'noise_std' must be a non-negative scalar, got {noise!r}")
        fields.update(f_test=f_test, noise_std=float(noise), y_train=y_train.astype(np.float64))
    else:
        probs = np.asarray(arrays["probs_test"], dtype=np.float64)
        if probs.ndim != 2 or probs.shape[0] != t or probs.shape[1] < 2:
            raise DataFileError(path, f"'probs_test' must have shape ({t}, C >= 2), got {probs.shape}")
        if np.any(probs < 0) or not np.allclose(probs.sum(axis=1), 1.0, atol=1e-3):
            raise DataFileError(path, "'probs_test' rows are not probability vectors")
        labels = y_train.astype(np.int64)
        if not np.array_equal(labels, y_train) or labels.min() < 0 or labels.max() >= probs.shape[1]:
            raise DataFileError(path, f"'y_train' must hold integer labels in [0, {probs.shape[1]})")
        _grid_axes(path, x_test)
        fields.update(probs_test=probs, y_train=labels)
    converged = None
    if "converged" in arrays:
        converged = bool(np.asarray(arrays["converged"]))
    elif method == "hmc":
        converged = _converged_by_job(job)
    return ToyPredictions(path=path, dataset=dataset, method=str(method), label=label, job=job,
                          x_train=x_train, x_test=x_test, converged=converged, **fields)


def _converged_by_job(job: Mapping[str, Any]) -> bool:
    """An HMC file written before it recorded ``converged``: its predictions exist only if
    the job's own check passed, so it is converged when that check was at least as strict
    as the paper-scale thresholds (:data:`repens.hmc.CONVERGED_RHAT_MAX`, ``_ESS_MIN``)."""
    from repens.hmc import HMCSettings

    try:
        settings = HMCSettings.from_dict(job.get("hmc"))
    except (TypeError, ValueError):
        return False
    return settings.rhat_max <= CONVERGED_RHAT_MAX and settings.ess_min >= CONVERGED_ESS_MIN


def _load_all(inputs: Sequence[Path | str], dataset: str | None,
              labels: Mapping[str, str] | None = None) -> list[ToyPredictions]:
    """Load and cross-check ``inputs``; ``labels`` (method key -> display name, e.g. from
    ``config.yaml``) overrides the labels stored in the files."""
    preds = [load_predictions(p) for p in inputs]
    if labels:
        preds = [replace(p, label=labels.get(p.method, p.label)) for p in preds]
    if not preds:
        raise ValueError("no input files")
    if dataset is not None:
        for p in preds:
            if p.dataset != dataset:
                raise ValueError(f"{p.path}: a {p.dataset!r} prediction file, but {dataset!r} inputs are expected")
    _check_same_run(preds)
    return preds


def _check_same_run(preds: Sequence[ToyPredictions]) -> None:
    """All inputs must come from one seed and one scale; the error lists every file."""
    if len({(str(p.seed), p.scale) for p in preds}) > 1:
        listing = "; ".join(f"{p.path}: seed={p.seed}, scale={p.scale}" for p in preds)
        raise ValueError(f"inputs mix seeds/scales (expected one seed and one scale): {listing}")


# --------------------------------------------------------------------------- regions


def regression_regions(x: Any) -> dict[str, np.ndarray]:
    """Boolean masks of the 1-D test inputs ``x`` (T,) or (T, 1).

    * ``data``: inside a training interval, ``[1.5, 2.5]`` or ``[4.5, 6.0]`` (closed);
    * ``gap``: between them, ``(2.5, 4.5)``;
    * ``outside``: the rest (``[0, 1.5)`` and ``(6, 7]`` on the G.2 test grid).
    """
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    (lo1, hi1), (lo2, hi2) = REGRESSION_CLUSTERS
    data = ((x >= lo1) & (x <= hi1)) | ((x >= lo2) & (x <= hi2))
    gap = (x > hi1) & (x < lo2)
    return {"data": data, "gap": gap, "outside": ~(data | gap)}


def near_mask(x_test: Any, x_train: Any, radius: float = NEAR_RADIUS) -> np.ndarray:
    """Grid points within Euclidean distance ``radius`` (inclusive) of some training point."""
    a, b = np.asarray(x_test, dtype=np.float64), np.asarray(x_train, dtype=np.float64)
    d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    return d2.min(axis=1) <= radius**2


def _masked_mean(values: np.ndarray, mask: np.ndarray, what: str) -> float:
    if not mask.any():
        log.warning("no test points in %s; its columns are NaN", what)
        return float("nan")
    return float(values[mask].mean())


# --------------------------------------------------------------------------- distance table


def _check_reference(hmc: ToyPredictions, methods: Sequence[ToyPredictions], dataset: str) -> None:
    if not hmc.is_hmc:
        raise ValueError(f"{hmc.path}: passed as the HMC reference for {dataset}, "
                         f"but it is a {hmc.method!r} run")
    seen: dict[str, Path] = {}
    for m in methods:
        if m.method in seen:
            raise ValueError(f"{m.path}: method {m.method!r} appears twice for {dataset} (also {seen[m.method]})")
        seen[m.method] = m.path
        for name in ("x_test", "x_train"):
            a, b = getattr(hmc, name), getattr(m, name)
            if a.shape != b.shape or not np.allclose(a, b, atol=1e-5):
                raise ValueError(f"{m.path}: {name} differs from the HMC reference {hmc.path} "
                                 f"(shapes {b.shape} vs {a.shape}); the files are not for the same data")


def _regression_rows(hmc: ToyPredictions, methods: Sequence[ToyPredictions]) -> dict[str, dict[str, Any]]:
    regions = regression_regions(hmc.x_test)
    gap = regions["gap"]
    h_mean, h_sd = hmc.predictive(noise=True)
    _, h_sd_f = hmc.predictive(noise=False)
    h_gap_sd = _masked_mean(h_sd, gap, "the gap")
    h_gap_sd_f = _masked_mean(h_sd_f, gap, "the gap")
    rows = {}
    for m in methods:
        mean, sd = m.predictive(noise=True)
        _, sd_f = m.predictive(noise=False)
        w2 = gaussian_w2(mean, sd, h_mean, h_sd)
        gap_sd, gap_sd_f = _masked_mean(sd, gap, "the gap"), _masked_mean(sd_f, gap, "the gap")
        rows[m.method] = {
            **{f"w2_{name}": _masked_mean(w2, mask, f"region {name}") for name, mask in regions.items()},
            "gap_sd": gap_sd, "hmc_gap_sd": h_gap_sd,
            "gap_sd_ratio": gap_sd / h_gap_sd if h_gap_sd > 0 else float("nan"),
            "gap_sd_epistemic": gap_sd_f, "hmc_gap_sd_epistemic": h_gap_sd_f,
            "gap_sd_epistemic_ratio": gap_sd_f / h_gap_sd_f if h_gap_sd_f > 0 else float("nan"),
            "regression_source": str(m.path),
        }
    return rows


def _classification_rows(hmc: ToyPredictions, methods: Sequence[ToyPredictions]) -> dict[str, dict[str, Any]]:
    near = near_mask(hmc.x_test, hmc.x_train)
    far = ~near
    h_entropy = predictive_entropy(hmc.probs_test)
    rows = {}
    for m in methods:
        if m.probs_test.shape != hmc.probs_test.shape:
            raise ValueError(f"{m.path}: probs_test has shape {m.probs_test.shape}, "
                             f"the HMC reference {hmc.path} has {hmc.probs_test.shape}")
        kl = categorical_kl(hmc.probs_test, m.probs_test)
        entropy = predictive_entropy(m.probs_test)
        rows[m.method] = {
            "kl_near": _masked_mean(kl, near, "near"), "kl_far": _masked_mean(kl, far, "far"),
            "entropy_near": _masked_mean(entropy, near, "near"), "entropy_far": _masked_mean(entropy, far, "far"),
            "hmc_entropy_near": _masked_mean(h_entropy, near, "near"),
            "hmc_entropy_far": _masked_mean(h_entropy, far, "far"),
            "classification_source": str(m.path),
        }
    return rows


#: ``(hmc_paths, method_paths)`` of one dataset: the HMC reference of every seed (or one
#: path) and the methods' files of those seeds; each method file is compared with the
#: reference of its own seed (the data are drawn per seed).
ToyInputs = tuple["Path | str | Sequence[Path | str]", "Sequence[Path | str]"]


def _load_pair(pair: ToyInputs | None, dataset: str, labels: Mapping[str, str] | None = None
               ) -> dict[Any, tuple[ToyPredictions, list[ToyPredictions]]] | None:
    """``{seed: (hmc, methods of that seed)}`` in the references' order, every file checked."""
    if pair is None:
        return None
    hmc_paths, method_paths = pair
    hmc_paths = [hmc_paths] if isinstance(hmc_paths, (str, Path)) else list(hmc_paths)
    if not hmc_paths:
        raise ValueError(f"no HMC reference for {dataset}")
    if not method_paths:
        raise ValueError(f"no method files for {dataset} (HMC reference {', '.join(map(str, hmc_paths))})")
    references = [load_predictions(p) for p in hmc_paths]
    methods = [load_predictions(p) for p in method_paths]
    if labels:
        methods = [replace(m, label=labels.get(m.method, m.label)) for m in methods]
    for p in (*references, *methods):
        if p.dataset != dataset:
            raise ValueError(f"{p.path}: a {p.dataset!r} prediction file, but {dataset!r} inputs are expected")
    _check_same_scale([*references, *methods])
    by_seed: dict[Any, tuple[ToyPredictions, list[ToyPredictions]]] = {}
    for hmc in references:
        if not hmc.is_hmc:
            raise ValueError(f"{hmc.path}: passed as the HMC reference for {dataset}, but it is a {hmc.method!r} run")
        if hmc.seed in by_seed:
            raise ValueError(f"{hmc.path}: a second HMC reference for {dataset} seed {hmc.seed} "
                             f"(also {by_seed[hmc.seed][0].path})")
        by_seed[hmc.seed] = (hmc, [])
    for m in methods:
        if m.seed not in by_seed:
            raise ValueError(f"{m.path}: seed {m.seed} has no HMC reference for {dataset} "
                             f"(references: {', '.join(f'{h.path} (seed {h.seed})' for h in references)})")
        by_seed[m.seed][1].append(m)
    for seed, (hmc, group) in list(by_seed.items()):
        if not group:
            log.warning("%s: no method file of seed %s; the reference is not used", hmc.path, seed)
            del by_seed[seed]
            continue
        _check_reference(hmc, group, dataset)
    return by_seed


def _check_same_scale(preds: Sequence[ToyPredictions]) -> None:
    """One scale across the table (its seeds may differ); the error lists every file."""
    if len({p.scale for p in preds}) > 1:
        listing = "; ".join(f"{p.path}: scale={p.scale}" for p in preds)
        raise ValueError(f"inputs mix scales (expected one scale): {listing}")


def _distance_data(regression: ToyInputs | None, classification: ToyInputs | None,
                   labels: Mapping[str, str] | None = None):
    """The tidy distance frame (one row per method and seed) and, per dataset present,
    ``{seed: (hmc, methods)}``."""
    import pandas as pd

    if regression is None and classification is None:
        raise ValueError("write_distance_table needs the regression or the classification inputs (both are None)")
    loaded = {"regression": _load_pair(regression, "regression", labels),
              "classification": _load_pair(classification, "classification", labels)}
    present = {k: v for k, v in loaded.items() if v is not None}
    _check_same_scale([p for by_seed in present.values() for hmc, methods in by_seed.values()
                       for p in (hmc, *methods)])

    rows: dict[tuple[str, Any], dict[str, Any]] = {}  # (method, seed) -> row; methods in input order
    order: dict[str, int] = {}
    seeds: dict[Any, int] = {}
    for by_seed in present.values():
        for seed, (_, methods) in by_seed.items():
            seeds.setdefault(seed, len(seeds))
            for m in methods:
                order.setdefault(m.method, len(order))
                rows.setdefault((m.method, seed), {"method": m.method, "label": m.label, "seed": seed,
                                                   "scale": m.scale})
    row_builders = {"regression": _regression_rows, "classification": _classification_rows}
    for dataset, by_seed in present.items():
        for seed, (hmc, methods) in by_seed.items():
            for key, values in row_builders[dataset](hmc, methods).items():
                rows[(key, seed)].update(values)
                # 1 when every HMC reference the row was measured against is converged
                row = rows[(key, seed)]
                row["hmc_converged"] = int(bool(hmc.converged) and row.get("hmc_converged", 1) == 1)
    ordered = sorted(rows.items(), key=lambda item: (order[item[0][0]], seeds[item[0][1]]))
    frame = pd.DataFrame([row for _, row in ordered], columns=COLUMNS)
    for col in REGRESSION_COLUMNS + CLASSIFICATION_COLUMNS:
        frame[col] = frame[col].astype(float)
    frame["seed"] = frame["seed"].astype("Int64")
    frame["hmc_converged"] = frame["hmc_converged"].astype("Int64")
    return frame, present


def distance_frame(regression: ToyInputs | None = None, classification: ToyInputs | None = None):
    """The distance-to-HMC table as a pandas DataFrame (see :func:`write_distance_table`)."""
    return _distance_data(regression, classification)[0]


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


def _members(p: ToyPredictions) -> int:
    """Number of stored functions (regression); 0 when the file does not tell (classification)."""
    return p.f_test.shape[0] if p.f_test is not None else 0


def _settings_detail(preds: Sequence[ToyPredictions]) -> tuple[list[str], list[str | None]]:
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
    parts += [f"HMC: {_fmt_setting(p.job, _members(p))}" + ("" if p.converged is not False else
              " (not converged: R-hat / ESS fail the paper-scale thresholds)") for p in preds if p.is_hmc]
    extra = [None if p.is_hmc or shared else method_settings[p.path] for p in preds]
    return parts, extra


def _settings_summary(preds: Sequence[ToyPredictions]) -> tuple[str, list[str | None]]:
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


def distance_table(frame, present: dict[str, Any]):
    """The distance frame as a :class:`repens.report.tables.Table`: HMC's own values
    (in italics) first, a rule, then one row per method; each cell the mean ± s.e. over
    the seeds (each seed's method against its own seed's HMC); the columns of each
    dataset present under a group header (Regression, Classification)."""
    import pandas as pd

    from repens.report.tables import Table, mean_se

    seeds = list(dict.fromkeys(seed for by_seed in present.values() for seed in by_seed))
    first = next(iter(next(iter(present.values())).values()))[0]
    settings = "; ".join(
        f"{dataset}: " + "; ".join(_settings_detail([hmc, *methods])[0])
        for dataset, by_seed in present.items() for hmc, methods in list(by_seed.values())[:1])
    over = "" if len(seeds) == 1 else f" Each cell: mean $\\pm$ standard error over the {len(seeds)} seeds, " \
        "each seed's data, method and HMC reference its own."
    unconverged = sorted({str(hmc.seed) for by_seed in present.values() for hmc, _ in by_seed.values()
                          if hmc.converged is False}, key=str)
    warning = (f" The HMC reference of seed{'s' if len(unconverged) > 1 else ''} {', '.join(unconverged)} is not "
               f"converged (R-hat / ESS fail the paper-scale thresholds $\\hat R \\le {CONVERGED_RHAT_MAX:g}$, ESS "
               f"$\\ge {CONVERGED_ESS_MIN:g}$): its distances are no evidence about the methods." if unconverged else "")
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
        n_grid, n_classes = math.isqrt(hmc_cls.x_test.shape[0]), hmc_cls.probs_test.shape[1]
        parts.append(
            r"Classification (G.3): $\mathrm{KL}(p_{\mathrm{HMC}}\,\|\,p_{\mathrm{method}})$ of the predictive "
            f"class probabilities, averaged over the ${n_grid}\\times{n_grid}$ grid points within distance "
            f"{NEAR_RADIUS:g} of a training point (near) and over the rest (far); "
            f"$H$: mean predictive entropy (nats, at most $\\log {n_classes}$) of the method, HMC's in the first row."
        )
        headers.update({("Classification", key): plain for key, (plain, _) in _CLASSIFICATION_HEADERS.items()})

    def cell(values) -> Any:
        return mean_se([float(v) for v in values if np.isfinite(v)])

    # HMC's own values (one per seed); its distances to itself and ratios are left empty
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
    columns = pd.MultiIndex.from_tuples([(group, plain) for (group, _), plain in headers.items()],
                                        names=[None, "Method"])
    index = pd.Index(["HMC (reference)", *(by_method[m]["label"].iloc[0] for m in methods)])
    tex = {plain: tex for plain, tex in [*_REGRESSION_HEADERS.values(), *_CLASSIFICATION_HEADERS.values()]}
    fmt = _mean_se_text(len(seeds))
    return Table(
        cells=pd.DataFrame(rows, index=index, columns=columns, dtype=object), csv=frame, caption=" ".join(parts),
        label="tab:toy-distance-to-hmc", title=f"BNN toys: distance of each predictive to HMC's "
                                               f"(scale: {first.scale}, {_seeds_text(seeds)})"
                                               + ("; HMC reference NOT converged" if unconverged else ""),
        note="W2: Wasserstein-2 between Gaussian summaries; ratio: method / HMC; KL(HMC || method); "
             "H: predictive entropy (nats); (f): epistemic, without the noise"
             + ("" if len(seeds) == 1 else "; mean ± s.e. over seeds")
             + (f"; the HMC reference of seed(s) {', '.join(unconverged)} is not converged (R-hat / ESS fail the "
                f"paper-scale thresholds R-hat <= {CONVERGED_RHAT_MAX:g}, ESS >= {CONVERGED_ESS_MIN:g}): no evidence "
                "about the methods"
                if unconverged else ""),
        source="repens.report.toy.write_distance_table", tex_headers=tex,
        formats={plain: fmt for plain in headers.values()},
        italic=[True] + [False] * len(methods), rules=["", "midrule"] + [""] * (len(methods) - 1),
        packages=("booktabs", "amsmath"), size="footnotesize", tabcolsep="4pt", position="ht",
    )


def write_distance_table(regression: ToyInputs | None, classification: ToyInputs | None,
                         out_csv: Path | str, out_tex: Path | str,
                         labels: Mapping[str, str] | None = None, out_html: Path | str | None = None) -> None:
    """Write the distance-to-HMC table of the toys as CSV, booktabs LaTeX and (optionally) HTML.

    The CSV has one row per method and seed, methods in input order (the regression
    methods first, then any classification-only ones), seeds in the order of the HMC
    references; each method file is compared with the HMC reference of its own seed.
    The LaTeX and HTML tables show one row per method, each cell the mean ± s.e. over
    seeds (``(n=k)`` where fewer seeds than the table's ran). Columns of the CSV
    (see :data:`COLUMNS`, NaN where a dataset is absent):

    * regression, with the predictive at x summarised by the Gaussian with the
      mixture's mean and sd (:func:`repens.distances.mixture_moments`):
      ``w2_data``, ``w2_gap``, ``w2_outside``: mean over the test points of a
      region (:func:`regression_regions`) of ``W2(method, HMC) =
      sqrt((m - m_HMC)^2 + (s - s_HMC)^2)``; ``gap_sd`` / ``hmc_gap_sd``: mean total
      predictive sd (with the noise) over the gap, ``gap_sd_ratio`` their ratio
      (method / HMC); ``gap_sd_epistemic`` / ``hmc_gap_sd_epistemic`` /
      ``gap_sd_epistemic_ratio``: the same for the sd of f alone (no noise; the
      sharper test of in-between uncertainty, since the noise floor is shared);
    * classification: ``kl_near`` / ``kl_far``: mean over grid points of
      ``KL(p_HMC || p_method)`` (:func:`repens.distances.categorical_kl`) within
      :data:`NEAR_RADIUS` of a training point / farther; ``entropy_near`` /
      ``entropy_far`` and ``hmc_entropy_near`` / ``hmc_entropy_far``: mean
      predictive entropies (nats);
    * ``method``, ``label``, ``seed``, ``scale``, and the source files.

    Args:
        regression: ``(hmc_paths, method_paths)`` for the regression toy (one HMC
            reference per seed, or one path), or None.
        classification: the same for the classification toy, or None.
        out_csv: CSV path (parent directories are created).
        out_tex: LaTeX path.
        labels: Method key -> display name (``config.yaml``'s labels).
        out_html: HTML path (the Snakemake report shows it), or None.

    Raises:
        ValueError: both are None; a file is malformed, is for the other dataset,
            a reference is not an HMC file or two are for one seed, a method file's
            seed has no reference, a method appears twice in a seed, the inputs mix
            scales, or a method's test/training inputs differ from its reference's
            (messages name the files).
    """
    from repens.report.tables import write_table

    frame, present = _distance_data(regression, classification, labels)
    write_table(distance_table(frame, present), out_tex=out_tex, out_html=out_html, out_csv=out_csv)
    log.info("wrote %s and %s (%d methods, %d rows)", out_csv, out_tex, frame["method"].nunique(), len(frame))


# --------------------------------------------------------------------------- figures

_NCOLS = 4
#: The +-k sd bands of Figure 1, widest first, with their fill alpha.
_BANDS = ((3, 0.12), (2, 0.16), (1, 0.22))
#: Colormap of the entropy images (Figure 3) and palette of the training classes.
_ENTROPY_CMAP = "viridis"
_CLASS_PALETTE = "tab10"


def _panel_grid(k: int, panel_w: float, panel_h: float, top_in: float, bottom_in: float,
                left_in: float, right_in: float, wspace: float, hspace: float):
    from matplotlib.figure import Figure  # Agg canvas, no pyplot / global backend state

    ncols = min(_NCOLS, k)
    nrows = math.ceil(k / ncols)
    width = left_in + right_in + ncols * panel_w * (1 + wspace)
    height = top_in + bottom_in + nrows * panel_h * (1 + hspace)
    fig = Figure(figsize=(width, height))
    grid = fig.add_gridspec(nrows, ncols, left=left_in / width, right=1 - right_in / width,
                            bottom=bottom_in / height, top=1 - top_in / height, wspace=wspace, hspace=hspace)
    axes = [fig.add_subplot(grid[i // ncols, i % ncols]) for i in range(k)]
    return fig, axes, ncols, nrows, width, height


def _title(p: ToyPredictions, extra: str | None) -> str:
    return p.label + (f"\n{extra}" if extra else "")


def _label_outer(ax, i: int, ncols: int, k: int, xlabel: str | None, ylabel: str | None) -> None:
    """Tick labels (and axis labels) only on the left column and the bottom panel of each column."""
    ax.tick_params(labelsize=8)
    if i % ncols:
        ax.tick_params(labelleft=False)
        ax.set_ylabel("")
    elif ylabel is not None:
        ax.set_ylabel(ylabel)
    if i + ncols >= k:  # nothing below this panel
        if xlabel is not None:
            ax.set_xlabel(xlabel)
    else:
        ax.tick_params(labelbottom=False)
        ax.set_xlabel("")


#: Figure 1's y-range: the data and this many predictive sd around HMC's mean (about 95%)
#: over the training span.
_YLIM_SDS = 2.0


def _training_span(preds: Sequence[ToyPredictions]) -> tuple[float, float]:
    """The x-range of the training data (both clusters and the gap between them)."""
    x = np.concatenate([p.x_train[:, 0] for p in preds])
    return float(x.min()), float(x.max())


def _regression_ylim(preds: Sequence[ToyPredictions], truth: np.ndarray | None = None,
                     xx: np.ndarray | None = None) -> tuple[float, float]:
    """Shared y-limits chosen where the figure's point is, the training span (the two
    clusters and the gap between them): the data, the truth there and HMC's predictive
    mean +- 2 sd (about 95%) over x in that span, padded by 5%. Without an HMC panel,
    every panel's band over the span. What lies beyond (the extrapolating tails, where the
    bands grow to +-20, or a diverged method) is clipped, so the gap's uncertainty is
    not flattened by the tails."""
    lo_x, hi_x = _training_span(preds)
    values = [np.concatenate([p.y_train for p in preds])]
    if truth is not None and xx is not None:
        values.append(truth[(xx >= lo_x) & (xx <= hi_x)])
    for p in [p for p in preds if p.is_hmc] or list(preds):
        x = p.x_test[:, 0]
        inside = (x >= lo_x) & (x <= hi_x)
        mean, sd = p.predictive()
        band = np.concatenate([mean[inside] - _YLIM_SDS * sd[inside], mean[inside] + _YLIM_SDS * sd[inside]])
        values.append(band[np.isfinite(band)])
    data = np.concatenate(values)
    lo, hi = float(data.min()), float(data.max())
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    return lo - pad, hi + pad


def _finish_figure(fig, title: str, footer: str, height: float, out_png: Path | str, out_pdf: Path | str,
                   panels: int) -> None:
    """Suptitle, settings footer, and the PNG + PDF written atomically (both toy figures)."""
    fig.suptitle(title, fontsize=11, y=1 - 0.12 / height, va="top")
    fig.text(0.5, 0.008, footer, ha="center", va="bottom", fontsize=7.5, color="0.25", wrap=True)
    _save_figure(fig, Path(out_png), "png", dpi=150)
    _save_figure(fig, Path(out_pdf), "pdf", metadata={"CreationDate": None})
    log.info("wrote %s and %s (%d panels)", out_png, out_pdf, panels)


def _draw_regression(ax, p: ToyPredictions, xx: np.ndarray, truth: np.ndarray) -> None:
    """One Figure 1 panel: +-1/2/3 sd bands, ``x sin x`` (dashed), predictive mean, training data."""
    import seaborn as sns

    x = p.x_test[:, 0]
    mean, sd = p.predictive()
    for k, alpha in _BANDS:
        ax.fill_between(x, mean - k * sd, mean + k * sd, color=PALETTE["band"], alpha=alpha, linewidth=0)
    sns.lineplot(x=xx, y=truth, ax=ax, color=PALETTE["truth"], linestyle="--", linewidth=0.7, zorder=2,
                 estimator=None, sort=False)
    sns.lineplot(x=x, y=mean, ax=ax, color=PALETTE["mean"], linewidth=1.3, zorder=3, estimator=None, sort=False)
    sns.scatterplot(x=p.x_train[:, 0], y=p.y_train, ax=ax, s=5, color=PALETTE["data"], edgecolor="none",
                    zorder=4, legend=False)


def _regression_legend(fig, y: float = 0.03) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], color=PALETTE["mean"], linewidth=1.3, label="predictive mean"),
               *(Patch(color=PALETTE["band"], alpha=a, linewidth=0, label=f"$\\pm{k}$ sd")
                 for k, a in ((1, 0.5), (2, 0.3), (3, 0.15))),
               Line2D([], [], color=PALETTE["data"], marker=".", linestyle="none", label="training data"),
               Line2D([], [], color=PALETTE["truth"], linestyle="--", linewidth=0.7, label=r"$x\,\sin x$")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, y))


def plot_regression_panels(inputs: Sequence[Path | str], out_png: Path | str, out_pdf: Path | str,
                           labels: Mapping[str, str] | None = None) -> None:
    """Draw Figure 1: the 1-D regression predictive of each input, one panel per input.

    Panels follow the input order in a grid of up to four columns, each titled with
    the file's label. A panel shows the predictive mean (line), shaded bands of
    +-1, 2 and 3 standard deviations of the predictive mixture (sd including the
    observation noise), the training points and the true function ``x sin x``
    (thin dashed). All panels share the y-limits, chosen over the training span (both
    clusters and the gap between them): the data and HMC's mean +- 2 sd there; the
    extrapolating tails beyond are clipped (the footer says so). The suptitle names the paper
    figure; the footer gives scale, seed and the settings read from the jobs
    (particles and steps, and the HMC block); where methods' settings differ they
    go into the panel titles instead. Lines and points are drawn with seaborn in
    the report theme (:func:`repens.report.style.figure_style`, local to the figure).

    Raises:
        ValueError: no inputs, an input is malformed or is not a regression file, or
            the inputs mix seeds/scales (messages name the files).
    """
    import seaborn as sns

    preds = _load_all(inputs, "regression", labels)
    footer, extra = _settings_summary(preds)
    x_lo = min(float(p.x_test.min()) for p in preds)
    x_hi = max(float(p.x_test.max()) for p in preds)
    xx = np.linspace(x_lo, x_hi, 400)
    truth = xx * np.sin(xx)
    y_lo, y_hi = _regression_ylim(preds, truth, xx)
    span_lo, span_hi = _training_span(preds)
    reference = "HMC's" if any(p.is_hmc for p in preds) else "each panel's"
    footer += (f"\ny-axis: the data and {reference} mean $\\pm${_YLIM_SDS:g} sd over the training span "
               f"$x \\in [{span_lo:.1f}, {span_hi:.1f}]$ (both clusters and the gap); the bands beyond it, "
               "where the predictive extrapolates, are clipped")

    title_lines = 2 if any(extra) else 1
    footer_lines = footer.count("\n") + 1
    with figure_style():
        fig, axes, ncols, _, _, height = _panel_grid(
            len(preds), 3.0, 2.1 + 0.15 * (title_lines - 1), top_in=0.6 + 0.15 * title_lines,
            bottom_in=0.8 + 0.14 * footer_lines,
            left_in=0.55, right_in=0.15, wspace=0.12, hspace=0.3 + 0.1 * title_lines)
        for i, (ax, p) in enumerate(zip(axes, preds)):
            _draw_regression(ax, p, xx, truth)
            ax.set_xlim(x_lo, x_hi)
            ax.set_ylim(y_lo, y_hi)
            ax.set_title(_title(p, extra[i]), fontsize=10)
            _label_outer(ax, i, ncols, len(preds), "$x$", "$y$")
            sns.despine(ax=ax)
        _regression_legend(fig, (0.06 + 0.14 * footer_lines) / height)  # above the footer
        _finish_figure(fig, "1-D regression (paper Figure 1): predictive mean and $\\pm$1/2/3 sd of the predictive",
                       footer, height, out_png, out_pdf, len(preds))


def _draw_entropy(ax, p: ToyPredictions, vmax: float, class_colors: Sequence) -> Any:
    """One Figure 3 panel: the predictive entropy image and the training points by class."""
    import seaborn as sns

    xs, ys = _grid_axes(p.path, p.x_test)
    entropy = predictive_entropy(p.probs_test).reshape(len(ys), len(xs))
    dx, dy = (xs[1] - xs[0]) / 2, (ys[1] - ys[0]) / 2
    image = ax.imshow(entropy, origin="lower", extent=(xs[0] - dx, xs[-1] + dx, ys[0] - dy, ys[-1] + dy),
                      cmap=_ENTROPY_CMAP, vmin=0.0, vmax=vmax, interpolation="nearest", aspect="equal")
    sns.scatterplot(x=p.x_train[:, 0], y=p.x_train[:, 1], ax=ax, s=6,
                    c=[class_colors[int(c) % len(class_colors)] for c in p.y_train],
                    edgecolor="white", linewidth=0.25, zorder=3, legend=False)
    return image


def _entropy_colorbar(fig, image, num_classes: int, width: float, bottom: float, top: float) -> None:
    vmax = math.log(num_classes)
    cax = fig.add_axes((1 - 0.95 / width, bottom, 0.14 / width, top - bottom))
    bar = fig.colorbar(image, cax=cax)
    bar.set_label("predictive entropy (nats)", fontsize=9)
    ticks = [0.0, 0.5, 1.0, 1.5, vmax]
    bar.set_ticks([t for t in ticks if t <= vmax])
    bar.set_ticklabels([f"{t:g}" for t in ticks[:-1] if t <= vmax] + [f"log {num_classes}"], fontsize=8)
    bar.outline.set_visible(False)


def plot_classification_panels(inputs: Sequence[Path | str], out_png: Path | str, out_pdf: Path | str,
                               labels: Mapping[str, str] | None = None) -> None:
    """Draw Figure 3: predictive entropy of each input over the 2-D grid, one panel per input.

    Panels follow the input order in a grid of up to four columns, each titled
    with the file's label. The entropy (nats) is an image on one shared colour
    scale from 0 to ``log C`` (``log 5``) with one colorbar; the training points are
    overlaid (``sns.scatterplot``), coloured by class. Suptitle and footer as in
    :func:`plot_regression_panels`.

    Raises:
        ValueError: no inputs, an input is malformed or is not a classification file,
            or the inputs mix seeds/scales (messages name the files).
    """
    import seaborn as sns

    preds = _load_all(inputs, "classification", labels)
    footer, extra = _settings_summary(preds)
    num_classes = max(p.probs_test.shape[1] for p in preds)
    class_colors = sns.color_palette(_CLASS_PALETTE)

    title_lines = 2 if any(extra) else 1
    top_in, bottom_in = 0.6 + 0.15 * title_lines, 0.5
    with figure_style():
        fig, axes, ncols, _, width, height = _panel_grid(
            len(preds), 2.5, 2.5 + 0.15 * (title_lines - 1), top_in=top_in, bottom_in=bottom_in,
            left_in=0.5, right_in=1.1, wspace=0.1, hspace=0.1 + 0.1 * title_lines)
        image = None
        for i, (ax, p) in enumerate(zip(axes, preds)):
            image = _draw_entropy(ax, p, math.log(num_classes), class_colors)
            ax.set_title(_title(p, extra[i]), fontsize=10)
            _label_outer(ax, i, ncols, len(preds), None, None)
        _entropy_colorbar(fig, image, num_classes, width, bottom_in / height, 1 - top_in / height)
        _finish_figure(fig, "2-D classification (paper Figure 3): predictive entropy; dots: training points by class",
                       footer, height, out_png, out_pdf, len(preds))
