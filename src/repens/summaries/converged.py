"""Did a finished run converge? Verdicts read from what its result files record.

A comparison that rests on an unconverged run says nothing about the methods: the
claim scorecard (:mod:`repens.report.claims`) marks it *inconclusive (not converged)*.
This module gives one verdict per run, from its files only (pure functions: they read
files and compute, they write nothing and train nothing):

* :func:`check_image_run` -- a Table 1 run, ``results/image/<ds>/<method>/seed<N>/metrics.json``;
* :func:`check_uci_run` -- a Table 2 run, ``results/uci/<ds>/<method>/seed<N>/metrics.json``;
* :func:`check_synthetic_run` -- a 2-D synthetic-target run (its log's ``log_p``);
* :func:`check_toy_run` -- a toy run (``results/toy/<ds>/<method>/seed<N>``): its
  particles' ``train_nll`` history and the HMC reference it is scored against;
* :func:`check_hmc_reference` -- an HMC reference (toy runs are scored against it),
  delegated to :func:`repens.training.hmc.convergence` (R-hat / ESS at the paper-scale
  thresholds), never recomputed here;
* :func:`check_run` dispatches on the path, :func:`check_tree` walks a results tree.

Each returns a :class:`Verdict`: ``converged`` True / False / None (unknown: the files
lack what the check needs -- never a guess), a one-line ``reason`` with the numbers, and
the files it read.

**Where the training history is.** Today's ``metrics.json`` records no training
history: the only history is the training log (``provenance.log`` in ``metrics.json``,
e.g. ``logs/image/fashionmnist/fsvgd/seed38.log``), whose ``repens.train`` lines read
``step k/K  ... name=value ...`` every ``log_every`` steps. The checks prefer a
``history`` list in ``metrics.json`` (``[{"step": k, "total": K, name: value, ...}]``,
see :func:`history_from_metrics`) and fall back to parsing the log, naming it in the
reason. A log that was resumed from a checkpoint holds only the steps after the resume
(the earlier lines went to the previous attempt's log); the checks need only the last
20 % of training, which a resumed log still holds.

**Stability** (:func:`stability`). On the logged points in the last
:data:`WINDOW_FRACTION` (20 %) of the run's steps (at least :data:`MIN_WINDOW_POINTS`):

* the *drift* ``D`` = least-squares slope x the window's length (0.2 K steps): how much
  the series moved over the last fifth of training;
* the *noise* ``sigma``: the sd of one logged value about the smooth trend over the
  last half of the log (residual sd about a least-squares quadratic, so that neither a
  steady trend nor a settling curve's bend counts as noise; at least the rounding error
  of the log's 4 significant digits), and the drift's standard error
  ``se(D) = sigma x 0.2K / sqrt(sum (s - s_mean)^2)``;
* *still moving*: ``|D| > t se(D)`` (the drift is resolved from the noise: t is Student's
  0.975 quantile at the noise estimate's degrees of freedom, 2.36 at the image runs' 7,
  a two-sided 5 % test as the scorecard's intervals; on settled white-noise series of
  the image runs' 20 logged points it calls 3.4 % moving, where a fixed 2 s.e. called
  7.9 %: ``tests/test_convergence.py``) **and** ``|D| > REL_TOL x level`` (it is large
  enough to matter);
* *late degradation* (a series that should fall): its fitted value at the last step
  exceeds the smallest value logged by more than ``K_SE sigma sqrt 2`` (two noisy values'
  difference) and more than ``REL_TOL x`` that minimum.

**REL_TOL = 1 %** of the series' level per last fifth of training, derived from the
scorecard's resolution: an ordering is called only when two means differ by more than
``2 (se_a + se_b)``, i.e. at least 4 s.e.; the smallest relative s.e. of a compared
mean among the committed reference runs is 0.5 % (UCI kin8nm test RMSE over 20 splits,
``rmse_se / rmse_mean`` = 0.50-0.60 %; boston's are 6-7 %), so the finest difference the
scorecard can call is about 2 %. A run whose monitored figure still moves by at most
half of that over its last fifth cannot turn a verdict by itself (a geometrically
settling curve moves less in the rest of its life than in that last fifth whenever it
halves per fifth or faster). It is a relative tolerance, so it applies to every
series' own scale; pass ``rel_tol`` to tighten it for a finer comparison. UCI runs take
the same rule per dataset (:func:`uci_rel_tol`: ``2 min(rmse_se / rmse_mean)`` over the
runs recorded for the dataset: boston 8.8 %, concrete 4.2 %, energy 4.0 %, kin8nm 1.0 %
on the reference runs); image runs (one seed each, no s.e. recorded) and toy runs keep
the global 1 %. Caveat: for UCI the drift is that of the *training* RMSE (the only
logged history), applied as if it passed on in full to the test RMSE the scorecard
compares -- conservative, as the training fit usually moves more than the test error.

**Image runs** (:func:`check_image_run`): stability of ``monitor_nll`` and
``monitor_acc`` (NLL / accuracy of the ensemble on 1000 fixed held-out test images:
the logged proxies of the reported test metrics), and no late degradation of
``train_nll`` (ensemble NLL on 1000 fixed training images: the objective's data term).
A held-out NLL that rose off an earlier minimum but is flat over the last fifth is
over-fitting at a settled state, reported (``(info)``) but not failing. A training NLL
that keeps falling slowly at a constant learning rate is the network fitting its training
set further, not an unconverged comparison, so its drift is reported but does not fail
the run; a *rising* training NLL is the sampler losing its own fit (e.g. f-SVGD at paper
scale: 0.16 at step 27,500, 0.61 at 50,000) and fails it.

**Table rows** (:func:`row_verdict`, the verdict the scorecard reads). The scorecard
compares a row's mean over seeds, so an image row's ``monitor_nll`` / ``monitor_acc``
drift is judged on the row's mean (:func:`pooled_stability`: the mean of the runs'
drifts against its pooled s.e., each series at 2.5 %), while a late degradation in any
one run still fails the row. Judged run by run, a row of n settled runs is called
unconverged whenever one of its 2n tests fires by chance: on simulated settled rows 19 %
at n = 3 and 31 % at n = 5 with the calibrated per-run test (about 40 % and 55 % with a
fixed 2 s.e.), against 4.3 % and 4.2 % pooled. A UCI row is one run (the 20 splits of
seed 42), judged as such; other rows fail if any run does.

**UCI runs** (:func:`check_uci_run`): the log records one series per stack of splits,
``train_rmse_std_units_mean`` (RMSE of the ensemble mean on the training rows, in
standardized units, averaged over the stack's splits): per-split histories are *not*
recorded. Checked: its stability and no late degradation, per stack (every stack must
pass; a Langevin rule, a sampler, gets no degradation test: its fit is not maximised, and
its training RMSE rising from a deep-ensemble start as its particles spread is the
sampling), and *fit quality*: the final training RMSE ``r`` against the reference fit
``r_ref = max(sigma_lik, r_DE)`` (``sigma_lik = job.noise_std``, the likelihood's
noise sd in the same units; ``r_DE`` the deep ensemble's final training RMSE on the same
dataset and seed, from its log; for a sampler started from a deep-ensemble burn-in, the
burn-in's own final training RMSE instead: a deep ensemble of half the budget by design).
Under the Gaussian likelihood the run's fit is
``n (r^2 - r_ref^2) / (2 sigma_lik^2)`` nats of log-likelihood below the reference fit
(``n`` training rows per split); under a Laplace approximation a posterior sample lies
``chi2_d / 2`` nats below the best fit with ``d <= n`` effective parameters, at most
``n/2 + K_SE sqrt(n/2)`` nats at 2 s.d. So the run under-fits when

    r > r_max = max( sqrt(r_ref^2 + sigma_lik^2 (1 + K_SE sqrt(2/n))),  r_ref (1 + K_SE / sqrt(2n)) )

the second term being the resolution of an RMS over n residuals (its relative s.e. is
``1/sqrt(2n)``), which governs where ``sigma_lik`` is tiny (energy, yacht, naval:
``noise_std^2 = 1e-7``); there a fit beyond the bound is not judged (a model with a prior
or anchors fits that far from an unregularised deep ensemble by design, so the check
cannot tell it from under-fitting: ``RESOLUTION_ONLY``). A deep ensemble is the reference
and gets no fit check (its net may not reach ``sigma_lik``: kin8nm's DE stops at 0.228
against 0.141, flat). E.g. DLE / DRLE on
boston stop at r = 0.473 against r_max = 0.357.
Without a DE log the fit check is unknown.

**Synthetic runs** (:func:`check_synthetic_run`): stability of the logged ``log_p``
(mean log density of the particles; no relative floor applies to a log density, whose
level is arbitrary, so only the noise test and an absolute ``ABS_TOL_LOGP`` = 0.01
nats apply). No degradation test: a sampler's ``log_p`` settles at ``E_p[log p]``, it
is not maximised, so a fall from an early high (particles spreading out) is expected.

**What no file records today** (and what a run would need): per-split training
histories for UCI (only the stack's mean is logged); the history inside
``metrics.json`` itself (logs can be lost or partial); the training objective proper
(the log posterior or the loss the update follows -- the logged NLLs are on fixed
1000-row subsets); per-seed figures of a seed stack's log (a stack of seeds logs their
average); for the Langevin ensembles, any mixing diagnostic across particles (R-hat
between particles of the training-set predictions) -- only the fit is checkable.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from repens.core.jobkey import attempts_log_path
from repens.results.statistics import bonferroni_coverage, quantile, satterthwaite_dof

__all__ = [
    "ABS_TOL_LOGP",
    "K_SE",
    "MIN_WINDOW_POINTS",
    "REL_TOL",
    "ROW_POOLED",
    "WINDOW_FRACTION",
    "Series",
    "Verdict",
    "check_hmc_reference",
    "check_image_run",
    "check_run",
    "check_synthetic_run",
    "check_toy_run",
    "check_tree",
    "check_uci_run",
    "degradation",
    "history_from_metrics",
    "parse_log",
    "last_run",
    "pooled_stability",
    "row_verdict",
    "stability",
    "uci_fit_bound",
    "uci_rel_tol",
]

WINDOW_FRACTION = 0.2
MIN_WINDOW_POINTS = 3
K_SE = 2.0
REL_TOL = 0.01
ABS_TOL_LOGP = 0.01

_STEP = re.compile(r"repens\.train INFO step (\d+)/(\d+)\s+(.*)$")
_RESUMED = re.compile(r"repens\.train INFO resumed from .* at step (\d+)/(\d+)")
_FIELD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)")
#: the line before a deep-ensemble burn-in's own steps (repens.training.fitting.burn_in)
_BURN_IN = re.compile(r"repens\.fitting INFO burn-in: \d+ of \d+ steps")


@dataclass(frozen=True)
class Verdict:
    """One run's convergence verdict.

    ``converged``: True, False, or None when the files lack what the check needs;
    ``reason``: one line with the numbers; ``kind``: image / uci / synthetic / hmc;
    ``sources``: the files read; ``details``: the figures behind the reason.
    """

    converged: bool | None
    reason: str
    kind: str = ""
    sources: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return {True: "converged", False: "not converged", None: "unknown"}[self.converged]

    def __str__(self) -> str:
        return f"{self.label}: {self.reason}"


@dataclass(frozen=True)
class Series:
    """A logged history: ``steps`` (increasing), ``total`` steps of the run, ``values``."""

    name: str
    steps: tuple[int, ...]
    values: tuple[float, ...]
    total: int


# ----------------------------------------------------------------------------- reading
def parse_log(path: Path | str) -> list[dict[str, Any]]:
    """The ``step k/K`` lines of a training log, as segments (one per trained stack).

    Returns ``[{"total": K, "points": [(k, {name: value})...], "resumed_at": k0 | None}]``;
    a new segment starts where the step count goes back or ``K`` changes without a
    resume line (the next stack of a job); a ``resumed from ... at step k0/K`` line
    continues its segment. Values that do not parse as floats are skipped. The segment after a
    ``burn-in: n of N steps`` line is a deep-ensemble burn-in (``"burn_in": True``), the run
    before the run a rule's convergence is judged on (:func:`_history` leaves it out).
    """
    segments: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    burn_in = False  # the next new segment is a burn-in
    for line in Path(path).read_text(errors="replace").splitlines():
        if _BURN_IN.search(line):
            burn_in, current = True, None
            continue
        m = _RESUMED.search(line)
        if m:
            k0, total = int(m.group(1)), int(m.group(2))
            if current is None or current["total"] != total or (current["points"] and current["points"][-1][0] > k0):
                current = {"total": total, "points": [], "resumed_at": k0, "burn_in": burn_in}
                segments.append(current)
                burn_in = False
            continue
        m = _STEP.search(line)
        if not m:
            continue
        k, total = int(m.group(1)), int(m.group(2))
        if current is None or current["total"] != total or (current["points"] and k <= current["points"][-1][0]):
            current = {"total": total, "points": [], "resumed_at": None, "burn_in": burn_in}
            segments.append(current)
            burn_in = False
        fields = {}
        for name, raw in _FIELD.findall(m.group(3)):
            try:
                fields[name] = float(raw)
            except ValueError:
                pass
        current["points"].append((k, fields))
    return [s for s in segments if s["points"]]


def last_run(segments: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The last run of :func:`parse_log`'s ``segments`` with the attempts it resumed: the
    trailing segments of the last one's step count, each taking over from its first step
    (a resume that repeats logged steps replaces them; a restart from the start replaces
    all). ``resumed_at``: the first taken segment's, i.e. None when the run's history is
    whole."""
    total = segments[-1]["total"]
    first = len(segments) - 1
    while first > 0 and segments[first - 1]["total"] == total:
        first -= 1
    points: list = []
    resumed_at = None
    for seg in segments[first:]:
        start = seg["points"][0][0]
        points = [p for p in points if p[0] < start] + list(seg["points"])
        if len(points) == len(seg["points"]):  # nothing before it kept: the history starts here
            resumed_at = seg.get("resumed_at")
    return {**segments[-1], "points": points, "resumed_at": resumed_at}


