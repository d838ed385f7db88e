"""Each toy method's distance to HMC's predictive, and what Figures 1 and 3 draw.

A pipeline step (rules ``summarize_toy``, ``plot_toy_figure``) over
the prediction files ``results/toy/<dataset>/<method>/seed<seed>/predictions.npz`` written
by the training jobs and by the HMC job:

* every file: ``x_train`` (N, d), ``y_train`` (N,), ``x_test`` (T, d), ``job`` (0-d
  string array, the JSON job spec with ``dataset``, ``method``, ``seed``, ``scale``
  and ``particles``/``steps``, or an ``hmc`` dict for the HMC job) and ``label``
  (0-d string array, the display name);
* regression (d = 1): ``f_test`` (S, T), the function value of each particle or
  posterior sample at the test inputs, and ``noise_std`` (0-d). The predictive
  at x is the mixture ``(1/S) sum_s N(f_s(x), noise_std^2)``;
* classification (d = 2, test inputs a y-major square grid): ``probs_test``
  (T, C), the predictive class probabilities.

Commands (``python -m repens.summaries.toy ...``):

* ``distances --out results/toy/distances.json --regression-hmc ... --regression ...
  --classification-hmc ... --classification ...``: :func:`distance_summary`, each
  method's predictive against HMC's (Wasserstein-2 per region for regression, KL near/far
  from the data for classification), one row per method and seed, and what the table's
  caption says of the runs; :mod:`repens.report.toy` makes the table from it.
* ``figure-data --dataset regression --out <npz> <predictions.npz>...``:
  :func:`figure_data`, per panel the inputs, the data and the predictive's mean and sd
  (regression) or entropy (classification); :mod:`repens.report.toy_figures` draws it.

Distances are defined in :mod:`repens.evaluation.distances`.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from repens.core.atomic import save_npz_atomic, write_json_atomic
from repens.core.errors import DataError, DataFileError, one_line
from repens.core.results import ResultMismatch
from repens.data.toy import REGRESSION_CLUSTERS
from repens.evaluation.distances import categorical_kl, gaussian_w2, mixture_moments, predictive_entropy
from repens.results.files import read_npz
from repens.results.synthetic import LABELS
from repens.results.toy import CLASSIFICATION_COLUMNS, COLUMNS, DATASETS, NEAR_RADIUS, REGRESSION_COLUMNS, run_record
from repens.training.hmc import CONVERGED_ESS_MIN, CONVERGED_RHAT_MAX, HMCSettings

log = logging.getLogger("repens.summaries")

__all__ = [
    "ToyPredictions",
    "ToyInputs",
    "load_predictions",
    "regression_regions",
    "near_mask",
    "distance_frame",
    "distance_summary",
    "write_distance_summary",
    "figure_data",
    "write_figure_data",
    "main",
]

_COMMON_KEYS = ("x_train", "y_train", "x_test", "job", "label")
_DATASET_KEYS = {"regression": ("f_test", "noise_std"), "classification": ("probs_test",)}


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
    #: an HMC reference: converged at the paper-scale thresholds (repens.training.hmc.convergence);
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

    @property
    def members(self) -> int:
        """Number of stored functions (regression); 0 when the file does not tell (classification)."""
        return self.f_test.shape[0] if self.f_test is not None else 0

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
        raise DataFileError(
            path,
            "x_test is not a y-major grid (expected x_test.reshape(n, n, 2)[i, j] = (xs[j], ys[i]), both increasing)",
        )
    return xs, ys


def _checked_job(path: Path, arrays: Mapping[str, np.ndarray]) -> tuple[dict[str, Any], str]:
    """:func:`load_predictions`' job spec and dataset, the file's arrays checked for them."""
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
    return job, dataset


def _check_shapes(path: Path, dataset: str, x_train: np.ndarray, x_test: np.ndarray, y_train: np.ndarray) -> None:
    """:func:`load_predictions`' check of the training and test inputs' shapes."""
    d = 1 if dataset == "regression" else 2
    if x_train.ndim != 2 or x_train.shape[1] != d or x_train.shape[0] < 1:
        raise DataFileError(path, f"'x_train' must have shape (N, {d}), got {x_train.shape}")
    if y_train.shape != (x_train.shape[0],):
        raise DataFileError(path, f"'y_train' must have shape ({x_train.shape[0]},), got {y_train.shape}")
    if x_test.ndim != 2 or x_test.shape[1] != d or x_test.shape[0] < 2:
        raise DataFileError(path, f"'x_test' must have shape (T, {d}), got {x_test.shape}")


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
    job, dataset = _checked_job(path, arrays)

    method = job.get("method") or ("hmc" if "hmc" in job else path.parent.parent.name)
    label = str(arrays["label"][()]) or LABELS.get(method, method)
    x_train = np.asarray(arrays["x_train"], dtype=np.float64)
    x_test = np.asarray(arrays["x_test"], dtype=np.float64)
    y_train = np.asarray(arrays["y_train"])
    _check_shapes(path, dataset, x_train, x_test, y_train)
    fields = (_regression_fields if dataset == "regression" else _classification_fields)(path, arrays, x_test, y_train)
    for name, value in fields.items():  # a prediction that is not a number never reaches a table
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and not np.isfinite(value).all():
            raise ResultMismatch(path, f"{name!r} holds a non-finite number; a result must not reach a table with it")
    converged = None
    if "converged" in arrays:
        converged = bool(np.asarray(arrays["converged"]))
    elif method == "hmc":
        converged = _converged_by_job(job)
    return ToyPredictions(
        path=path,
        dataset=dataset,
        method=str(method),
        label=label,
        job=job,
        x_train=x_train,
        x_test=x_test,
        converged=converged,
        **fields,
    )


def _regression_fields(
    path: Path, arrays: Mapping[str, np.ndarray], x_test: np.ndarray, y_train: np.ndarray
) -> dict[str, Any]:
    """``f_test``, ``noise_std`` and the float targets of a regression file, checked."""
    t = x_test.shape[0]
    f_test = np.asarray(arrays["f_test"], dtype=np.float64)
    if f_test.ndim != 2 or f_test.shape[1] != t or f_test.shape[0] < 1:
        raise DataFileError(path, f"'f_test' must have shape (S, {t}), got {f_test.shape}")
    noise = np.asarray(arrays["noise_std"], dtype=np.float64)
    if noise.shape != () or not noise >= 0:
        raise DataFileError(path, f"'noise_std' must be a non-negative scalar, got {noise!r}")
    return {"f_test": f_test, "noise_std": float(noise), "y_train": y_train.astype(np.float64)}


def _classification_fields(
    path: Path, arrays: Mapping[str, np.ndarray], x_test: np.ndarray, y_train: np.ndarray
) -> dict[str, Any]:
    """``probs_test`` and the integer labels of a classification file, checked (and its grid)."""
    t = x_test.shape[0]
    probs = np.asarray(arrays["probs_test"], dtype=np.float64)
    if probs.ndim != 2 or probs.shape[0] != t or probs.shape[1] < 2:
        raise DataFileError(path, f"'probs_test' must have shape ({t}, C >= 2), got {probs.shape}")
    if np.any(probs < 0) or not np.allclose(probs.sum(axis=1), 1.0, atol=1e-3):
        raise DataFileError(path, "'probs_test' rows are not probability vectors")
    labels = y_train.astype(np.int64)
    if not np.array_equal(labels, y_train) or labels.min() < 0 or labels.max() >= probs.shape[1]:
        raise DataFileError(path, f"'y_train' must hold integer labels in [0, {probs.shape[1]})")
    _grid_axes(path, x_test)
    return {"probs_test": probs, "y_train": labels}


def _converged_by_job(job: Mapping[str, Any]) -> bool:
    """An HMC file written before it recorded ``converged``: its predictions exist only if
    the job's own check passed, so it is converged when that check was at least as strict
    as the paper-scale thresholds (:data:`repens.training.hmc.CONVERGED_RHAT_MAX`, ``_ESS_MIN``)."""
    try:
        settings = HMCSettings.from_dict(job.get("hmc"))
    except (TypeError, ValueError):
        return False
    return settings.rhat_max <= CONVERGED_RHAT_MAX and settings.ess_min >= CONVERGED_ESS_MIN


def _load_all(
    inputs: Sequence[Path | str], dataset: str | None, labels: Mapping[str, str] | None = None
) -> list[ToyPredictions]:
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


# --------------------------------------------------------------------------- distances


def _check_reference(hmc: ToyPredictions, methods: Sequence[ToyPredictions], dataset: str) -> None:
    if not hmc.is_hmc:
        raise ValueError(f"{hmc.path}: passed as the HMC reference for {dataset}, but it is a {hmc.method!r} run")
    seen: dict[str, Path] = {}
    for m in methods:
        if m.method in seen:
            raise ValueError(f"{m.path}: method {m.method!r} appears twice for {dataset} (also {seen[m.method]})")
        seen[m.method] = m.path
        for name in ("x_test", "x_train"):
            a, b = getattr(hmc, name), getattr(m, name)
            if a.shape != b.shape or not np.allclose(a, b, atol=1e-5):
                raise ValueError(
                    f"{m.path}: {name} differs from the HMC reference {hmc.path} "
                    f"(shapes {b.shape} vs {a.shape}); the files are not for the same data"
                )


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
            "gap_sd": gap_sd,
            "hmc_gap_sd": h_gap_sd,
            "gap_sd_ratio": gap_sd / h_gap_sd if h_gap_sd > 0 else float("nan"),
            "gap_sd_epistemic": gap_sd_f,
            "hmc_gap_sd_epistemic": h_gap_sd_f,
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
            raise ValueError(
                f"{m.path}: probs_test has shape {m.probs_test.shape}, "
                f"the HMC reference {hmc.path} has {hmc.probs_test.shape}"
            )
        kl = categorical_kl(hmc.probs_test, m.probs_test)
        entropy = predictive_entropy(m.probs_test)
        rows[m.method] = {
            "kl_near": _masked_mean(kl, near, "near"),
            "kl_far": _masked_mean(kl, far, "far"),
            "entropy_near": _masked_mean(entropy, near, "near"),
            "entropy_far": _masked_mean(entropy, far, "far"),
            "hmc_entropy_near": _masked_mean(h_entropy, near, "near"),
            "hmc_entropy_far": _masked_mean(h_entropy, far, "far"),
            "classification_source": str(m.path),
        }
    return rows


#: ``(hmc_paths, method_paths)`` of one dataset: the HMC reference of every seed (or one
#: path) and the methods' files of those seeds; each method file is compared with the
#: reference of its own seed (the data are drawn per seed).
ToyInputs = tuple["Path | str | Sequence[Path | str]", "Sequence[Path | str]"]


def _load_pair(
    pair: ToyInputs | None, dataset: str, labels: Mapping[str, str] | None = None
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
            raise ValueError(
                f"{hmc.path}: a second HMC reference for {dataset} seed {hmc.seed} (also {by_seed[hmc.seed][0].path})"
            )
        by_seed[hmc.seed] = (hmc, [])
    for m in methods:
        if m.seed not in by_seed:
            raise ValueError(
                f"{m.path}: seed {m.seed} has no HMC reference for {dataset} "
                f"(references: {', '.join(f'{h.path} (seed {h.seed})' for h in references)})"
            )
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


def _distance_data(
    regression: ToyInputs | None, classification: ToyInputs | None, labels: Mapping[str, str] | None = None
):
    """The tidy distance frame (one row per method and seed) and, per dataset present,
    ``{seed: (hmc, methods)}``."""
    import pandas as pd

    if regression is None and classification is None:
        raise ValueError("write_distance_table needs the regression or the classification inputs (both are None)")
    loaded = {
        "regression": _load_pair(regression, "regression", labels),
        "classification": _load_pair(classification, "classification", labels),
    }
    present = {k: v for k, v in loaded.items() if v is not None}
    _check_same_scale([p for by_seed in present.values() for hmc, methods in by_seed.values() for p in (hmc, *methods)])

    rows: dict[tuple[str, Any], dict[str, Any]] = {}  # (method, seed) -> row; methods in input order
    order: dict[str, int] = {}
    seeds: dict[Any, int] = {}
    for by_seed in present.values():
        for seed, (_, methods) in by_seed.items():
            seeds.setdefault(seed, len(seeds))
            for m in methods:
                order.setdefault(m.method, len(order))
                rows.setdefault(
                    (m.method, seed), {"method": m.method, "label": m.label, "seed": seed, "scale": m.scale}
                )
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
    """The distance-to-HMC table as a pandas DataFrame (see :func:`repens.report.toy.write_distance_table`)."""
    return _distance_data(regression, classification)[0]


# --------------------------------------------------------------------------- the distance file


def _json_value(value: Any) -> Any:
    """A frame cell as JSON: pandas' missing value as None, numpy scalars as Python's."""
    import pandas as pd

    if value is None or value is pd.NA:
        return None
    return value.item() if isinstance(value, np.generic) else value


def _frame_rows(frame) -> list[dict[str, Any]]:
    return [{key: _json_value(value) for key, value in row.items()} for row in frame.to_dict("records")]


def _dataset_record(dataset: str, by_seed: Mapping[Any, tuple[ToyPredictions, list[ToyPredictions]]]) -> dict[str, Any]:
    """Per seed, the HMC reference and the methods (what the caption says of them)."""
    record: dict[str, Any] = {
        "groups": [
            {"seed": seed, "hmc": run_record(hmc), "methods": [run_record(m) for m in ms]}
            for seed, (hmc, ms) in by_seed.items()
        ]
    }
    if dataset == "classification":
        hmc = next(iter(by_seed.values()))[0]
        record.update(n_grid=math.isqrt(hmc.x_test.shape[0]), n_classes=int(hmc.probs_test.shape[1]))
    return record


def distance_summary(regression: ToyInputs | None, classification: ToyInputs | None) -> dict[str, Any]:
    """What the distance-to-HMC table shows, as a JSON-ready dict: ``rows`` (one per method
    and seed, the columns of :data:`repens.report.toy.COLUMNS`, labels as the files store
    them), ``datasets`` (per dataset present, per seed: the HMC reference and the methods,
    :func:`repens.report.toy.run_record`; classification: the grid side and the number of
    classes) and the HMC convergence thresholds of the paper scale.

    Raises:
        ValueError: see :func:`repens.report.toy.write_distance_table`.
    """
    frame, present = _distance_data(regression, classification)
    return {
        "rows": _frame_rows(frame),
        "datasets": {dataset: _dataset_record(dataset, by_seed) for dataset, by_seed in present.items()},
        "converged_rhat_max": CONVERGED_RHAT_MAX,
        "converged_ess_min": CONVERGED_ESS_MIN,
    }


def write_distance_summary(
    regression: ToyInputs | None, classification: ToyInputs | None, out: Path | str
) -> dict[str, Any]:
    """:func:`distance_summary` written to ``out`` (JSON; floats round-trip exactly)."""
    summary = distance_summary(regression, classification)
    write_json_atomic(out, summary, indent=1)
    log.info("wrote %s (%d rows)", out, len(summary["rows"]))
    return summary


# --------------------------------------------------------------------------- the figure file


def _panel_arrays(p: ToyPredictions) -> dict[str, np.ndarray]:
    arrays = {"x_test": p.x_test, "x_train": p.x_train, "y_train": p.y_train}
    if p.dataset == "regression":
        mean, sd = p.predictive()
        arrays.update(mean=mean, sd=sd)
    else:
        xs, ys = _grid_axes(p.path, p.x_test)
        arrays.update(
            xs=xs,
            ys=ys,
            entropy=predictive_entropy(p.probs_test).reshape(len(ys), len(xs)),
            num_classes=np.array(p.probs_test.shape[1]),
        )
    return arrays


def figure_data(dataset: str, inputs: Sequence[Path | str]) -> dict[str, np.ndarray]:
    """What Figure 1 (``regression``) or Figure 3 (``classification``) draws, one panel per
    input in input order: ``panels`` (0-d string, the JSON list of
    :func:`repens.report.toy.run_record` of each input) and per panel ``i``:
    ``<i>/x_test``, ``<i>/x_train``, ``<i>/y_train`` and the predictive's ``<i>/mean`` and
    ``<i>/sd`` (with the noise; regression) or its entropy ``<i>/entropy`` on the grid
    (rows: ``<i>/ys``, columns: ``<i>/xs``) and ``<i>/num_classes`` (classification).

    Raises:
        ValueError: no inputs, an input is malformed or for the other dataset, or the
            inputs mix seeds/scales (messages name the files).
    """
    preds = _load_all(inputs, dataset)
    out: dict[str, np.ndarray] = {
        "dataset": np.array(dataset),
        "panels": np.array(json.dumps([run_record(p) for p in preds])),
    }
    for i, p in enumerate(preds):
        out.update({f"{i}/{key}": value for key, value in _panel_arrays(p).items()})
    return out


def write_figure_data(dataset: str, inputs: Sequence[Path | str], out: Path | str) -> None:
    """:func:`figure_data` written to ``out`` (``.npz``)."""
    save_npz_atomic(out, **figure_data(dataset, inputs))
    log.info("wrote %s", out)


# --------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repens.summaries.toy", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dist = sub.add_parser("distances", help="each method's distance to HMC's predictive (JSON)")
    dist.add_argument("--out", required=True)
    for name in ("regression-hmc", "regression", "classification-hmc", "classification"):
        dist.add_argument(f"--{name}", nargs="*")
    figure = sub.add_parser("figure-data", help="per panel the predictive's moments or entropy (npz)")
    figure.add_argument("--dataset", required=True, choices=DATASETS)
    figure.add_argument("--out", required=True)
    figure.add_argument("inputs", nargs="+")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "figure-data":
        write_figure_data(args.dataset, args.inputs, args.out)
        return 0

    def pair(hmc: list[str] | None, methods: list[str] | None):
        return None if not hmc else ([Path(h) for h in hmc], [Path(m) for m in methods or []])

    write_distance_summary(
        pair(args.regression_hmc, args.regression), pair(args.classification_hmc, args.classification), args.out
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DataError as err:  # a malformed or missing result file: one line naming it
        print(f"error: {one_line(err)}", file=sys.stderr)
        sys.exit(2)
