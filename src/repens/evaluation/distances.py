"""Distances between predictive distributions (the BNN toy comparisons against HMC).

All functions are pure numpy, compute in float64 and broadcast elementwise over
their leading axes, so one call compares two predictive distributions at every
test point at once.

* :func:`gaussian_w2`: Wasserstein-2 distance between 1-D Gaussians,
  ``W2(N(m1, s1^2), N(m2, s2^2)) = sqrt((m1 - m2)^2 + (s1 - s2)^2)``.
* :func:`gaussian_kl`: ``KL(N(m_p, s_p^2) || N(m_q, s_q^2))``.
* :func:`categorical_kl`: ``KL(p || q) = sum_c p_c log(p_c / q_c)`` over the last axis.
* :func:`predictive_entropy`: ``H(p) = -sum_c p_c log p_c`` over the last axis.
* :func:`mixture_moments`: mean and standard deviation of the equal-weight
  Gaussian mixture ``(1/S) sum_s N(f_s(x), noise_std^2)`` (an ensemble's or a
  posterior sample's regression predictive).

Logarithms are natural (nats).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["gaussian_w2", "gaussian_kl", "categorical_kl", "predictive_entropy", "mixture_moments"]


def _f64(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _check_sd(name: str, sd: np.ndarray, positive: bool) -> None:
    bad = (sd <= 0) if positive else (sd < 0)
    if np.any(bad):
        kind = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be {kind}; got min {np.nanmin(sd)!r}")


def gaussian_w2(mean1: Any, sd1: Any, mean2: Any, sd2: Any) -> np.ndarray:
    """Elementwise Wasserstein-2 distance between 1-D Gaussians.

    ``W2(N(m1, s1^2), N(m2, s2^2)) = sqrt((m1 - m2)^2 + (s1 - s2)^2)`` (the
    closed form for one-dimensional Gaussians; it is also valid for point
    masses, ``s = 0``).

    Args:
        mean1, sd1: Mean and standard deviation of the first Gaussian(s).
        mean2, sd2: Mean and standard deviation of the second Gaussian(s).
            All four broadcast against each other.

    Returns:
        float64 array of the broadcast shape (0-d for scalars).

    Raises:
        ValueError: a standard deviation is negative.
    """
    m1, s1, m2, s2 = (_f64(v) for v in (mean1, sd1, mean2, sd2))
    _check_sd("sd1", s1, positive=False)
    _check_sd("sd2", s2, positive=False)
    return np.sqrt((m1 - m2) ** 2 + (s1 - s2) ** 2)


def gaussian_kl(mean_p: Any, sd_p: Any, mean_q: Any, sd_q: Any) -> np.ndarray:
    """Elementwise ``KL(p || q)`` between 1-D Gaussians ``p = N(m_p, s_p^2)``, ``q = N(m_q, s_q^2)``.

    ``KL = log(s_q / s_p) + (s_p^2 + (m_p - m_q)^2) / (2 s_q^2) - 1/2``.

    Raises:
        ValueError: a standard deviation is not positive.
    """
    mp, sp, mq, sq = (_f64(v) for v in (mean_p, sd_p, mean_q, sd_q))
    _check_sd("sd_p", sp, positive=True)
    _check_sd("sd_q", sq, positive=True)
    return np.log(sq / sp) + (sp**2 + (mp - mq) ** 2) / (2.0 * sq**2) - 0.5


def _normalise(name: str, p: np.ndarray) -> np.ndarray:
    if np.any(p < 0):
        raise ValueError(f"{name} has negative entries (min {np.nanmin(p)!r})")
    total = p.sum(axis=-1, keepdims=True)
    if np.any(total <= 0):
        raise ValueError(f"{name} has a row that sums to 0")
    return p / total


def categorical_kl(p: Any, q: Any, eps: float = 1e-12) -> np.ndarray:
    """``KL(p || q) = sum_c p_c log(p_c / q_c)`` over the last axis.

    Both inputs are converted to float64 and renormalised to sum to 1 along the
    last axis (stored float32 probabilities sum to 1 only up to rounding). ``q``
    is first clipped from below at ``eps`` and then renormalised, so a class that
    ``q`` rules out (``q_c = 0``) while ``p`` does not costs a finite
    ``p_c log(p_c / eps)`` instead of infinity. Terms with ``p_c = 0`` contribute
    0 (``0 log 0 = 0``). Rounding can leave a result of order ``-1e-16`` for
    ``p == q``; results are clipped at 0.

    Args:
        p, q: Probability vectors (..., C); they broadcast against each other.
        eps: Floor applied to ``q`` before renormalising (must be > 0).

    Returns:
        float64 array of the broadcast leading shape.

    Raises:
        ValueError: negative entries, an all-zero row, or ``eps <= 0``.
    """
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    p = _normalise("p", _f64(p))
    q = _normalise("q", np.clip(_normalise("q", _f64(q)), eps, None))
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - np.log(q)), 0.0)
    return np.maximum(terms.sum(axis=-1), 0.0)


def predictive_entropy(p: Any) -> np.ndarray:
    """Entropy ``H(p) = -sum_c p_c log p_c`` (nats) over the last axis, with ``0 log 0 = 0``.

    ``p`` is converted to float64 and renormalised along the last axis; the
    result lies in ``[0, log C]``.

    Raises:
        ValueError: negative entries or an all-zero row.
    """
    p = _normalise("p", _f64(p))
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return np.maximum(-terms.sum(axis=-1), 0.0)


def mixture_moments(f: Any, noise_std: Any) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of the Gaussian mixture ``(1/S) sum_s N(f_s, noise_std^2)``.

    ``mean = (1/S) sum_s f_s`` and ``var = (1/S) sum_s (f_s - mean)^2 + noise_std^2``
    (law of total variance; the spread of the ``f_s`` uses the population form,
    ddof=0, because the mixture gives each member weight ``1/S``). With
    ``noise_std = 0`` the standard deviation is the epistemic part alone.

    Args:
        f: (S, ...) member predictions ``f_s(x)``, members along axis 0.
        noise_std: Observation-noise standard deviation (scalar, or broadcastable
            to ``f.shape[1:]``), >= 0.

    Returns:
        ``(mean, sd)``, float64 arrays of shape ``f.shape[1:]``.

    Raises:
        ValueError: ``f`` has no members or ``noise_std`` is negative.
    """
    f = _f64(f)
    if f.ndim < 1 or f.shape[0] < 1:
        raise ValueError(f"f must have shape (S >= 1, ...), got {f.shape}")
    noise = _f64(noise_std)
    _check_sd("noise_std", noise, positive=False)
    mean = f.mean(axis=0)
    var = f.var(axis=0) + noise**2
    return mean, np.sqrt(var)