def history_from_metrics(metrics: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The history a ``metrics.json`` records, as :func:`parse_log`'s segments, or None.

    Read: ``history`` = ``[{"step": k, "total": K, name: value, ...}, ...]`` (one stack),
    or ``histories`` = a list of such lists (one per stack). Today's runs record neither.
    """
    raw = metrics.get("histories")
    if raw is None and metrics.get("history") is not None:
        raw = [metrics["history"]]
    if not raw:
        return None
    segments = []
    for hist in raw:
        points = []
        total = None
        for row in hist:
            if "step" not in row:
                continue
            total = int(row.get("total", total or 0)) or total
            points.append(
                (
                    int(row["step"]),
                    {k: float(v) for k, v in row.items() if k not in ("step", "total") and isinstance(v, (int, float))},
                )
            )
        if points:
            segments.append({"total": int(total or points[-1][0]), "points": points, "resumed_at": None})
    return segments or None


def _series(segment: Mapping[str, Any], name: str) -> Series | None:
    pts = [(k, f[name]) for k, f in segment["points"] if name in f and math.isfinite(f[name])]
    if not pts:
        return None
    return Series(name, tuple(p[0] for p in pts), tuple(p[1] for p in pts), int(segment["total"]))


# ----------------------------------------------------------------------------- tests
def _noise(values: np.ndarray) -> float:
    """Sd of one logged value about the smooth trend, over the last half of the history
    (all of it below 10 points): the residual sd about a least-squares quadratic in the
    point index (a line below 5 points), so that a steady trend and a settling curve's
    bend are not counted as noise, while alternating wiggles and jumps are."""
    return _noise_dof(values)[0]


def _noise_dof(values: np.ndarray) -> tuple[float, float]:
    """:func:`_noise` and the degrees of freedom of its estimate (points less fitted
    coefficients; nan, nan below 4 points)."""
    half = values[len(values) // 2 :] if len(values) >= 10 else values
    n = len(half)
    if n < 4:
        return float("nan"), float("nan")
    deg = 2 if n >= 5 else 1
    x = np.arange(n, dtype=float) - (n - 1) / 2
    coef = np.polyfit(x, half, deg)
    resid = half - np.polyval(coef, x)
    sd = float(np.sqrt((resid**2).sum() / (n - deg - 1)))
    # the log prints 4 significant digits (repens.training.train: ``{v:.4g}``): rounding error floor
    top = float(np.max(np.abs(half)))
    unit = 10.0 ** (math.floor(math.log10(top)) - 3) if top > 0 else 0.0
    return max(sd, unit / math.sqrt(12.0)), float(n - deg - 1)


def stability(
    series: Series,
    rel_tol: float | None = REL_TOL,
    abs_tol: float = 0.0,
    window: float = WINDOW_FRACTION,
    k_se: float | None = None,
) -> dict[str, Any]:
    """Is ``series`` still moving over the last ``window`` of the run's steps?

    Returns ``{"ok", "drift", "se", "dof", "k", "noise", "level", "tol", "points", "text"}``;
    ``ok`` None below :data:`MIN_WINDOW_POINTS` points in the window or for an unfinished
    history. ``drift``: the fitted change over ``window x total`` steps, ``se`` its s.e.
    with ``dof`` (the noise estimate's) degrees of freedom; moving when ``|drift| > k se``
    and ``|drift| > max(rel_tol x level, abs_tol)``, ``k`` = ``k_se`` or by default
    Student's t quantile at ``dof`` (a two-sided 5 % test, as the scorecard's intervals)."""
    s = np.asarray(series.steps, dtype=float)
    y = np.asarray(series.values, dtype=float)
    name = series.name
    if s[-1] < series.total:
        return {"ok": None, "text": f"{name} logged only to step {int(s[-1])}/{series.total}"}
    span = window * series.total
    inside = s >= s[-1] - span - 1e-9
    n = int(inside.sum())
    if n < MIN_WINDOW_POINTS:
        return {
            "ok": None,
            "points": n,
            "text": f"{name}: {n} logged point(s) in the last {window:.0%} of {series.total} steps "
            f"(need {MIN_WINDOW_POINTS})",
        }
    sw, yw = s[inside], y[inside]
    sxx = float(((sw - sw.mean()) ** 2).sum())
    slope = float(((sw - sw.mean()) * (yw - yw.mean())).sum() / sxx)
    drift = slope * span
    noise, dof = _noise_dof(y)
    if not math.isfinite(noise):
        resid = yw - (yw.mean() + slope * (sw - sw.mean()))
        noise, dof = float(np.sqrt((resid**2).sum() / max(n - 2, 1))), float(max(n - 2, 1))
    se = noise * span / math.sqrt(sxx)
    k = quantile(dof) if k_se is None else k_se
    level = float(abs(np.median(yw)))
    tol = max((rel_tol or 0.0) * level, abs_tol)
    moving = abs(drift) > k * se and abs(drift) > tol
    rel = f" ({drift / level:+.1%})" if level > 0 and rel_tol else ""
    text = (
        f"{name} {yw[0]:.4g}->{yw[-1]:.4g} over steps {int(sw[0])}-{int(sw[-1])}: drift {drift:+.3g}{rel} "
        f"per last {window:.0%}, {'>' if moving else '<='} tol {tol:.3g} / {k:.3g} se {k * se:.3g}"
    )
    return {
        "ok": not moving,
        "drift": drift,
        "se": se,
        "dof": dof,
        "k": k,
        "noise": noise,
        "level": level,
        "tol": tol,
        "points": n,
        "text": text,
    }


def degradation(
    series: Series,
    rel_tol: float | None = REL_TOL,
    abs_tol: float = 0.0,
    window: float = WINDOW_FRACTION,
    k_se: float = K_SE,
    higher_is_better: bool = False,
) -> dict[str, Any]:
    """Did a series that should fall (rise, with ``higher_is_better``) turn back late?

    The fitted value at the last step (least squares over the last ``window``) against
    the best value logged; degraded when worse by more than ``k_se sqrt2 noise`` and
    more than ``max(rel_tol x |best|, abs_tol)``. Returns ``{"ok", "rise", "best",
    "best_step", "end", "text"}``.
    """
    s = np.asarray(series.steps, dtype=float)
    y = np.asarray(series.values, dtype=float)
    sign = -1.0 if higher_is_better else 1.0
    if len(y) < MIN_WINDOW_POINTS:
        return {"ok": None, "text": f"{series.name}: {len(y)} logged point(s)"}
    inside = s >= s[-1] - window * series.total - 1e-9
    sw, yw = s[inside], y[inside]
    if len(sw) >= 2:
        slope = float(((sw - sw.mean()) * (yw - yw.mean())).sum() / ((sw - sw.mean()) ** 2).sum())
        end = float(yw.mean() + slope * (sw[-1] - sw.mean()))
    else:
        end = float(yw[-1])
    i = int(np.argmin(sign * y))
    best = float(y[i])
    rise = sign * (end - best)
    noise = _noise(y)
    noise = 0.0 if not math.isfinite(noise) else noise
    tol = max((rel_tol or 0.0) * abs(best), abs_tol, k_se * math.sqrt(2) * noise)
    bad = rise > tol
    word = "rose" if not higher_is_better else "fell"
    text = (
        f"{series.name} best {best:.4g} at step {int(s[i])}, {end:.4g} at the end: "
        f"{word} {rise:.3g} {'>' if bad else '<='} tol {tol:.3g}"
    )
    return {"ok": not bad, "rise": rise, "best": best, "best_step": int(s[i]), "end": end, "tol": tol, "text": text}


def _combine(parts: Sequence[tuple[bool | None, str]]) -> tuple[bool | None, str]:
    """False if any part fails (its reasons first), else None if any is unknown, else True."""
    failed = [t for ok, t in parts if ok is False]
    unknown = [t for ok, t in parts if ok is None]
    passed = [t for ok, t in parts if ok is True]
    if failed:
        return False, "; ".join(failed + unknown + passed)
    if unknown:
        return None, "; ".join(unknown + passed)
    return True, "; ".join(passed)


# ----------------------------------------------------------------------------- files
def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _every_attempt(log: Path) -> Path:
    """The attempts log beside the training log ``log`` where there is one
    (:func:`repens.core.jobkey.attempts_log_path`): it holds every attempt of a resumed run,
    where the log itself holds the last attempt only, from its resume on."""
    attempts = attempts_log_path(log) if log.name.endswith(".log") else log
    return attempts if attempts.is_file() else log


def _find_log(metrics_path: Path, metrics: Mapping[str, Any], log: Path | str | None) -> Path | None:
    """The run's training log: ``log`` if given, else ``provenance.log`` resolved against
    the results tree's root (``<root>/uci/...`` -> ``<root>/logs/...``) and its parent
    (the workflow's directory: ``results/...`` beside ``logs/...``); in either case its
    attempts log instead where one lies beside it (:func:`_every_attempt`)."""
    if log is not None:
        p = Path(log)
        return _every_attempt(p) if p.is_file() else None
    rel = (metrics.get("provenance") or {}).get("log")
    parts = metrics_path.resolve().parts
    root = Path(*parts[:-5]) if len(parts) > 5 else metrics_path.parent
    tail = Path(*parts[-5:-1])  # <experiment>/<dataset>/<method>/seed<N>
    candidates = []
    if rel:
        candidates += [root / rel, root.parent / rel]
    candidates += [
        root / "logs" / tail.parent / f"{tail.name}.log",
        root.parent / "logs" / tail.parent / f"{tail.name}.log",
    ]
    for c in candidates:
        if c.is_file():
            return _every_attempt(c)
    return None


#: where :func:`_history` leaves a log's deep-ensemble burn-in segments (not judged) for the
#: fit check of the sampler after it (:func:`_uci_fit_parts`)
_BURN_IN_SEGMENTS = "_burn_in_segments"


def _history(metrics_path: Path, log: Path | str | None) -> tuple[list[dict[str, Any]] | None, str, list[str], dict]:
    """Segments, where they came from (for the reason), files read, the metrics."""
    metrics = _read_json(metrics_path)
    if metrics is None:
        return None, f"{metrics_path}: missing or unreadable", [str(metrics_path)], {}
    segs = history_from_metrics(metrics)
    if segs:
        return segs, "history in metrics.json", [str(metrics_path)], metrics
    found = _find_log(metrics_path, metrics, log)
    if found is None:
        rel = (metrics.get("provenance") or {}).get("log")
        return (
            None,
            (f"metrics.json records no history and its training log ({rel or 'not named'}) is not found"),
            [str(metrics_path)],
            metrics,
        )
    parsed = parse_log(found)
    segs = [s for s in parsed if not s.get("burn_in")]
    metrics = {**metrics, _BURN_IN_SEGMENTS: [s for s in parsed if s.get("burn_in")]}
    if not segs:
        return (
            None,
            f"metrics.json records no history; log {found} has no step lines after a burn-in",
            [str(metrics_path), str(found)],
            metrics,
        )
    burn = " after a deep-ensemble burn-in, not judged" if len(segs) < len(parsed) else ""
    return segs, f"from log {found} (metrics.json records no history){burn}", [str(metrics_path), str(found)], metrics


# ----------------------------------------------------------------------------- image
def check_image_run(metrics_path: Path | str, log: Path | str | None = None, rel_tol: float = REL_TOL) -> Verdict:
    """Table 1 run: ``monitor_nll`` and ``monitor_acc`` stable over the last 20 %, no late
    rise of ``train_nll`` or ``monitor_nll`` (see the module doc). ``log`` overrides the
    log found through ``provenance.log``."""
    path = Path(metrics_path)
    segs, where, sources, _ = _history(path, log)
    if segs is None:
        return Verdict(None, where, "image", tuple(sources))
    seg = last_run(segs)
    parts: list[tuple[bool | None, str]] = []
    details: dict[str, Any] = {"history": where}
    for name, _better_high in (("monitor_nll", False), ("monitor_acc", True)):
        ser = _series(seg, name)
        if ser is None:
            parts.append((None, f"{name} not logged"))
            continue
        st = stability(ser, rel_tol=rel_tol)
        details[f"{name}_stability"] = st
        parts.append((st["ok"], st["text"]))
    ser = _series(seg, "train_nll")
    if ser is None:
        parts.append((None, "train_nll not logged"))
    else:
        dg = degradation(ser, rel_tol=rel_tol)
        details["train_nll_degradation"] = dg
        parts.append((dg["ok"], ("late degradation: " if dg["ok"] is False else "") + dg["text"]))
    ser = _series(seg, "monitor_nll")
    if ser is not None:  # reported, never failing: a held-out NLL rising off its minimum is over-fitting
        dg = degradation(ser, rel_tol=rel_tol)
        details["monitor_nll_degradation"] = dg
        if dg["ok"] is False:
            parts.append(
                (True, f"(info) monitor_nll {dg['best']:.4g} at step {dg['best_step']} -> {dg['end']:.4g} at the end")
            )
    ser = _series(seg, "train_nll")
    if ser is not None:  # reported, never failing: a falling training NLL is further fitting
        st = stability(ser, rel_tol=rel_tol)
        details["train_nll_stability"] = st
        if st["ok"] is not None and "drift" in st:
            parts.append((True, f"(info) train_nll drift {st['drift']:+.3g} per last 20%"))
    ok, text = _combine(parts)
    if seg.get("resumed_at") is not None:
        text += f"; log resumed at step {seg['resumed_at']}"
    return Verdict(ok, f"{text} [{where}]", "image", tuple(sources), details)


# ----------------------------------------------------------------------------- UCI
#: below ``r_ref / RESOLUTION_ONLY`` the likelihood's noise adds nothing to the fit bound, which is
#: then the RMS's resolution alone (``r_ref (1 + K_SE / sqrt(2n))``, a few percent): a fit beyond
#: it is not called under-fit (a regularised model's fit sits that far from DE's by design)
RESOLUTION_ONLY = 10.0


def uci_fit_bound(r_ref: float, sigma: float, n: int, k_se: float = K_SE) -> float:
    """Largest training RMSE (standardized units) a converged run may reach, given the
    reference fit ``r_ref = max(sigma, r_DE)``, the likelihood's noise sd ``sigma`` and
    ``n`` training rows (see the module doc)."""
    by_likelihood = math.sqrt(r_ref**2 + sigma**2 * (1.0 + k_se * math.sqrt(2.0 / n)))
    by_resolution = r_ref * (1.0 + k_se / math.sqrt(2.0 * n))
    return max(by_likelihood, by_resolution)


_UCI_SERIES = "train_rmse_std_units_mean"


def _final_train_rmse(segs: Sequence[Mapping[str, Any]]) -> float | None:
    """The final training RMSE over all stacks (mean of the stacks' last values)."""
    ends = []
    for seg in segs:
        ser = _series(seg, _UCI_SERIES)
        if ser is None or ser.steps[-1] < ser.total:
            return None
        ends.append(ser.values[-1])
    return float(np.mean(ends)) if ends else None


def uci_rel_tol(metrics_path: Path | str) -> tuple[float, str]:
    """The stability tolerance for a UCI dataset: ``2 min(rmse_se / rmse_mean)`` over every
    run recorded beside this one (``<dataset>/*/seed*/metrics.json``), i.e. half the
    smallest test-RMSE difference the scorecard can call on the dataset
    (``2 (se_a + se_b) >= 4 se_min``); :data:`REL_TOL` when none records an s.e."""
    dataset_dir = Path(metrics_path).parent.parent.parent
    ratios = []
    for f in dataset_dir.glob("*/seed*/metrics.json"):
        m = _read_json(f) or {}
        se, mean = m.get("rmse_se"), m.get("rmse_mean")
        if isinstance(se, (int, float)) and isinstance(mean, (int, float)) and se > 0 and mean > 0:
            ratios.append(se / mean)
    if not ratios:
        return REL_TOL, f"default {REL_TOL:.1%}"
    return 2 * min(ratios), f"2 x min rmse se/mean over {len(ratios)} {dataset_dir.name} runs"


def _uci_stack_parts(segs: list, rel_tol: float, sampler: bool = False) -> list[tuple[bool | None, str]]:
    """:func:`check_uci_run`'s stability and late-degradation verdicts, per stack; a sampler
    (``sampler``: a Langevin rule) gets no degradation test: its fit is not maximised, so
    its training RMSE rising from a deep-ensemble start as the particles spread is what it
    should do, not a degradation."""
    parts: list[tuple[bool | None, str]] = []
    for i, seg in enumerate(segs):
        ser = _series(seg, _UCI_SERIES)
        label = f"stack {i + 1}/{len(segs)} " if len(segs) > 1 else ""
        if ser is None:
            parts.append((None, f"{label}{_UCI_SERIES} not logged"))
            continue
        st = stability(ser, rel_tol=rel_tol)
        parts.append((st["ok"], label + st["text"]))
        if sampler:
            continue
        dg = degradation(ser, rel_tol=rel_tol)
        if dg["ok"] is False:
            parts.append((False, label + "late degradation: " + dg["text"]))
    return parts


def _uci_fit_reference(
    path: Path, de_metrics: Path | str | None, de_log: Path | str | None, sigma: float, sources: list, parts: list
) -> tuple[float | None, float | None, str]:
    """:func:`check_uci_run`'s reference training RMSE ``max(noise_std, DE's)``: (r_ref,
    r_de, its words), r_ref ``None`` (and a verdict in ``parts``) without DE's."""
    de_path = Path(de_metrics) if de_metrics else path.parent.parent.parent / "de" / path.parent.name / "metrics.json"
    de_segs, de_where, de_sources, _ = _history(de_path, de_log)
    r_de = _final_train_rmse(de_segs) if de_segs else None
    if r_de is None:
        parts.append((None, f"fit check needs DE's training RMSE: {de_where}"))
        return None, r_de, ""
    sources += [s for s in de_sources if s not in sources]
    return max(sigma, r_de), r_de, f"max(noise_std {sigma:.3g}, DE {r_de:.4g})"


def _uci_fit_parts(
    path: Path,
    metrics: Mapping[str, Any],
    segs: list,
    de_metrics: Path | str | None,
    de_log: Path | str | None,
    sources: list,
    details: dict[str, Any],
) -> list[tuple[bool | None, str]]:
    """:func:`check_uci_run`'s fit-quality verdict (DE's sources added to ``sources``, the
    numbers to ``details``)."""
    parts: list[tuple[bool | None, str]] = []
    job = metrics.get("job") or {}
    sigma = job.get("noise_std")
    splits = metrics.get("splits") or []
    n_rows = [int(s["n_train"]) for s in splits if isinstance(s, Mapping) and "n_train" in s]
    r = _final_train_rmse(segs)
    if sigma is None or not n_rows or r is None:
        missing = [
            w
            for w, v in (
                ("job.noise_std", sigma),
                ("splits[].n_train", n_rows),
                ("a finished training-RMSE history", r),
            )
            if not v
        ]
        parts.append((None, f"fit check impossible: no {', '.join(missing)}"))
        return parts
    n = min(n_rows)
    sigma = float(sigma)
    method = job.get("method") or path.parts[-3]
    r_de = None
    if method == "de":  # the reference fit itself: a net that cannot reach noise_std is not unconverged
        r_ref = None
        details.update(train_rmse=r, n_train=n, noise_std=sigma)
        parts.append((True, f"fit: DE is the reference (train RMSE {r:.4g}, noise_std {sigma:.3g})"))
    elif (r_burn := _final_train_rmse(metrics.get(_BURN_IN_SEGMENTS) or [])) is not None:
        # started from its own deep ensemble of half the budget: judged against that fit,
        # not against a deep ensemble trained for the whole budget
        r_ref, ref_text = max(sigma, r_burn), f"max(noise_std {sigma:.3g}, its own burn-in's {r_burn:.4g})"
    else:
        r_ref, r_de, ref_text = _uci_fit_reference(path, de_metrics, de_log, sigma, sources, parts)
    if r_ref is not None:
        r_max = uci_fit_bound(r_ref, sigma, n)
        fit_ok = r <= r_max
        details.update(train_rmse=r, r_ref=r_ref, r_de=r_de, r_max=r_max, n_train=n, noise_std=sigma)
        text = f"train RMSE {r:.4g} (std units) {'>' if not fit_ok else '<='} bound {r_max:.4g} from {ref_text}, n={n}"
        if not fit_ok and sigma < r_ref / RESOLUTION_ONLY:
            # the bound is the RMS's own resolution: a regularised fit (a prior, anchors) sits
            # that far from an unregularised one by design, so a miss cannot be told from under-fitting
            parts.append((None, f"fit not judged: {text} (noise_std {sigma:.3g}: the bound resolves only the RMS)"))
        else:
            parts.append((fit_ok, ("under-fit: " if not fit_ok else "") + text))
    return parts


def check_uci_run(
    metrics_path: Path | str,
    log: Path | str | None = None,
    de_metrics: Path | str | None = None,
    de_log: Path | str | None = None,
    rel_tol: float | None = None,
) -> Verdict:
    """Table 2 run: per stack, the logged training RMSE stable over the last 20 % and not
    rising late; the final training RMSE within :func:`uci_fit_bound` of
    ``max(noise_std, DE's)``. DE's run defaults to ``../../de/seed<N>/metrics.json``."""
    path = Path(metrics_path)
    segs, where, sources, metrics = _history(path, log)
    if segs is None:
        return Verdict(None, where, "uci", tuple(sources))
    parts: list[tuple[bool | None, str]] = []
    if rel_tol is None:
        rel_tol, tol_text = uci_rel_tol(path)
    else:
        tol_text = "given"
    details: dict[str, Any] = {"history": where, "stacks": len(segs), "rel_tol": rel_tol}
    sampler = (metrics.get("job") or {}).get("rule") == "langevin"
    parts += _uci_stack_parts(segs, rel_tol, sampler)
    parts += _uci_fit_parts(path, metrics, segs, de_metrics, de_log, sources, details)
    ok, text = _combine(parts)
    details["per_split_history"] = False
    return Verdict(
        ok,
        f"{text} [rel tol {rel_tol:.1%}: {tol_text}; {where}; split-mean history only]",
        "uci",
        tuple(sources),
        details,
    )


# ----------------------------------------------------------------------------- synthetic
def check_synthetic_run(log: Path | str, rel_tol: float | None = None) -> Verdict:
    """2-D synthetic target: the logged ``log_p`` (particles' mean log density) stable over
    the last 20 % (noise test and :data:`ABS_TOL_LOGP`)."""
    p = Path(log)
    if not p.is_file():
        return Verdict(None, f"log {p} not found", "synthetic", (str(p),))
    segs = parse_log(p)
    seg = segs[-1] if segs else None
    ser = _series(seg, "log_p") if seg else None
    if ser is None:
        return Verdict(None, f"log {p} records no log_p history", "synthetic", (str(p),))
    # the last step's line may carry no figures: judge the history up to its last logged point
    ser = Series(ser.name, ser.steps, ser.values, max(ser.steps[-1], min(ser.total, seg["points"][-1][0])))
    st = stability(ser, rel_tol=rel_tol, abs_tol=ABS_TOL_LOGP)
    ok, text = _combine([(st["ok"], st["text"])])
    if ser.total < seg["points"][-1][0] or ser.steps[-1] < seg["total"]:
        text += f" (figures logged to step {ser.steps[-1]}/{seg['total']})"
    return Verdict(ok, f"{text} [log {p}]", "synthetic", (str(p),), {"stability": st})


# ----------------------------------------------------------------------------- HMC
def check_hmc_reference(diagnostics_path: Path | str) -> Verdict:
    """An HMC reference's ``diagnostics.json``, judged by :func:`repens.training.hmc.convergence`
    (R-hat max <= CONVERGED_RHAT_MAX, ESS min >= CONVERGED_ESS_MIN) on the figures it
    records; its recorded ``converged`` is not trusted over them."""
    from repens.training.hmc import HMCSettings, convergence

    p = Path(diagnostics_path)
    data = _read_json(p)
    if data is None:
        return Verdict(None, f"{p}: missing or unreadable", "hmc", (str(p),))
    diag = data.get("diagnostics")
    if not isinstance(diag, Mapping) or "rhat_max" not in diag or "ess_min" not in diag:
        return Verdict(None, f"{p}: records no R-hat max / ESS min", "hmc", (str(p),))
    try:
        settings = HMCSettings.from_dict(data.get("settings"))
    except (TypeError, ValueError) as err:
        return Verdict(None, f"{p}: unreadable HMC settings ({err})", "hmc", (str(p),))
    job = data.get("job") or {}
    v = convergence(diag, settings, scale=job.get("scale"))
    reason = (
        f"{v['status']}: R-hat max {float(diag['rhat_max']):.4g} (<= {v['thresholds']['rhat_max']:g}), "
        f"ESS min {float(diag['ess_min']):.4g} (>= {v['thresholds']['ess_min']:g}) [repens.training.hmc.convergence]"
    )
    return Verdict(bool(v["converged"]), reason, "hmc", (str(p),), v)


# ----------------------------------------------------------------------------- toy
def _toy_run_dir(path: Path) -> Path:
    return path if path.name.startswith("seed") else path.parent


def check_toy_run(
    path: Path | str, log: Path | str | None = None, hmc_diagnostics: Path | str | None = None, rel_tol: float = REL_TOL
) -> Verdict:
    """A toy run (``results/toy/<ds>/<method>/seed<N>/predictions.npz`` or its folder) and
    the HMC reference it is scored against.

    ``method`` hmc: :func:`check_hmc_reference` on its ``diagnostics.json``. Otherwise both
    must hold: the particles' logged ``train_nll`` (mean NLL per training point, full
    data) stable over the last 20 % (tolerance ``max(rel_tol |level|, ABS_TOL_LOGP)``
    nats) and not rising late, from ``logs/toy/<ds>/<method>/seed<N>.log``; and the HMC
    reference (``hmc_diagnostics``, default ``../../hmc/seed<N>/diagnostics.json``, else
    the first HMC seed there) converged by :func:`repens.training.hmc.convergence`.
    """
    run = _toy_run_dir(Path(path))
    parts_ = run.parts
    if "toy" not in parts_ or len(parts_) < parts_.index("toy") + 4:
        return Verdict(None, f"{run}: not a toy run folder (toy/<dataset>/<method>/seed<N>)", "toy")
    i = parts_.index("toy")
    dataset, method, seed = parts_[i + 1], parts_[i + 2], run.name
    if method == "hmc":
        return check_hmc_reference(run / "diagnostics.json")
    root = Path(*parts_[:i])
    sources: list[str] = []
    parts: list[tuple[bool | None, str]] = []
    if log is None:
        rel = Path("logs") / "toy" / dataset / method / f"{seed}.log"
        found = next((c for c in (root / rel, root.parent / rel) if c.is_file()), None)
    else:
        found = Path(log) if Path(log).is_file() else None
    if found is None:
        parts.append((None, f"training log logs/toy/{dataset}/{method}/{seed}.log not found"))
    else:
        sources.append(str(found))
        segs = parse_log(found)
        ser = _series(segs[-1], "train_nll") if segs else None
        if ser is None:
            parts.append((None, f"log {found} records no train_nll history"))
        else:
            st = stability(ser, rel_tol=rel_tol, abs_tol=ABS_TOL_LOGP)
            dg = degradation(ser, rel_tol=rel_tol, abs_tol=ABS_TOL_LOGP)
            parts.append((st["ok"], st["text"]))
            parts.append((dg["ok"], ("late degradation: " if dg["ok"] is False else "") + dg["text"]))
    if hmc_diagnostics is None:
        hmc_dir = root / "toy" / dataset / "hmc"
        same = hmc_dir / seed / "diagnostics.json"
        others = sorted(hmc_dir.glob("seed*/diagnostics.json"))
        hmc_diagnostics = same if same.is_file() else (others[0] if others else same)
    hv = check_hmc_reference(hmc_diagnostics)
    sources += list(hv.sources)
    parts.append((hv.converged, f"HMC reference {hmc_diagnostics}: {hv.label} ({hv.reason})"))
    ok, text = _combine(parts)
    return Verdict(ok, text, "toy", tuple(sources), {"hmc": hv})


# ----------------------------------------------------------------------------- rows
#: an image run's series whose drift is judged on the row's mean (the rest per run)
ROW_POOLED = ("monitor_nll", "monitor_acc")


def pooled_stability(stabs: Sequence[Mapping[str, Any]], name: str, tests: int = 1) -> dict[str, Any]:
    """Is the mean over a row's runs of one series still moving?

    ``stabs``: each run's :func:`stability` of the series. The row mean's drift is the
    mean of the runs' drifts, its variance ``sum se_i^2 / n^2`` (independent seeds), its
    degrees of freedom Welch-Satterthwaite's (:func:`repens.results.statistics.satterthwaite_dof`); moving
    when ``|drift| > t se`` (t: :func:`repens.results.statistics.quantile` at those degrees
    of freedom, at a two-sided level of 5 % / ``tests``: Bonferroni's, where the row is
    judged on ``tests`` series) and ``|drift| > tol`` (the runs' mean tolerance). ``ok``
    None when a run's stability is unknown."""
    known = [st for st in stabs if st.get("ok") is not None and "drift" in st]
    if not stabs or len(known) < len(stabs):
        return {"ok": None, "text": f"{name}: the stability of {len(stabs) - len(known)} run(s) is unknown"}
    n = len(known)
    drift = sum(st["drift"] for st in known) / n
    se = math.sqrt(sum(st["se"] ** 2 for st in known)) / n
    dof = satterthwaite_dof([(st["se"], st["dof"]) for st in known])
    k = quantile(dof, coverage=bonferroni_coverage(tests))
    tol = sum(st["tol"] for st in known) / n
    level = sum(st["level"] for st in known) / n
    moving = abs(drift) > k * se and abs(drift) > tol
    rel = f" ({drift / level:+.1%})" if level > 0 else ""
    text = (
        f"{name} mean drift over {n} run(s) {drift:+.3g}{rel} per last {WINDOW_FRACTION:.0%}, "
        f"{'>' if moving else '<='} tol {tol:.3g} / {k:.3g} se {k * se:.3g}"
    )
    return {"ok": not moving, "drift": drift, "se": se, "dof": dof, "k": k, "tol": tol, "n": n, "text": text}


def row_verdict(runs: Sequence[tuple[str, Verdict]]) -> Verdict:
    """The verdict of a table row, its runs ``(label, verdict)`` over seeds.

    Image rows (Table 1): the drift of :data:`ROW_POOLED` is judged on the row's mean
    (:func:`pooled_stability`, each of the two at 2.5 %, so that a settled row is called
    unconverged at most 5 % of the time), the quantity the scorecard compares, while every other
    check (a late rise of the training NLL) still fails the row through any one run. So a
    seed whose drift passes the per-run 5 % test by chance does not decide the row: a row
    of n runs judged run by run would be called unconverged with probability about
    ``1 - 0.95^(2n)`` though every run had settled. Other rows: unconverged if any run is.
    A run of unknown convergence makes the row unknown."""
    if not runs:
        return Verdict(None, "no runs")
    unknown = [(label, v) for label, v in runs if v.converged is None]
    if unknown:
        label, v = unknown[0]
        return Verdict(None, f"{label}: {v.reason}", v.kind)
    if any(v.kind != "image" for _, v in runs):
        failed = [(label, v) for label, v in runs if v.converged is False]
        if failed:
            return Verdict(False, f"{failed[0][0]}: {failed[0][1].reason}", failed[0][1].kind)
        return Verdict(True, f"{len(runs)} run(s) converged", runs[0][1].kind)
    parts: list[tuple[bool | None, str]] = []
    for label, v in runs:
        dg = v.details.get("train_nll_degradation") or {}
        if dg.get("ok") is False:
            parts.append((False, f"{label}: late degradation: {dg.get('text', '')}"))
    details: dict[str, Any] = {}
    for name in ROW_POOLED:
        stabs = [v.details.get(f"{name}_stability") or {} for _, v in runs]
        pooled = pooled_stability(stabs, name, tests=len(ROW_POOLED))
        details[f"{name}_pooled"] = pooled
        parts.append((pooled["ok"], pooled["text"]))
    ok, text = _combine(parts)
    return Verdict(ok, text, "image", (), details)


# ----------------------------------------------------------------------------- dispatch
def check_run(path: Path | str, **kwargs: Any) -> Verdict:
    """Dispatch on the path: ``.../image/.../metrics.json``, ``.../uci/.../metrics.json``,
    ``.../diagnostics.json`` (HMC), a synthetic log or run folder."""
    p = Path(path)
    if p.name == "diagnostics.json":
        return check_hmc_reference(p)
    if p.is_dir():
        p = p / "metrics.json" if (p / "metrics.json").exists() else p
    parts = p.parts
    if p.name == "metrics.json" and "image" in parts:
        return check_image_run(p, **kwargs)
    if p.name == "metrics.json" and "uci" in parts:
        return check_uci_run(p, **kwargs)
    if "toy" in parts:
        return check_toy_run(p, **kwargs)
    if "synthetic" in parts:
        if p.suffix == ".log":
            return check_synthetic_run(p)
        # <root>/synthetic/<ds>/<method>/seed<N>[/file] -> <root>/logs/synthetic/<ds>/<method>/seed<N>.log
        run = p if p.name.startswith("seed") else p.parent
        i = parts.index("synthetic")
        root = Path(*run.parts[:i])
        return check_synthetic_run(root / "logs" / Path(*run.parts[i:-1]) / f"{run.name}.log")
    return Verdict(None, f"{p}: not a run this module knows how to check")


def check_tree(root: Path | str) -> list[tuple[str, Verdict]]:
    """Every run under ``root`` (image / UCI metrics.json, synthetic run folders, HMC
    diagnostics.json), with its verdict, sorted by path."""
    root = Path(root)
    runs: list[Path] = []
    for kind in ("image", "uci"):
        runs += sorted((root / kind).glob("*/*/seed*/metrics.json"))
    runs += sorted(d for d in (root / "synthetic").glob("*/*/seed*") if d.is_dir())
    runs += sorted(d for d in (root / "toy").glob("*/*/seed*") if d.is_dir())
    runs += sorted(p for p in root.rglob("diagnostics.json") if "toy" not in p.relative_to(root).parts)
    return [(str(r.relative_to(root)), check_run(r)) for r in runs]


def _main(argv: Iterable[str] | None = None) -> None:
    import sys

    args = list(argv if argv is not None else sys.argv[1:]) or ["reference"]
    for arg in args:
        p = Path(arg)
        rows = check_tree(p) if p.is_dir() and not p.name.startswith("seed") else [(arg, check_run(p))]
        for run, v in rows:
            print(f"{run}\t{v.label}\t{v.reason}")


if __name__ == "__main__":
    _main()
