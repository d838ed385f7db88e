"""Sample quality of the synthetic runs, and what Figures 2 and F.1 draw besides the particles.

A pipeline step (rules ``summarize_synthetic``, ``plot_synthetic_figure``):

* ``python -m repens.summaries.synthetic metrics --out results/synthetic/sample_quality.json
  <particles.npz>...``: per run, the metrics of :func:`compute_metrics`; per target and
  particle count, the exact-i.i.d. noise floor (:func:`iid_baseline`: means, their
  standard deviations over the draws and the number of draws); the targets' exact
  moments. :mod:`repens.report.synthetic` makes the metrics table from it and the claim
  scorecard reads the noise floor's spread from it.
* ``python -m repens.summaries.synthetic figure-data --target gaussian --out <npz>
  <particles.npz>...``: exact target samples (the red marginals), the view window shared
  by the panels and the target's log density on it with its contour levels.

Everything random (the exact reference samples, the i.i.d. baseline draws) uses fixed
``torch.Generator`` seeds, so the files are reproducible. Metric definitions are
documented in :mod:`repens.evaluation.metrics`.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from repens.core.atomic import save_npz_atomic, write_json_atomic
from repens.core.errors import DataError, one_line
from repens.core.results import ResultMismatch
from repens.evaluation.metrics import as_array, covariance_relative_errors, mean_error, mean_pairwise_distance
from repens.models.targets import make_target
from repens.results.synthetic import METRIC_KEYS, Run, load_run

log = logging.getLogger("repens.summaries")

__all__ = [
    "IID_REPEATS",
    "REFERENCE_SEED",
    "REFERENCE_SAMPLES",
    "compute_metrics",
    "iid_baseline",
    "exact_samples",
    "metrics_summary",
    "write_metrics_summary",
    "figure_data",
    "write_figure_data",
    "main",
]

#: Number of independent exact i.i.d. draws averaged in the baseline row.
IID_REPEATS = 10
#: Seed of the exact reference samples (energy distance, red marginal KDEs).
REFERENCE_SEED = 0
REFERENCE_SAMPLES = 20000

#: Contour levels as drops below the maximum log density: 0.5 r^2 for r = 0.5, 1, ..., 4.5
#: (for a Gaussian these are the Mahalanobis-radius-r ellipses; for the funnel they
#: trace the neck and the mouth down to ~10 nats below the mode).
LOG_DENSITY_DROPS = tuple(0.5 * r**2 for r in np.arange(0.5, 4.51, 0.5))
#: Points per axis of the log-density grid.
GRID_POINTS = 300


# --------------------------------------------------------------------------- metrics


@functools.lru_cache(maxsize=8)
def _reference(target_name: str, reference_samples: int, seed: int) -> tuple[np.ndarray, float]:
    """Exact target samples (fixed seed) and their mean pairwise distance, cached."""
    target = make_target(target_name)
    samples = target.sample(int(reference_samples), torch.Generator().manual_seed(int(seed))).numpy()
    samples.setflags(write=False)
    return samples, mean_pairwise_distance(samples)


def exact_samples(target_name: str, reference_samples: int | None = None, seed: int | None = None) -> np.ndarray:
    """The exact reference samples of a target (read-only; :data:`REFERENCE_SAMPLES`,
    :data:`REFERENCE_SEED` by default)."""
    reference_samples = REFERENCE_SAMPLES if reference_samples is None else reference_samples
    seed = REFERENCE_SEED if seed is None else seed
    return _reference(target_name, int(reference_samples), int(seed))[0]


def _point_metrics(x: np.ndarray, target_name: str, reference_samples: int, seed: int) -> dict[str, Any]:
    """The metrics of one sample set (no baseline)."""
    target = make_target(target_name)
    mean, cov = (t.numpy() for t in target.moments())
    nan = float("nan")
    xy_kind = "relative" if cov[0, 1] != 0 else "absolute"
    out: dict[str, Any] = {"n": int(x.shape[0]), "cov_xy_err_kind": xy_kind}
    if not np.all(np.isfinite(x)):
        log.warning("non-finite particles for target %s; metrics are NaN", target_name)
        out.update({key: nan for key in METRIC_KEYS})
        return out
    errors = covariance_relative_errors(x, cov)  # ddof=0: covariance of the particle measure
    reference, ref_self = _reference(target_name, reference_samples, seed)
    energy = 2.0 * mean_pairwise_distance(x, reference) - mean_pairwise_distance(x) - ref_self
    out.update(
        {
            "mean_error": mean_error(x, mean),
            "cov_rel_err_xx": float(errors[0, 0]),
            "cov_xy_err": float(errors[0, 1]),
            "cov_rel_err_yy": float(errors[1, 1]),
            # relative errors only: entries whose exact value is 0 have no relative error
            "max_cov_rel_err": float(errors[cov != 0].max()),
            "energy_distance": max(float(energy), 0.0),
        }
    )
    return out


@functools.lru_cache(maxsize=32)
def _iid_baseline_cached(
    target_name: str, n: int, reference_samples: int, seed: int, repeats: int
) -> tuple[tuple[str, Any], ...]:
    target = make_target(target_name)
    # seed + 1: the baseline draws must be independent of the reference samples
    generator = torch.Generator().manual_seed(int(seed) + 1)
    draws = [
        _point_metrics(target.sample(n, generator).numpy(), target_name, reference_samples, seed)
        for _ in range(repeats)
    ]
    out: dict[str, Any] = {"n": n, "cov_xy_err_kind": draws[0]["cov_xy_err_kind"], "repeats": repeats}
    for key in METRIC_KEYS:
        out[key] = float(np.mean([d[key] for d in draws]))
        out[key + "_sd"] = float(np.std([d[key] for d in draws], ddof=1)) if repeats > 1 else 0.0
    return tuple(out.items())


def iid_baseline(
    target_name: str, n: int, reference_samples: int | None = None, seed: int | None = None, repeats: int | None = None
) -> dict[str, Any]:
    """Noise floor: the metrics of ``n`` exact i.i.d. target samples, averaged over draws.

    Args:
        target_name: ``"gaussian"`` or ``"funnel"``.
        n: Sample size (the number of particles being compared).
        reference_samples: Size of the exact reference set for the energy distance
            (default :data:`REFERENCE_SAMPLES`).
        seed: Seed of the reference set (default :data:`REFERENCE_SEED`); the i.i.d.
            draws use ``seed + 1``.
        repeats: Number of independent draws of ``n`` samples averaged (default
            :data:`IID_REPEATS`).

    Returns:
        Dict with the same metric keys as :func:`compute_metrics` (means over the
        draws), their standard deviations under ``<key>_sd``, ``n`` and ``repeats``.
    """
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    reference_samples = REFERENCE_SAMPLES if reference_samples is None else reference_samples
    seed = REFERENCE_SEED if seed is None else seed
    repeats = IID_REPEATS if repeats is None else repeats
    return dict(_iid_baseline_cached(target_name, int(n), int(reference_samples), int(seed), int(repeats)))


def compute_metrics(
    particles: Any,
    target_name: str,
    reference_samples: int = REFERENCE_SAMPLES,
    seed: int = REFERENCE_SEED,
    baseline: bool = True,
) -> dict[str, Any]:
    """Sample-quality metrics of a particle set against the exact target.

    Metrics (see :mod:`repens.evaluation.metrics` for the estimators):

    * ``mean_error``: ``||mean(particles) - E[target]||_2``.
    * ``cov_rel_err_xx`` / ``cov_rel_err_yy``: ``|hat S_ii - S_ii| / |S_ii|`` with
      ``hat S`` the population covariance (ddof=0) of the particles.
    * ``cov_xy_err``: relative error of the off-diagonal entry when its exact value
      is nonzero (Gaussian), absolute error when it is 0 (funnel);
      ``cov_xy_err_kind`` says which.
    * ``max_cov_rel_err``: the largest relative error over entries with nonzero
      exact value.
    * ``energy_distance``: Szekely's ``2E||X-Y|| - E||X-X'|| - E||Y-Y'||`` between
      the particle measure and ``reference_samples`` exact samples drawn with
      ``torch.Generator().manual_seed(seed)`` (V-statistic).

    Args:
        particles: (n, 2) particles (numpy array or torch tensor).
        target_name: ``"gaussian"`` or ``"funnel"``.
        reference_samples: Number of exact reference samples.
        seed: Seed of the reference samples.
        baseline: Also compute the exact-i.i.d. noise floor (:func:`iid_baseline`
            for the same ``n``; cached) under the key ``"iid_baseline"``.

    Returns:
        Dict of the metrics above plus ``n`` (and ``iid_baseline`` if requested).
        Non-finite particles give NaN metrics.
    """
    x = as_array(particles)
    if x.ndim != 2 or x.shape[1] != 2 or x.shape[0] < 2:
        raise ValueError(f"particles must have shape (n >= 2, 2), got {x.shape}")
    out = _point_metrics(x, target_name, int(reference_samples), int(seed))
    if baseline:
        out["iid_baseline"] = iid_baseline(target_name, x.shape[0], reference_samples, seed)
    return out


# --------------------------------------------------------------------------- the metrics file


def _by_target(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """The runs grouped by target (first appearance order); a run given twice, or with a
    non-finite particle, is an error naming the file."""
    seen: dict[tuple, Path] = {}
    by_target: dict[str, list[Run]] = {}
    for run in runs:
        key = (run.target, run.method, run.job.seed, run.scale, run.particles.shape[0], run.job.steps)
        if key in seen:
            raise ValueError(
                f"{run.path}: duplicate run (target, method, seed, scale, n, steps) = {key}, also in {seen[key]}"
            )
        seen[key] = run.path
        if not np.isfinite(run.particles).all():  # NaN metrics never reach the table
            raise ResultMismatch(
                run.path, "particles hold a non-finite number; a result must not reach a table with it"
            )
        by_target.setdefault(run.target, []).append(run)
    return by_target


def _run_row(run: Run, reference_samples: int, seed: int) -> dict[str, Any]:
    metrics = compute_metrics(run.particles, run.target, reference_samples, seed, baseline=False)
    return {
        "target": run.target,
        "method": run.method,
        "job_label": run.job.label,
        "seed": run.job.seed,
        "scale": run.scale,
        "n": metrics["n"],
        "steps": run.job.steps,
        **{key: metrics[key] for key in METRIC_KEYS},
        "cov_xy_err_kind": metrics["cov_xy_err_kind"],
        "source": run.path.name,
    }


def _iid_rows(target_name: str, runs: Sequence[Run], reference_samples: int, seed: int) -> list[dict[str, Any]]:
    scales = "+".join(sorted({run.scale for run in runs}))
    rows = []
    for n in sorted({run.particles.shape[0] for run in runs}):
        base = iid_baseline(target_name, n, reference_samples, seed)
        rows.append(
            {
                "target": target_name,
                "method": "iid",
                "seed": None,
                "scale": scales,
                "n": n,
                "steps": None,
                **{key: base[key] for key in METRIC_KEYS},
                "cov_xy_err_kind": base["cov_xy_err_kind"],
                "repeats": base["repeats"],
                **{f"{key}_sd": base[f"{key}_sd"] for key in METRIC_KEYS},
            }
        )
    return rows


def metrics_summary(
    inputs: Iterable[Path | str], reference_samples: int | None = None, seed: int | None = None
) -> dict[str, Any]:
    """What the metrics table shows, as a JSON-ready dict.

    ``rows``: per target (in input order), one row per run (input order; its metrics,
    ``job_label`` the label stored in the file or None, ``source`` the file name), then
    one ``method = "iid"`` row per particle count (the :func:`iid_baseline` means, their
    ``<metric>_sd`` and ``repeats``). ``targets``: each target's exact mean and
    covariance. Also the reference set's size and seed and :data:`IID_REPEATS`.

    Raises:
        ValueError: no inputs, an input is malformed, or two inputs are the same run.
    """
    reference_samples = REFERENCE_SAMPLES if reference_samples is None else int(reference_samples)
    seed = REFERENCE_SEED if seed is None else int(seed)
    runs = [load_run(p) for p in inputs]
    if not runs:
        raise ValueError("no input files")
    rows: list[dict[str, Any]] = []
    targets: dict[str, Any] = {}
    for target_name, target_runs in _by_target(runs).items():
        rows += [_run_row(run, reference_samples, seed) for run in target_runs]
        rows += _iid_rows(target_name, target_runs, reference_samples, seed)
        mean, cov = (t.numpy() for t in make_target(target_name).moments())
        targets[target_name] = {"mean": [float(v) for v in mean], "cov": [[float(v) for v in r] for r in cov]}
    return {
        "reference_samples": reference_samples,
        "reference_seed": seed,
        "iid_repeats": IID_REPEATS,
        "targets": targets,
        "rows": rows,
    }


def write_metrics_summary(inputs: Iterable[Path | str], out: Path | str) -> dict[str, Any]:
    """:func:`metrics_summary` written to ``out`` (JSON; floats round-trip exactly)."""
    summary = metrics_summary(inputs)
    write_json_atomic(out, summary, indent=1)
    log.info("wrote %s (%d rows)", out, len(summary["rows"]))
    return summary


# --------------------------------------------------------------------------- the figure file


def _view_window(exact: np.ndarray, particle_sets: Sequence[np.ndarray]) -> list[tuple[float, float]]:
    """Axis limits per coordinate: the exact samples' central 95% and the particles' extent.

    The particles' 0.5%/99.5% quantiles count, but only up to the exact 0.1%/99.9%
    interval widened by half its width, so that a few diverged particles do not
    squash the plot (they are counted in the panel instead).
    """
    pooled = np.concatenate([p[np.all(np.isfinite(p), axis=1)] for p in particle_sets])
    limits = []
    for d in range(exact.shape[1]):
        lo, hi = np.quantile(exact[:, d], [0.025, 0.975])
        cap_lo, cap_hi = np.quantile(exact[:, d], [0.001, 0.999])
        width = cap_hi - cap_lo
        cap_lo, cap_hi = cap_lo - 0.5 * width, cap_hi + 0.5 * width
        if pooled.size:
            plo, phi = np.quantile(pooled[:, d], [0.005, 0.995])
            lo, hi = min(lo, max(plo, cap_lo)), max(hi, min(phi, cap_hi))
        pad = 0.05 * (hi - lo)
        limits.append((float(lo - pad), float(hi + pad)))
    return limits


def _log_density_grid(
    target: str, window: Sequence[tuple[float, float]], points: int = GRID_POINTS
) -> dict[str, np.ndarray]:
    (x_lo, x_hi), (y_lo, y_hi) = window
    mesh_x, mesh_y = np.meshgrid(np.linspace(x_lo, x_hi, points), np.linspace(y_lo, y_hi, points))
    grid = torch.from_numpy(np.stack([mesh_x.ravel(), mesh_y.ravel()], axis=1))
    with torch.no_grad():
        logp = make_target(target).log_prob(grid).numpy().reshape(mesh_x.shape)
    levels = sorted(float(logp.max()) - drop for drop in LOG_DENSITY_DROPS)
    return {"mesh_x": mesh_x, "mesh_y": mesh_y, "logp": logp, "levels": np.asarray(levels, dtype=np.float64)}


def figure_data(target: str, inputs: Sequence[Path | str]) -> dict[str, np.ndarray]:
    """What a synthetic figure draws besides the particles: ``exact`` (the exact reference
    samples), ``window`` (2, 2: the shared x and y limits), the log-density grid
    (``mesh_x``, ``mesh_y``, ``logp``) and its contour ``levels``, and ``sources`` (the
    input paths, in panel order).

    Raises:
        ValueError: no inputs, an input is malformed or belongs to another target.
    """
    runs = [load_run(p) for p in inputs]
    if not runs:
        raise ValueError("no input files")
    for run in runs:
        if run.target != target:
            raise ValueError(f"{run.path}: a run on target {run.target!r}, but the figure is for {target!r}")
    exact = exact_samples(target)
    window = _view_window(exact, [r.particles for r in runs])
    return {
        "target": np.array(target),
        "exact": np.asarray(exact),
        "window": np.asarray(window, dtype=np.float64),
        **_log_density_grid(target, window),
        "sources": np.array([str(r.path) for r in runs]),
    }


def write_figure_data(target: str, inputs: Sequence[Path | str], out: Path | str) -> None:
    """:func:`figure_data` written to ``out`` (``.npz``)."""
    save_npz_atomic(out, **figure_data(target, inputs))
    log.info("wrote %s", out)


# --------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repens.summaries.synthetic", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    metrics = sub.add_parser("metrics", help="sample quality of each run and the exact-iid noise floor (JSON)")
    metrics.add_argument("--out", required=True)
    metrics.add_argument("inputs", nargs="+")
    figure = sub.add_parser("figure-data", help="exact samples, view window and log-density grid (npz)")
    figure.add_argument("--target", required=True)
    figure.add_argument("--out", required=True)
    figure.add_argument("inputs", nargs="+")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "metrics":
        write_metrics_summary(args.inputs, args.out)
    else:
        write_figure_data(args.target, args.inputs, args.out)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DataError as err:  # a malformed or missing result file: one line naming it
        print(f"error: {one_line(err)}", file=sys.stderr)
        sys.exit(2)
