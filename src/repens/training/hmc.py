"""Gold-standard posterior samples: many HMC chains moved together as one (C, D) tensor.

Generic: :func:`sample_hmc` draws from any log density on R^D given as a batched
value-and-gradient function of (C, D) rows, one row per chain. Every leapfrog step of
every chain is one call of that function, so C chains cost one batched gradient, not C.

The sampler is jittered static HMC (Duane et al. 1987; Neal 2011) with

* a **step size per chain**, tuned in warmup by dual averaging to a target mean
  acceptance probability (Hoffman & Gelman 2014, Sec. 3.2, eq. 6, Alg. 5), restarted
  from the heuristic of their Alg. 4 after each change of the mass matrix;
* a **diagonal inverse mass matrix per chain**, the regularised variance of that chain's
  own draws in Stan's expanding windows (75-iteration initial buffer, windows of 25, 50,
  100, ... iterations, 50-iteration terminal buffer; Stan Reference Manual, "HMC
  algorithm parameters"). Per chain, not pooled: the weights of a network are not
  identifiable, and chains in different permutation modes have their variances on
  different coordinates;
* a **trajectory length T shared by all chains**, learnt in warmup as the median over
  chains of the time to the first U-turn, ``(q_t - q_0)^T M^-1 p_t < 0`` (the criterion
  of NUTS, Hoffman & Gelman 2014, eq. 9; learning the trajectory length from U-turn times
  during warmup is eHMC, Wu, Stoehr & Robert 2018): each warmup trajectory runs the full
  T, and log T moves up by a fixed rate when the chains ran T without turning back and
  down when they turned back within it (a stochastic-approximation quantile estimate),
  averaged over the iterates after the last mass-matrix update; or T is set by
  ``trajectory_length``. For a Gaussian that time is half a period of the widest
  direction, pi sd under a matching mass. While sampling, each iteration integrates for
  u T with u from the van der Corput (base-2 Halton) sequence in (0, 1), shared by the
  chains: no two iterations run the same length, so periodic orbits cannot trap a chain,
  and a direction whose half-period is T gets E[cos(u T / sd)] = 0, no autocorrelation
  (jittered HMC; the Halton jitter is that of ChEES-HMC, Hoffman, Radul & Sountsov 2021).
  Chain c runs ceil(u T / eps_c) leapfrog steps of its own size (at most
  ``max_leapfrog``); chains that finish early wait, masked, for the longest one (the
  share of gradient rows so spent is reported as ``masked_fraction``). Equal step counts
  for all chains would waste nothing, but leave a chain in a stiff region, with a small
  eps_c, integrating for a fraction of T: measured on the toy regression, one of 4 chains
  was still far out (log density -31,000 against -3,900) after 200 iterations.

Positions, momenta, energies and all adaptation statistics are float64; the log density
may be evaluated in a lower precision (the toy networks run in float32): the leapfrog
map stays volume-preserving and reversible for any gradient function, and the
Metropolis test uses the energy it computes, so the draws target the density as
evaluated.

The sampler state (all chains, adaptation, draws so far, the random generator) is
checkpointed every ``checkpoint_seconds`` and on SIGTERM / SIGINT; a resumed run is
bit-identical to an uninterrupted one.

Convergence is judged on what the network *does* (weights are not identifiable):
:func:`predictive_diagnostics` computes the rank-normalised split R-hat and the bulk and
tail effective sample sizes of Vehtari, Gelman, Simpson, Carpenter & Bürkner (2021,
"Rank-normalization, folding, and localization: an improved R-hat", Bayesian Analysis)
of the predictive f(x) at every test input, as ArviZ and Stan compute them, and
:func:`check_diagnostics` turns a failed check into an :class:`HMCDiagnosticsError`.

The check a job enforces uses its own thresholds (``hmc.rhat_max`` / ``hmc.ess_min``,
relaxed at quick scale so that a smoke test runs through); whether the reference is
*converged* is always judged at the paper-scale thresholds (:data:`CONVERGED_RHAT_MAX`,
:data:`CONVERGED_ESS_MIN`) by :func:`convergence`, which the diagnostics file records.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.special import ndtri
from scipy.stats import rankdata
from torch import Tensor

from repens.core.jobkey import load_keyed_checkpoint

log = logging.getLogger("repens.hmc")

__all__ = [
    "DualAveraging",
    "HMCDiagnosticsError",
    "HMCSettings",
    "ValueAndGrad",
    "adaptation_windows",
    "CONVERGED_ESS_MIN",
    "CONVERGED_RHAT_MAX",
    "check_diagnostics",
    "convergence",
    "dual_averaging_init",
    "dual_averaging_update",
    "ess_basic",
    "ess_bulk",
    "ess_tail",
    "kinetic_energy",
    "leapfrog",
    "predictive_diagnostics",
    "rhat_rank",
    "sample_hmc",
    "summarise_diagnostics",
    "van_der_corput",
]

#: (C, D) float64 positions -> (log density (C,), its gradient (C, D)), both float64
ValueAndGrad = Callable[[Tensor], tuple[Tensor, Tensor]]

#: an energy error above this many nats marks a trajectory divergent (Stan's threshold)
DIVERGENCE_NATS = 1000.0
#: Part of every checkpoint's key: a state written by another version of the sampler is not resumed.
SAMPLER_VERSION = 1


@dataclass(frozen=True)
class HMCSettings:
    """How long to sample and what counts as converged.

    Attributes:
        chains: number of chains, moved together (at least 2 for R-hat; 4 or more
            recommended by Vehtari et al. 2021). The cost of a batched gradient grows
            about linearly with the chains beyond a few, so more chains buy ESS at
            about the cost of more draws, and a better R-hat estimate.
        warmup: iterations per chain adapting step sizes, mass matrices and the
            trajectory length; discarded.
        samples: iterations per chain after warmup. Every ``thin``-th is kept.
        thin: keep every ``thin``-th draw (1: keep all).
        target_accept: target mean acceptance probability of each chain's step-size
            adaptation (dual averaging).
        max_leapfrog: at most this many leapfrog steps (gradient evaluations) per chain
            and iteration: caps the trajectory length T at ``max_leapfrog`` steps.
        trajectory_length: the integration time T (each iteration integrates u T, u in
            (0, 1)); None (the default) learns it in warmup from the chains' U-turn times.
        adapt_mass: estimate each chain's diagonal inverse mass matrix from its warmup
            draws (Stan's windows); False keeps the identity, i.e. momenta scaled to a
            standard normal prior, right for a network whose prior is N(0, I) and whose
            posterior variances stay near the prior's: its slow directions are then not
            shrunk by variances estimated from short, autocorrelated windows.
        rhat_max: largest acceptable rank-normalised split R-hat of the predictive at any
            test input (1.01: Vehtari et al. 2021's threshold).
        ess_min: smallest acceptable bulk and tail ESS (all chains together) of the
            predictive at any test input (400: Vehtari et al. 2021's suggestion, 100 per
            chain for 4 chains).
    """

    chains: int = 8
    warmup: int = 1000
    samples: int = 1000
    thin: int = 1
    target_accept: float = 0.8
    max_leapfrog: int = 1000
    trajectory_length: float | None = None
    adapt_mass: bool = True
    rhat_max: float = 1.01
    ess_min: float = 400.0

    def __post_init__(self) -> None:
        for name in ("chains", "samples", "thin", "max_leapfrog"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"HMCSettings.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.warmup < 0:
            raise ValueError(f"HMCSettings.warmup must be >= 0, got {self.warmup!r}")
        if not 0.0 < self.target_accept < 1.0:
            raise ValueError(f"HMCSettings.target_accept must be in (0, 1), got {self.target_accept!r}")
        if self.trajectory_length is not None and not self.trajectory_length > 0:
            raise ValueError(f"HMCSettings.trajectory_length must be > 0 or None, got {self.trajectory_length!r}")
        if self.samples // self.thin < 1:
            raise ValueError(f"HMCSettings keeps no draw: samples={self.samples} // thin={self.thin} = 0")

    @property
    def kept(self) -> int:
        """Draws kept per chain."""
        return self.samples // self.thin

    @classmethod
    def from_dict(cls, options: Mapping[str, Any] | None) -> HMCSettings:
        """Settings from a (partial) dict, e.g. a job's ``hmc`` block; missing keys take defaults.

        Unknown keys are an error (a misspelled key would otherwise be silently ignored).
        """
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown HMC setting(s) {unknown}; known: {sorted(known)}")
        casts = {
            "chains": int,
            "warmup": int,
            "samples": int,
            "thin": int,
            "max_leapfrog": int,
            "target_accept": float,
            "rhat_max": float,
            "ess_min": float,
            "adapt_mass": bool,
            "trajectory_length": lambda v: None if v is None else float(v),
        }
        return cls(**{k: casts[k](v) for k, v in options.items()})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: The thresholds a reference must meet to count as converged, whatever its job enforces:
#: those of config.yaml's paper-scale ``experiments.toy.hmc`` block (Vehtari et al. 2021's
#: R-hat <= 1.01 and bulk / tail ESS >= 400; tests/test_hmc.py checks they agree).
CONVERGED_RHAT_MAX = 1.01
CONVERGED_ESS_MIN = 400.0


def convergence(
    diag: Mapping[str, Any],
    settings: HMCSettings,
    scale: str | None = None,
    rhat_max: float = CONVERGED_RHAT_MAX,
    ess_min: float = CONVERGED_ESS_MIN,
) -> dict[str, Any]:
    """Whether a reference is converged, at the paper-scale thresholds (``rhat_max``,
    ``ess_min``) whatever ``settings`` enforced, for the diagnostics file:

    * ``converged``: R-hat max <= ``rhat_max`` and ESS min (bulk and tail) >= ``ess_min``
      (NaN fails);
    * ``accepted``: the job's own check (``settings.rhat_max`` / ``ess_min``) passed, so
      its predictions were written;
    * ``passed``: accepted and converged (never true for an unconverged reference);
    * ``status``: ``"converged"``, or ``"not converged (...)"`` with the figures, saying
      when the job's thresholds were relaxed (``scale``: the job's, named there, e.g.
      quick) so that it ran through anyway;
    * ``thresholds`` (the paper-scale ones) and ``job_thresholds``.
    """
    rhat, ess = float(diag["rhat_max"]), float(diag["ess_min"])
    converged = bool(rhat <= rhat_max and ess >= ess_min)
    accepted = bool(rhat <= settings.rhat_max and ess >= settings.ess_min)
    relaxed = settings.rhat_max > rhat_max or settings.ess_min < ess_min
    if converged:
        status = "converged"
    else:
        failed = []
        if not rhat <= rhat_max:
            failed.append(f"R-hat max {rhat:.3g} > {rhat_max:g}")
        if not ess >= ess_min:
            failed.append(f"ESS min {ess:.4g} < {ess_min:g}")
        parts = []
        if relaxed:
            parts.append(
                (f"{scale} scale: " if scale else "") + "job thresholds relaxed to R-hat <= "
                f"{settings.rhat_max:g}, ESS >= {settings.ess_min:g}"
            )
        parts.append(", ".join(failed))
        status = f"not converged ({'; '.join(parts)})"
    return {
        "converged": converged,
        "accepted": accepted,
        "passed": bool(converged and accepted),
        "status": status,
        "thresholds": {"rhat_max": float(rhat_max), "ess_min": float(ess_min)},
        "job_thresholds": {"rhat_max": float(settings.rhat_max), "ess_min": float(settings.ess_min)},
    }


class HMCDiagnosticsError(RuntimeError):
    """The chains did not pass the R-hat / ESS check of :func:`check_diagnostics`."""


# ----------------------------------------------------------------------------- pieces
def adaptation_windows(
    warmup: int, init_buffer: int = 75, term_buffer: int = 50, base_window: int = 25
) -> list[tuple[int, int]]:
    """Stan's mass-matrix adaptation windows ``[(start, end), ...]`` (iterations, end
    exclusive) within ``warmup``: after an initial buffer, windows doubling in length from
    ``base_window``, the last stretched to the terminal buffer. Warmups shorter than the
    three parts get 15 % / 75 % / 10 % (Stan's fallback); below 20 iterations, none."""
    if warmup < 20:
        return []
    if init_buffer + base_window + term_buffer > warmup:
        init_buffer, term_buffer = int(0.15 * warmup), int(0.1 * warmup)
        base_window = warmup - init_buffer - term_buffer
    windows, start, size = [], init_buffer, base_window
    end_of_windows = warmup - term_buffer
    while start < end_of_windows:
        end = start + size
        if end + 2 * size > end_of_windows:  # the next window would not fit: stretch this one
            end = end_of_windows
        windows.append((start, end))
        start, size = end, 2 * size
    return windows


def van_der_corput(i: int) -> float:
    """The ``i``-th (1-based) point of the base-2 van der Corput sequence in (0, 1): the
    one-dimensional Halton sequence that ChEES-HMC uses for its jitter: 0.5, 0.25, 0.75, ..."""
    x, f = 0.0, 0.5
    while i > 0:
        x += f * (i & 1)
        i >>= 1
        f /= 2
    return x


def kinetic_energy(p: Tensor, inv_mass: Tensor) -> Tensor:
    """K(p) = p^T M^-1 p / 2 per chain, for diagonal inverse masses (C, D)."""
    return 0.5 * (inv_mass * p * p).sum(-1)


def leapfrog(
    q: Tensor,
    p: Tensor,
    logp: Tensor,
    grad: Tensor,
    step: Tensor,
    inv_mass: Tensor,
    steps: Tensor,
    value_and_grad: ValueAndGrad,
    uturn: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """``steps[c]`` leapfrog steps of size ``step[c]`` for every chain c at once (Neal 2011,
    eq. 5.18-5.20): ``p += eps/2 grad; q += eps M^-1 p; p += eps/2 grad`` with the half
    steps of consecutive steps merged. Each iteration of the loop is one batched call of
    ``value_and_grad``; a chain that has done its steps, or met a non-finite density,
    stays where it is while the others go on.

    Returns (q, p, logp, grad, bad, turned): the end points, ``bad`` (C,) bool, chains whose
    density or gradient became non-finite (their end point is the last finite one), and with
    ``uturn`` the first step k (1-based; 0: never) at which chain c's trajectory turned back,
    ``(q_k - q_0)^T M^-1 p_k < 0`` (the no-U-turn criterion of Hoffman & Gelman 2014, eq. 9),
    else None."""
    longest = int(steps.max())
    shortest = int(steps.min())
    eps = step.unsqueeze(-1)
    bad = torch.zeros_like(logp, dtype=torch.bool)
    q0 = q
    turned = torch.zeros_like(steps) if uturn else None
    eps_inv_mass = eps * inv_mass
    p = torch.addcmul(p, eps, grad, value=0.5)
    for k in range(longest):
        if k < shortest and not bool(bad.any()):
            # every chain still integrating: no masks, one finiteness test for the batch
            q_new = torch.addcmul(q, eps_inv_mass, p)
            logp_new, grad_new = value_and_grad(q_new)
            if bool(torch.isfinite(logp_new.sum() + grad_new.sum())):
                q, logp, grad = q_new, logp_new, grad_new
                if turned is not None:
                    turned = _u_turns(turned, k, q, q0, p, eps, grad, inv_mass, None)
                if k < shortest - 1:
                    p = torch.addcmul(p, eps, grad)
                else:  # the last step of the shortest chains: their closing half step
                    p = p + torch.where(k == steps - 1, 0.5, 1.0).unsqueeze(-1) * eps * grad
                continue
        else:
            q_new = torch.where(((k < steps) & ~bad).unsqueeze(-1), torch.addcmul(q, eps_inv_mass, p), q)
            logp_new, grad_new = value_and_grad(q_new)
        # some chain done or not finite: per-chain masks
        q, logp, grad, bad, active = _masked_move(k, steps, bad, (q, logp, grad), (q_new, logp_new, grad_new))
        if turned is not None:
            turned = _u_turns(turned, k, q, q0, p, eps, grad, inv_mass, active)
        # a full momentum step, or a half one after the chain's last position step
        half = torch.where(k == steps - 1, 0.5, 1.0).unsqueeze(-1)
        p = torch.where(active.unsqueeze(-1), p + half * eps * grad, p)
    return q, p, logp, grad, bad, turned


def _masked_move(
    k: int, steps: Tensor, bad: Tensor, old: tuple[Tensor, Tensor, Tensor], new: tuple[Tensor, Tensor, Tensor]
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """:func:`leapfrog`'s position step ``k`` under per-chain masks: the chains still
    integrating and finite at ``new`` (q, logp, grad) move there, the others keep ``old``.
    Returns (q, logp, grad, bad, active)."""
    q, logp, grad = old
    q_new, logp_new, grad_new = new
    finite = torch.isfinite(logp_new) & torch.isfinite(grad_new.sum(-1))
    active = (k < steps) & ~bad
    bad = bad | (active & ~finite)
    active = active & finite  # a chain that met a non-finite density stays at its last finite point
    q = torch.where(active.unsqueeze(-1), q_new, q)
    logp = torch.where(active, logp_new, logp)
    grad = torch.where(active.unsqueeze(-1), grad_new, grad)
    return q, logp, grad, bad, active


def _u_turns(
    turned: Tensor,
    k: int,
    q: Tensor,
    q0: Tensor,
    p_half: Tensor,
    eps: Tensor,
    grad: Tensor,
    inv_mass: Tensor,
    active: Tensor | None,
) -> Tensor:
    """``turned`` with step k + 1 recorded for the chains whose trajectory first turns back
    at q_k: ``(q_k - q_0)^T M^-1 p_k < 0``, the momentum at q_k being half a step on from
    ``p_half`` = p_{k-1/2}."""
    p_k = torch.addcmul(p_half, eps, grad, value=0.5)
    back = ((q - q0) * inv_mass * p_k).sum(-1) < 0
    if active is not None:
        back = back & active
    return torch.where((turned == 0) & back, k + 1, turned)


@dataclass
class DualAveraging:
    """Per-chain dual averaging state of Hoffman & Gelman (2014), Alg. 5 (all (C,) float64,
    ``count`` shared): ``h_bar`` the running mean of (target - acceptance), ``log_step``
    the current iterate, ``log_step_bar`` its weighted average, ``mu`` the shrinkage point."""

    count: int
    h_bar: Tensor
    log_step: Tensor
    log_step_bar: Tensor
    mu: Tensor


def dual_averaging_init(step: Tensor) -> DualAveraging:
    """Start dual averaging at step sizes ``step`` (C,): mu = log(10 eps_0) (H&G 2014, Sec. 3.2)."""
    log_step = step.log()
    return DualAveraging(0, torch.zeros_like(step), log_step, torch.zeros_like(step), log_step + math.log(10.0))


def dual_averaging_update(
    da: DualAveraging, accept: Tensor, target: float, gamma: float = 0.05, t0: float = 10.0, kappa: float = 0.75
) -> DualAveraging:
    """One step of H&G 2014 eq. (6): ``H_t = (1 - 1/(t + t0)) H_{t-1} + (delta - alpha_t) / (t + t0)``,
    ``log eps_t = mu - sqrt(t) / gamma H_t``, ``log eps_bar_t = t^-kappa log eps_t +
    (1 - t^-kappa) log eps_bar_{t-1}``."""
    t = da.count + 1
    w = 1.0 / (t + t0)
    h_bar = (1 - w) * da.h_bar + w * (target - accept)
    log_step = da.mu - math.sqrt(t) / gamma * h_bar
    eta = t ** (-kappa)
    log_step_bar = eta * log_step + (1 - eta) * da.log_step_bar
    return DualAveraging(t, h_bar, log_step, log_step_bar, da.mu)


def _initial_step(
    q: Tensor,
    logp: Tensor,
    grad: Tensor,
    inv_mass: Tensor,
    step: Tensor,
    value_and_grad: ValueAndGrad,
    generator: torch.Generator,
) -> tuple[Tensor, int]:
    """Hoffman & Gelman (2014), Alg. 4 for every chain: double (or halve) the step size
    until one leapfrog step's acceptance probability crosses 1/2. Returns the step sizes
    and the number of batched gradient calls."""
    p = torch.randn(q.shape, generator=generator, dtype=q.dtype) / inv_mass.sqrt()
    h0 = -logp + kinetic_energy(p, inv_mass)
    ones = torch.ones_like(logp, dtype=torch.long)

    def log_accept(eps: Tensor) -> Tensor:
        _, p1, lp1, _, bad, _ = leapfrog(q, p, logp, grad, eps, inv_mass, ones, value_and_grad)
        a = h0 - (-lp1 + kinetic_energy(p1, inv_mass))
        return torch.where(bad | ~torch.isfinite(a), -math.inf, a)

    step = step.clone()
    a = log_accept(step)
    direction = torch.where(a > math.log(0.5), 1.0, -1.0).to(step.dtype)
    searching = torch.ones_like(logp, dtype=torch.bool)
    calls = 1
    for _ in range(100):
        step = torch.where(searching, step * 2.0**direction, step)
        a = log_accept(step)
        calls += 1
        searching = searching & (direction * a > direction * math.log(0.5))
        if not bool(searching.any()):
            break
    return step.clamp(1e-10, 1e3), calls


@dataclass
class _Welford:
    """Per-chain running mean and sum of squared deviations (Welford 1962), (C, D) float64."""

    count: int
    mean: Tensor
    m2: Tensor

    @classmethod
    def empty(cls, like: Tensor) -> _Welford:
        return cls(0, torch.zeros_like(like), torch.zeros_like(like))

    def update(self, x: Tensor) -> None:
        self.count += 1
        delta = x - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (x - self.mean)

    def regularised_variance(self) -> Tensor:
        """Stan's shrinkage: ``n / (n + 5) var + 1e-3 * 5 / (n + 5)``."""
        n = self.count
        return (n / (n + 5.0)) * self.m2 / max(n - 1, 1) + 1e-3 * (5.0 / (n + 5.0))


# ----------------------------------------------------------------------------- sampler
#: T is learnt as this quantile of the chains' times to their first U-turn: log T moves by
#: TRAJECTORY_RATE * (quantile - share of the chains that turned back within T) per warmup
#: iteration (Robbins-Monro for a quantile). Not the median: in an ill-conditioned target
#: many trajectories turn early, on the medium directions, while the widest needs longer
TRAJECTORY_QUANTILE = 0.9
TRAJECTORY_RATE = 0.1
#: weight of iteration t in the iterate average of log T (t counted from the last mass update)
TRAJECTORY_AVERAGE_DECAY = 0.5


def _fresh_state(value_and_grad: ValueAndGrad, init: Tensor, settings: HMCSettings, seed: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(int(seed))
    q = init.detach().to(torch.float64).clone()
    logp, grad = value_and_grad(q)
    if not bool(torch.isfinite(logp).all()):
        raise ValueError("the log density is not finite at every initial point")
    inv_mass = torch.ones_like(q)
    step, calls = _initial_step(q, logp, grad, inv_mass, torch.full_like(logp, 0.1), value_and_grad, generator)
    chains = q.shape[0]
    return {
        "iteration": 0,
        "q": q,
        "logp": logp,
        "grad": grad,
        "inv_mass": inv_mass,
        "step": step,
        "da": asdict(dual_averaging_init(step)),
        # trajectory length: log T (iterate), its average since the last mass update and their count
        "log_T": math.log(settings.trajectory_length)
        if settings.trajectory_length
        else float(step.median().log()) + math.log(10.0),
        "log_T_bar": 0.0,
        "T_count": 0,
        "welford": asdict(_Welford.empty(q)),
        # zeros, not torch.empty: a checkpoint holds no uninitialised memory (a NaN there
        # would fail its finiteness check when read, repens.core.jobkey.read_checkpoint)
        "draws": torch.zeros(chains, settings.kept, q.shape[1], dtype=torch.float32),
        "draw_logp": torch.zeros(chains, settings.kept, dtype=torch.float64),
        "generator": generator.get_state(),
        "stats": {
            "gradient_calls": 1 + calls,  # batched calls (each evaluates every chain)
            "leapfrog_steps": torch.zeros(chains, dtype=torch.long),  # useful steps per chain
            "warmup_divergences": torch.zeros(chains, dtype=torch.long),
            "divergences": torch.zeros(chains, dtype=torch.long),
            "accept_sum": torch.zeros(chains, dtype=torch.float64),
            "warmup_seconds": 0.0,
            "seconds": 0.0,
            "warmup_gradient_calls": 0,
        },
    }


def _state_key(key: str | None, settings: HMCSettings, init: Tensor, seed: int) -> str:
    sampling = {k: v for k, v in settings.to_dict().items() if k not in ("rhat_max", "ess_min")}
    return f"{key}|{sorted(sampling.items())}|{tuple(init.shape)}|{seed}|v{SAMPLER_VERSION}"


def _resumed_state(checkpoint: Path | None, key: str, settings: HMCSettings) -> dict[str, Any] | None:
    """The sampler state of a checkpoint made under ``key`` (None: none, or one set aside)."""
    saved = (
        load_keyed_checkpoint(checkpoint, key, log, then="sampling from the start") if checkpoint is not None else None
    )
    state = saved["state"] if saved is not None else None
    if state is not None:
        log.info(
            "resumed from %s at iteration %d/%d", checkpoint, state["iteration"], settings.warmup + settings.samples
        )
    return state


def sample_hmc(
    value_and_grad: ValueAndGrad,
    init: Tensor,
    settings: HMCSettings,
    seed: int,
    *,
    checkpoint: Path | None = None,
    checkpoint_key: str | None = None,
    checkpoint_seconds: float = 300.0,
    log_every: int | None = None,
) -> tuple[Tensor, dict[str, Any]]:
    """HMC draws from the log density of ``value_and_grad``: (chains, settings.kept, D) float32,
    and the sampler's statistics (see the module docstring for the algorithm).

    Args:
        value_and_grad: (C, D) float64 -> (log density (C,), gradient (C, D)), float64;
            rows are independent chains.
        init: (chains, D) initial points; ``chains`` must equal ``settings.chains``.
        settings: see :class:`HMCSettings`.
        seed: seeds the sampler's own generator (callers' random streams are untouched).
        checkpoint: file for the sampler state, written every ``checkpoint_seconds``, on
            SIGTERM / SIGINT (then :class:`repens.training.train.Interrupted` is raised) and when
            sampling is done (the caller removes it once the draws are accepted). A run
            finds it and resumes where it stopped, bit-identically, when it was made under
            the same ``checkpoint_key``, settings (thresholds aside), shapes and seed and
            it passes its checks (:func:`repens.core.jobkey.read_checkpoint`); otherwise it is
            set aside as ``<name>.stale``.
        log_every: iterations between progress lines (default: a tenth of the run).

    The statistics: per-chain ``step_size``, ``accept_prob`` (mean while sampling),
    ``divergences``; ``trajectory_length`` T, ``mean_leapfrog`` per chain and iteration,
    ``gradient_calls`` (batched), ``masked_fraction`` (of the gradient rows computed for
    chains that had finished their trajectory), seconds of warmup and in all.
    """
    if init.dim() != 2:
        raise ValueError(f"init must be (chains, D), got shape {tuple(init.shape)}")
    if init.shape[0] != settings.chains:
        raise ValueError(f"init has {init.shape[0]} rows but settings.chains = {settings.chains}")
    key = _state_key(checkpoint_key, settings, init, seed)
    state = _resumed_state(checkpoint, key, settings) or _fresh_state(value_and_grad, init, settings, seed)

    def save() -> None:
        if checkpoint is not None:
            from repens.core.atomic import torch_save_atomic

            state["generator"] = generator.get_state()
            torch_save_atomic({"key": key, "state": state}, checkpoint)

    generator = torch.Generator()
    generator.set_state(state["generator"])
    from repens.training.train import stop_signals

    with stop_signals(checkpoint is not None) as stop:
        _run(value_and_grad, settings, state, generator, save, stop, checkpoint, checkpoint_seconds, log_every)
    save()  # done: kept until the caller has accepted the draws
    return state["draws"], _summary(state, settings)


@dataclass
class _Chains:
    """The sampler's working state of every chain, read from and stored back to the
    checkpointed state dict: position, log density, gradient, inverse mass, step size,
    dual averaging and the running moments of the mass window."""

    q: Tensor
    logp: Tensor
    grad: Tensor
    inv_mass: Tensor
    step: Tensor
    da: DualAveraging
    welford: _Welford

    @classmethod
    def of(cls, state: dict[str, Any]) -> _Chains:
        return cls(
            state["q"],
            state["logp"],
            state["grad"],
            state["inv_mass"],
            state["step"],
            DualAveraging(**state["da"]),
            _Welford(**state["welford"]),
        )

    def store(self, state: dict[str, Any], iteration: int) -> None:
        state.update(
            iteration=iteration,
            q=self.q,
            logp=self.logp,
            grad=self.grad,
            inv_mass=self.inv_mass,
            step=self.step,
            da=dict(vars(self.da)),
            welford=dict(vars(self.welford)),
        )


@dataclass
class _Transition:
    """What one transition of every chain did: leapfrog steps, divergence, acceptance
    probability, first U-turn (steps), and the trajectory length T it aimed at."""

    steps: Tensor
    divergent: Tensor
    accept: Tensor
    turned: Tensor
    T: float
    adapt_T: bool


def _trajectory(state: dict[str, Any], settings: HMCSettings, it: int) -> tuple[float, float, bool]:
    """(T, jitter u, whether T is being learnt) of iteration ``it``."""
    warm = it < settings.warmup
    adapt_T = warm and settings.trajectory_length is None
    if warm:
        return (
            math.exp(state["log_T"]),
            (1.0 if adapt_T else van_der_corput(it + 1)),
            adapt_T,
        )  # learning T: full length
    return state["T_final"], van_der_corput(it + 1), adapt_T


def _transition(
    chains: _Chains,
    state: dict[str, Any],
    settings: HMCSettings,
    it: int,
    value_and_grad: ValueAndGrad,
    generator: torch.Generator,
) -> _Transition:
    """One jittered HMC transition of every chain; moves ``chains`` to the accepted points."""
    T, u, adapt_T = _trajectory(state, settings, it)
    st, q, step, inv_mass = state["stats"], chains.q, chains.step, chains.inv_mass
    # each chain integrates for about u T: ceil(u T / eps_c) steps of its own size (a chain
    # in a stiff region, with a small eps_c, takes more steps rather than moving less)
    steps = torch.ceil(u * T / step).clamp(1, settings.max_leapfrog).to(torch.long)
    p0 = torch.randn(q.shape, generator=generator, dtype=q.dtype) / inv_mass.sqrt()
    h0 = -chains.logp + kinetic_energy(p0, inv_mass)
    q1, p1, logp1, grad1, bad, turned = leapfrog(
        q, p0, chains.logp, chains.grad, step, inv_mass, steps, value_and_grad, uturn=adapt_T
    )
    delta = (-logp1 + kinetic_energy(p1, inv_mass)) - h0
    divergent = bad | ~torch.isfinite(delta) | (delta > DIVERGENCE_NATS)
    accept = torch.where(divergent, 0.0, torch.exp(-delta.clamp_min(0.0)))
    uniform = torch.rand(q.shape[0], generator=generator, dtype=q.dtype)
    take = ~divergent & (uniform.log() < -delta)
    st["gradient_calls"] += int(steps.max())
    st["leapfrog_steps"] += steps
    chains.q = torch.where(take.unsqueeze(-1), q1, q)
    chains.logp = torch.where(take, logp1, chains.logp)
    chains.grad = torch.where(take.unsqueeze(-1), grad1, chains.grad)
    return _Transition(steps, divergent, accept, turned, T, adapt_T)


def _learn_trajectory_length(state: dict[str, Any], settings: HMCSettings, step: Tensor, tr: _Transition) -> None:
    """log T towards the TRAJECTORY_QUANTILE of the chains' times to their first U-turn."""
    full = (tr.steps * step >= tr.T) & ~tr.divergent  # ran the whole T: a U-turn would show
    back = (tr.turned > 0) & (tr.turned * step <= tr.T) & ~tr.divergent  # turned back within T
    known = back | full
    if bool(known.any()):
        turned_share = float(back.sum()) / float(known.sum())
        lo, hi = float(step.median().log()), float((settings.max_leapfrog * step.median()).log())
        state["log_T"] = min(max(state["log_T"] + TRAJECTORY_RATE * (TRAJECTORY_QUANTILE - turned_share), lo), hi)


def _adapt_mass(
    chains: _Chains,
    state: dict[str, Any],
    settings: HMCSettings,
    done: int,
    windows: list[tuple[int, int]],
    value_and_grad: ValueAndGrad,
    generator: torch.Generator,
) -> None:
    """Stan's windows, per chain: collect the draws of a window; at its end, the inverse
    mass from them, a new step size search and dual averaging restarted."""
    window_ends = {end: start for start, end in windows}
    if done - 1 in {start for start, _ in windows} or chains.welford.count > 0:
        chains.welford.update(chains.q)
    if done not in window_ends:
        return
    chains.inv_mass = chains.welford.regularised_variance()
    chains.welford = _Welford.empty(chains.q)
    chains.step, calls = _initial_step(
        chains.q, chains.logp, chains.grad, chains.inv_mass, chains.step, value_and_grad, generator
    )
    state["stats"]["gradient_calls"] += calls
    chains.da = dual_averaging_init(chains.step)
    state["T_count"], state["log_T_bar"] = 0, 0.0
    log.info(
        "iteration %d: mass matrices from %d draws (median inverse mass %.3g, range %.3g-%.3g), "
        "step sizes restarted at median %.3g",
        done,
        done - window_ends[done],
        float(chains.inv_mass.median()),
        float(chains.inv_mass.min()),
        float(chains.inv_mass.max()),
        float(chains.step.median()),
    )


class _Clock:
    """Wall and CPU seconds of a run, added to what a resumed run's checkpoint had counted."""

    def __init__(self, stats: dict[str, Any]) -> None:
        self.started, self.cpu_started = time.perf_counter(), time.process_time()
        self.seconds0, self.cpu0 = stats["seconds"], stats.setdefault("cpu_seconds", 0.0)

    def seconds(self) -> float:
        return self.seconds0 + time.perf_counter() - self.started

    def cpu_seconds(self) -> float:
        return self.cpu0 + time.process_time() - self.cpu_started


def _end_warmup(chains: _Chains, state: dict[str, Any], settings: HMCSettings, clock: _Clock) -> None:
    """The averaged step sizes and trajectory length for sampling; the warmup's costs."""
    st = state["stats"]
    chains.step = step = chains.da.log_step_bar.exp()
    state["T_final"] = min(
        math.exp(state["log_T_bar"] if state["T_count"] else state["log_T"]), settings.max_leapfrog * float(step.max())
    )
    st["warmup_seconds"], st["warmup_cpu_seconds"] = clock.seconds(), clock.cpu_seconds()
    st["warmup_gradient_calls"] = st["gradient_calls"]
    st["warmup_leapfrog_steps"] = st["leapfrog_steps"].clone()
    log.info(
        "warmup done in %.1f s: step sizes %s, trajectory length %.3g (%.0f-%.0f leapfrog steps "
        "at full length), %d warmup divergences",
        st["warmup_seconds"],
        _fmt(step),
        state["T_final"],
        float((state["T_final"] / step).min()),
        float((state["T_final"] / step).max()),
        int(st["warmup_divergences"].sum()),
    )


def _warmup_update(
    chains: _Chains,
    tr: _Transition,
    state: dict[str, Any],
    settings: HMCSettings,
    it: int,
    windows: list[tuple[int, int]],
    value_and_grad: ValueAndGrad,
    generator: torch.Generator,
    clock: _Clock,
) -> None:
    """After a warmup transition: trajectory length, step sizes (H&G 2014 eq. 6), mass matrices."""
    state["stats"]["warmup_divergences"] += tr.divergent.long()
    if tr.adapt_T:
        _learn_trajectory_length(state, settings, chains.step, tr)
    chains.da = dual_averaging_update(chains.da, tr.accept, settings.target_accept)
    chains.step = chains.da.log_step.exp()
    state["T_count"] += 1
    eta = state["T_count"] ** (-TRAJECTORY_AVERAGE_DECAY)
    state["log_T_bar"] = eta * state["log_T"] + (1 - eta) * state["log_T_bar"]
    if settings.adapt_mass:
        _adapt_mass(chains, state, settings, it + 1, windows, value_and_grad, generator)
    if it + 1 == settings.warmup:
        _end_warmup(chains, state, settings, clock)


def _keep_draw(chains: _Chains, tr: _Transition, state: dict[str, Any], settings: HMCSettings, it: int) -> None:
    """After a sampling transition: its statistics, and the draw where the thinning keeps it."""
    st = state["stats"]
    st["divergences"] += tr.divergent.long()
    st["accept_sum"] += tr.accept
    j = it - settings.warmup + 1
    if j % settings.thin == 0 and j // settings.thin <= settings.kept:
        state["draws"][:, j // settings.thin - 1] = chains.q.float()
        state["draw_logp"][:, j // settings.thin - 1] = chains.logp


def _log_progress(
    chains: _Chains,
    tr: _Transition,
    state: dict[str, Any],
    warm: bool,
    done: int,
    first: int,
    total: int,
    clock: _Clock,
) -> None:
    rate = (done - first) / max(time.perf_counter() - clock.started, 1e-9)
    log.info(
        "%s %d/%d, %.1f s, ETA %.0f s: step size median %.3g, T %.3g, %.1f leapfrog steps, "
        "accept %.2f, log density median %.1f",
        "warmup" if warm else "sampling",
        done,
        total,
        state["stats"]["seconds"],
        (total - done) / rate,
        float(chains.step.median()),
        tr.T,
        float(tr.steps.float().mean()),
        float(tr.accept.mean()),
        float(chains.logp.median()),
    )


def _run(
    value_and_grad: ValueAndGrad,
    settings: HMCSettings,
    state: dict[str, Any],
    generator: torch.Generator,
    save: Callable[[], None],
    stop: dict[str, int | None],
    checkpoint: Path | None,
    checkpoint_seconds: float,
    log_every: int | None,
) -> None:
    from repens.training.train import Every, stop_if_signalled

    total = settings.warmup + settings.samples
    windows = adaptation_windows(settings.warmup)
    every = log_every or max(1, total // 10)
    chains, first = _Chains.of(state), state["iteration"]
    clock, periodic = _Clock(state["stats"]), Every(checkpoint_seconds)
    if settings.warmup == 0:
        state.setdefault("T_final", math.exp(state["log_T"]))
    for it in range(first, total):
        warm = it < settings.warmup
        tr = _transition(chains, state, settings, it, value_and_grad, generator)
        if warm:
            _warmup_update(chains, tr, state, settings, it, windows, value_and_grad, generator, clock)
        else:
            _keep_draw(chains, tr, state, settings, it)
        done = it + 1
        chains.store(state, done)
        state["stats"]["seconds"], state["stats"]["cpu_seconds"] = clock.seconds(), clock.cpu_seconds()
        if done % every == 0 and done < total:
            _log_progress(chains, tr, state, warm, done, first, total, clock)
        stop_if_signalled(stop, save, f"HMC iteration {done}/{total}", checkpoint)
        if checkpoint is not None and periodic.due():
            save()
            periodic.restart()


def _fmt(x: Tensor) -> str:
    return "[" + ", ".join(f"{float(v):.3g}" for v in x) + "]"


def _summary(state: dict[str, Any], settings: HMCSettings) -> dict[str, Any]:
    st = state["stats"]
    chains = state["q"].shape[0]
    warm_steps = st.get("warmup_leapfrog_steps", torch.zeros(chains, dtype=torch.long))
    sampling_steps = st["leapfrog_steps"] - warm_steps
    useful = int(st["leapfrog_steps"].sum())
    computed = st["gradient_calls"] * chains
    return {
        "step_size": state["step"].tolist(),
        "accept_prob": (st["accept_sum"] / settings.samples).tolist(),
        "divergences": st["divergences"].tolist(),
        "warmup_divergences": st["warmup_divergences"].tolist(),
        "trajectory_length": float(state.get("T_final", float("nan"))),
        "mean_leapfrog": float(sampling_steps.double().mean() / settings.samples),
        "gradient_calls": int(st["gradient_calls"]),
        "warmup_gradient_calls": int(st["warmup_gradient_calls"]),
        "masked_fraction": 1.0 - useful / max(computed, 1),
        "warmup_seconds": float(st["warmup_seconds"]),
        "seconds": float(st["seconds"]),
        "warmup_cpu_seconds": float(st.get("warmup_cpu_seconds", 0.0)),
        "cpu_seconds": float(st.get("cpu_seconds", 0.0)),
        "draw_logp": state["draw_logp"],
    }


# ----------------------------------------------------------------------------- diagnostics
def _split(x: np.ndarray) -> np.ndarray:
    """(C, N, K) -> (2C, N // 2, K): first and last halves of each chain (the middle draw of
    an odd N is dropped), as Vehtari et al. (2021) and ArviZ split them."""
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half :]], axis=0)


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Rank normalisation (Vehtari et al. 2021, eq. 14): pooled average ranks r of all
    draws, z = Phi^-1((r - 3/8) / (S + 1/4)), per quantity (last axis)."""
    c, n, k = x.shape
    ranks = rankdata(x.reshape(c * n, k), axis=0, method="average")
    return ndtri((ranks - 0.375) / (c * n + 0.25)).reshape(c, n, k)


def _rhat(x: np.ndarray) -> np.ndarray:
    """Potential scale reduction of (chains, N, K) (Gelman et al. BDA3 eq. 11.4), per quantity."""
    n = x.shape[1]
    between = n * x.mean(1).var(0, ddof=1)
    within = x.var(1, ddof=1).mean(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def rhat_rank(x: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat (Vehtari et al. 2021, Sec. 4.2): the larger of the split
    R-hat of the rank-normalised draws (bulk) and of the rank-normalised |x - median| (tail).
    x: (chains, N, K) -> (K,). NaN for a quantity that never moves."""
    x = np.asarray(x, dtype=np.float64)
    split = _split(x)
    bulk = _rhat(_z_scale(split))
    folded = np.abs(split - np.median(x.reshape(-1, x.shape[-1]), axis=0))
    tail = _rhat(_z_scale(folded))
    constant = np.ptp(x.reshape(-1, x.shape[-1]), axis=0) == 0
    return np.where(constant, np.nan, np.maximum(bulk, tail))


def _autocov(x: np.ndarray) -> np.ndarray:
    """Biased autocovariance (divided by N) along axis 1 by FFT, (C, N, K)."""
    n = x.shape[1]
    m = 1 << (2 * n - 1).bit_length()
    x = x - x.mean(1, keepdims=True)
    f = np.fft.rfft(x, n=m, axis=1)
    return np.fft.irfft(f * np.conjugate(f), n=m, axis=1)[:, :n] / n


def ess_basic(x: np.ndarray) -> np.ndarray:
    """Effective sample size of (chains, N, K) draws, per quantity (Vehtari et al. 2021,
    eq. 10-13, as Stan and ArviZ compute it): multi-chain autocorrelations
    ``rho_t = 1 - (W - mean_c acov_c(t)) / var+``, summed over Geyer's (1992) initial
    positive sequence of pair sums made monotone, ``ESS = C N / tau``,
    ``tau = -1 + 2 sum_{t <= 2k-1} rho_t + max(rho_{2k}, 0)``, ``tau >= 1 / log10(C N)``.
    Used on split chains by :func:`ess_bulk` and :func:`ess_tail`."""
    x = np.asarray(x, dtype=np.float64)
    c, n, k = x.shape
    acov = _autocov(x)  # (C, N, K)
    mean_var = acov[:, 0].mean(0) * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if c > 1:
        var_plus = var_plus + x.mean(1).var(0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (mean_var - acov.mean(0)) / var_plus  # (N, K)
    rho[0] = 1.0
    pairs = n // 2
    pair = rho[0 : 2 * pairs : 2] + rho[1 : 2 * pairs : 2]  # P_j = rho_2j + rho_2j+1, (pairs, K)
    # Stan's and ArviZ's loop stops at the first j with P_j <= 0 or 2 j + 1 >= n - 3 (k*);
    # rho_0 .. rho_{2k*-1} enter, their pair sums made non-increasing (Geyer's initial
    # monotone sequence: a running minimum), and rho_{2k*} where positive
    limit = max(0, -(-(n - 4) // 2))
    nonpositive = pair[: limit + 1] <= 0
    stop = np.where(nonpositive.any(0), nonpositive.argmax(0), limit)  # k*, (K,)
    mono = np.minimum.accumulate(pair, axis=0)
    cums = np.concatenate([np.zeros((1, k)), np.cumsum(mono, axis=0)])  # sums of the first j pairs
    idx = np.arange(k)
    last_even = rho[2 * stop, idx]
    last_pair = pair[stop, idx]
    tau = -1.0 + 2.0 * cums[stop, idx] + np.where((last_even > 0) | (last_pair >= 0), last_even, 0.0)
    tau = np.maximum(tau, 1.0 / np.log10(c * n))
    ess = c * n / tau
    constant = np.ptp(x.reshape(-1, k), axis=0) < np.finfo(np.float64).resolution
    ess = np.where(constant, float(c * n), ess)
    return np.where(np.isnan(rho).any(0) & ~constant, np.nan, ess)


def ess_bulk(x: np.ndarray) -> np.ndarray:
    """Bulk ESS (Vehtari et al. 2021, Sec. 4.3): ESS of the rank-normalised split chains, (C, N, K) -> (K,)."""
    return ess_basic(_z_scale(_split(np.asarray(x, dtype=np.float64))))


def ess_tail(x: np.ndarray) -> np.ndarray:
    """Tail ESS (Vehtari et al. 2021, Sec. 4.3): the smaller ESS of the split-chain indicators
    I(x <= q_0.05) and I(x <= q_0.95), quantiles of all draws pooled; (C, N, K) -> (K,)."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1, x.shape[-1])
    q05, q95 = np.quantile(flat, [0.05, 0.95], axis=0)
    return np.minimum(
        ess_basic(_split((x <= q05).astype(np.float64))), ess_basic(_split((x <= q95).astype(np.float64)))
    )


#: memory budget of one chunk of :func:`predictive_diagnostics` (the FFTs of the ESS)
_DIAGNOSTICS_BYTES = 2**27


def predictive_diagnostics(f: Tensor | np.ndarray, chunk: int = 256) -> dict[str, Any]:
    """Rank-normalised split R-hat, bulk and tail ESS of predictions f: (chains, samples, T, ...).

    Each quantity f[:, :, t, ...] is diagnosed separately (:func:`rhat_rank`, :func:`ess_bulk`,
    :func:`ess_tail`, in float64, ``chunk`` test inputs at a time or fewer to bound memory);
    a test input with several outputs (e.g. class probabilities) reports its worst output.
    Returns the per-input arrays ``rhat``, ``ess_bulk``, ``ess_tail`` and ``ess`` (the
    smaller of the two ESS), their summaries ``rhat_max``, ``rhat_mean``, ``ess_bulk_min``,
    ``ess_tail_min``, ``ess_min``, ``ess_mean`` (NaN when a quantity never moves, which
    then fails :func:`check_diagnostics`), ``chains`` and ``draws``.
    """
    f = f.detach().cpu().double().numpy() if isinstance(f, Tensor) else np.asarray(f, dtype=np.float64)
    if f.ndim < 3:
        raise ValueError(f"f must be (chains, samples, T, ...), got shape {tuple(f.shape)}")
    chains, samples = f.shape[:2]
    if chains < 2:
        raise ValueError("R-hat needs at least 2 chains")
    if samples < 4:
        raise ValueError("split R-hat needs at least 4 draws per chain")
    per_input = math.prod(f.shape[3:]) * chains * samples * 8 * 8
    chunk = max(1, min(chunk, _DIAGNOSTICS_BYTES // per_input))
    rhats, bulks, tails = [], [], []
    for i in range(0, f.shape[2], chunk):
        g = f[:, :, i : i + chunk]
        t = g.shape[2]
        g = g.reshape(chains, samples, -1)
        # R-hat is NaN exactly where a quantity never moves in any chain (a class probability
        # saturated at 0 or 1 in every draw): chains started apart that agree exactly have
        # nothing left to mix, so such outputs do not count; an input all of whose outputs
        # never move stays NaN (and fails the check, as a sampler that never moved would)
        rhats.append(_worst(rhat_rank(g).reshape(t, -1), np.nanmax, ignore_nan=True))
        bulks.append(_worst(ess_bulk(g).reshape(t, -1), np.min))
        tails.append(_worst(ess_tail(g).reshape(t, -1), np.min))
    return summarise_diagnostics(
        np.concatenate(rhats), np.concatenate(bulks), np.concatenate(tails), chains, chains * samples
    )


def _worst(x: np.ndarray, op: Callable[..., np.ndarray], ignore_nan: bool = False) -> np.ndarray:
    """The worst output of each input (rows); NaN if any output is NaN (``ignore_nan``: if
    all are; ``op`` is then a NaN-ignoring reduction)."""
    missing = np.isnan(x).all(-1) if ignore_nan else np.isnan(x).any(-1)
    with np.errstate(all="ignore"):
        safe = np.where(np.isnan(x).all(-1, keepdims=True), 0.0, x) if ignore_nan else x
        return np.where(missing, np.nan, op(safe, axis=-1))


def summarise_diagnostics(
    rhat: np.ndarray, ess_bulk_: np.ndarray, ess_tail_: np.ndarray, chains: int, draws: int
) -> dict[str, Any]:
    """The dict of :func:`predictive_diagnostics` from per-input arrays (e.g. concatenated
    over chunks of test inputs)."""
    rhat = np.asarray(rhat, dtype=np.float64)
    bulk, tail = np.asarray(ess_bulk_, dtype=np.float64), np.asarray(ess_tail_, dtype=np.float64)
    ess = np.where(np.isnan(bulk) | np.isnan(tail), np.nan, np.minimum(bulk, tail))

    def reduce(x: np.ndarray, op: Callable[[np.ndarray], Any]) -> float:
        return float("nan") if np.isnan(x).any() else float(op(x))

    return {
        "rhat_max": reduce(rhat, np.max),
        "rhat_mean": reduce(rhat, np.mean),
        "ess_bulk_min": reduce(bulk, np.min),
        "ess_tail_min": reduce(tail, np.min),
        "ess_min": reduce(ess, np.min),
        "ess_mean": reduce(ess, np.mean),
        "chains": int(chains),
        "draws": int(draws),
        "rhat": rhat,
        "ess_bulk": bulk,
        "ess_tail": tail,
        "ess": ess,
    }


def check_diagnostics(diag: Mapping[str, Any], settings: HMCSettings) -> None:
    """Raise :class:`HMCDiagnosticsError` unless rhat_max <= settings.rhat_max and
    ess_min (bulk and tail) >= settings.ess_min (NaN fails both)."""
    rhat, ess = float(diag["rhat_max"]), float(diag["ess_min"])
    problems = []
    if not rhat <= settings.rhat_max:
        problems.append(f"rank-normalised split R-hat max {rhat:.4g} > {settings.rhat_max:g}")
    if not ess >= settings.ess_min:
        detail = ""
        if "ess_bulk_min" in diag:
            detail = f" (bulk {float(diag['ess_bulk_min']):.4g}, tail {float(diag['ess_tail_min']):.4g})"
        problems.append(f"ESS min {ess:.4g}{detail} < {settings.ess_min:g}")
    if not problems:
        return
    draws = diag.get("draws")
    advice = []
    if not rhat <= settings.rhat_max or math.isnan(rhat):
        advice.append(
            f"the chains disagree (not mixed): increase hmc.warmup (now {settings.warmup}) and "
            f"hmc.samples (now {settings.samples}), or raise hmc.max_leapfrog (now {settings.max_leapfrog})"
        )
    if not ess >= settings.ess_min:
        advice.append(
            f"too few effective draws{f' out of {draws}' if draws else ''}: increase hmc.samples "
            f"(now {settings.samples}) or hmc.chains (now {settings.chains})"
        )
    raise HMCDiagnosticsError(
        "HMC diagnostics on the predictive f(x) failed: "
        + "; ".join(problems)
        + ". To fix: "
        + "; ".join(advice)
        + " (or loosen hmc.rhat_max / hmc.ess_min, knowing the reference is then less trustworthy)."
    )
