"""The intervals both the convergence verdicts (:mod:`repens.summaries.converged`) and the
claim scorecard (:mod:`repens.report.verdicts`) read: Student's t half-widths and
Welch-Satterthwaite degrees of freedom."""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats

__all__ = ["COVERAGE", "bonferroni_coverage", "no_spread", "quantile", "satterthwaite_dof", "welch_dof"]

#: two-sided coverage of every interval
COVERAGE = 0.95


def quantile(dof: float, coverage: float = COVERAGE) -> float:
    """The half-width, in standard errors, of a ``coverage`` (:data:`COVERAGE`) interval for
    a mean whose error was estimated with ``dof`` degrees of freedom: Student's t quantile
    (12.7 at 1, 2.78 at 4, 2.09 at 19), the normal one (1.96) at ``dof = inf`` (a printed
    error, a constant)."""
    q = (1 + coverage) / 2
    if not dof > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {dof!r}")
    return float(stats.norm.ppf(q)) if math.isinf(dof) else float(stats.t.ppf(q, dof))


def bonferroni_coverage(m: int) -> float:
    """The coverage of each of ``m`` intervals that together keep a :data:`COVERAGE`
    family-wise level (Bonferroni): ``1 - (1 - COVERAGE) / m`` (99.58 % at ``m = 12``);
    :data:`COVERAGE` itself at ``m <= 1``."""
    return 1 - (1 - COVERAGE) / max(m, 1)


def satterthwaite_dof(terms: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of ``sqrt(sum se_i^2)``, ``terms`` its
    ``(se_i, dof_i)`` (Welch 1947): ``(sum v_i)^2 / sum (v_i^2 / dof_i)`` with ``v = se^2``;
    a term with infinite degrees of freedom adds nothing below."""
    variances = [(se**2, dof) for se, dof in terms]
    below = sum(v * v / d for v, d in variances if not math.isinf(d))
    return math.inf if below == 0 else sum(v for v, _ in variances) ** 2 / below


def welch_dof(se_a: float, dof_a: float, se_b: float, dof_b: float) -> float:
    """Welch-Satterthwaite degrees of freedom of ``a - b``'s standard error
    ``sqrt(se_a^2 + se_b^2)`` (:func:`satterthwaite_dof` of the two)."""
    return satterthwaite_dof(((se_a, dof_a), (se_b, dof_b)))


def no_spread(spread: float, size: float) -> bool:
    """Whether a spread (an s.e., or max - min of values) measured from runs is zero: within
    float64 rounding of values of ``size`` (1e-9 of it, far above its 1e-16 and far below any
    spread a seed makes). A metric counted in steps (accuracy: one test image) gives zero by
    chance, and a zero-width interval built on it would decide any difference."""
    return spread <= 1e-9 * max(1.0, abs(size))
