"""Gold-standard posterior samples by the No-U-Turn sampler (NUTS, Hoffman & Gelman 2014).

Generic: :func:`sample_nuts` draws from any differentiable log density on R^D with
pyro's :class:`~pyro.infer.mcmc.NUTS` (step size and diagonal mass matrix adapted
during warmup). The chains run one after another in this process, each with
``num_chains=1`` and its own seed derived from ``seed`` and the chain index: this
is robust on a two-core machine, needs no pickling of the log density, and makes
the result independent of how many chains run before it.

Weights of a neural network are not identifiable (permutations of hidden units,
sign and scale symmetries), so convergence is judged on what the network *does*:
:func:`predictive_diagnostics` computes split R-hat and the effective sample size
of the predictive f(x) at every test input, and :func:`check_diagnostics` turns a
failed check into an :class:`HMCDiagnosticsError` that says what to change.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer.mcmc import MCMC, NUTS
from pyro.ops.stats import effective_sample_size, split_gelman_rubin
from torch import Tensor

log = logging.getLogger("repens.hmc")

__all__ = [
    "HMCSettings",
    "ChainStats",
    "HMCDiagnosticsError",
    "chain_seed",
    "sample_nuts",
    "sample_nuts_with_stats",
    "predictive_diagnostics",
    "summarise_diagnostics",
    "check_diagnostics",
]


@dataclass(frozen=True)
class HMCSettings:
    """How long to sample and what counts as converged.

    Attributes:
        chains: number of independent chains (each from its own initial point).
            At least 2 are needed for R-hat to compare chains with each other.
        warmup: NUTS iterations per chain spent adapting the step size and the
            diagonal mass matrix; discarded.
        samples: NUTS iterations per chain after warmup. Every ``thin``-th of them
            is kept, so each chain contributes ``samples // thin`` draws.
        thin: keep every ``thin``-th draw (1: keep all). Thinning only saves
            memory and evaluation time; it never improves the ESS per iteration.
        target_accept: target mean acceptance probability of the step-size
            adaptation (dual averaging); higher means smaller steps, fewer
            divergences and longer trajectories.
        max_tree_depth: NUTS doubles a trajectory at most this many times, i.e.
            at most 2**max_tree_depth - 1 gradient evaluations per iteration. This
            caps the cost per draw; a low cap makes each draw cheap but more
            correlated with the previous one.
        rhat_max: largest acceptable split R-hat of the predictive f(x) at any test
            input (1.1 is the classic threshold, 1.01 a strict one).
        ess_min: smallest acceptable effective sample size (over all chains) of the
            predictive f(x) at any test input.
    """

    chains: int = 4
    warmup: int = 1000
    samples: int = 1000
    thin: int = 1
    target_accept: float = 0.8
    max_tree_depth: int = 10
    rhat_max: float = 1.1
    ess_min: float = 100.0

    def __post_init__(self) -> None:
        for name in ("chains", "samples", "thin", "max_tree_depth"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"HMCSettings.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.warmup < 0:
            raise ValueError(f"HMCSettings.warmup must be >= 0, got {self.warmup!r}")
        if not 0.0 < self.target_accept < 1.0:
            raise ValueError(f"HMCSettings.target_accept must be in (0, 1), got {self.target_accept!r}")
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
        known = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(f"unknown HMC setting(s) {unknown}; known: {sorted(known)}")
        casts = {"chains": int, "warmup": int, "samples": int, "thin": int, "max_tree_depth": int,
                 "target_accept": float, "rhat_max": float, "ess_min": float}
        return cls(**{k: casts[k](v) for k, v in options.items()})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ChainStats:
    """What one chain did: for the log and the diagnostics file."""

    chain: int
    seed: int
    seconds: float = 0.0
    warmup_seconds: float = 0.0
    step_size: float = float("nan")  # adapted step size (after warmup)
    accept_prob: float = float("nan")  # mean acceptance probability while sampling
    divergences: int = 0  # divergent transitions while sampling
    grad_evals: int = 0  # gradient evaluations, warmup included
    leapfrog_per_draw: float = float("nan")  # mean gradient evaluations per sampling iteration
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class HMCDiagnosticsError(RuntimeError):
    """The chains did not pass the R-hat / ESS check of :func:`check_diagnostics`."""


def chain_seed(seed: int, chain: int) -> int:
    """Seed of chain ``chain`` of a run with ``seed``: independent streams, stable across runs."""
    return int(np.random.SeedSequence([int(seed), int(chain)]).generate_state(1, dtype=np.uint32)[0])


class _Counted:
    """A potential that counts its evaluations (NUTS evaluates one per leapfrog step)."""

    def __init__(self, log_density: Callable[[Tensor], Tensor]) -> None:
        self.log_density = log_density
        self.calls = 0

    def __call__(self, params: dict[str, Tensor]) -> Tensor:
        self.calls += 1
        return -self.log_density(params["w"])


def sample_nuts(
    log_density: Callable[[Tensor], Tensor],
    init: Tensor,
    settings: HMCSettings,
    seed: int,
) -> Tensor:
    """NUTS draws from ``log_density``: (chains, settings.kept, D).

    Args:
        log_density: unnormalised log density of one point, (D,) -> scalar,
            differentiable by autograd. Its dtype is that of ``init``.
        init: (chains, D) initial points, one row per chain; ``chains`` must equal
            ``settings.chains``.
        settings: see :class:`HMCSettings`.
        seed: the run's seed; chain i uses :func:`chain_seed` (seed, i).

    Deterministic for a given seed (the global torch / numpy / random RNG states
    are restored afterwards, so callers' random streams are not disturbed).
    """
    draws, _ = sample_nuts_with_stats(log_density, init, settings, seed)
    return draws


def sample_nuts_with_stats(
    log_density: Callable[[Tensor], Tensor],
    init: Tensor,
    settings: HMCSettings,
    seed: int,
    *,
    done: Mapping[int, tuple[Tensor, ChainStats]] | None = None,
    on_chain: Callable[[int, Tensor, ChainStats], None] | None = None,
) -> tuple[Tensor, list[ChainStats]]:
    """:func:`sample_nuts` plus per-chain statistics.

    Args:
        done: chains already sampled (e.g. loaded from a checkpoint), by index:
            they are not run again.
        on_chain: called after each newly sampled chain with (index, draws
            (kept, D), stats), e.g. to checkpoint it.
    """
    if init.dim() != 2:
        raise ValueError(f"init must be (chains, D), got shape {tuple(init.shape)}")
    if init.shape[0] != settings.chains:
        raise ValueError(f"init has {init.shape[0]} rows but settings.chains = {settings.chains}")
    done = dict(done or {})
    results: list[Tensor] = []
    stats: list[ChainStats] = []
    rng_states = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    try:
        for i in range(settings.chains):
            if i in done:
                draws, st = done[i]
                log.info("chain %d/%d: restored from checkpoint", i + 1, settings.chains)
            else:
                draws, st = _run_chain(log_density, init[i], settings, seed, i)
                if on_chain is not None:
                    on_chain(i, draws, st)
            results.append(draws)
            stats.append(st)
    finally:
        torch.set_rng_state(rng_states[0])
        np.random.set_state(rng_states[1])
        random.setstate(rng_states[2])
    return torch.stack(results), stats


def _run_chain(
    log_density: Callable[[Tensor], Tensor], init: Tensor, settings: HMCSettings, seed: int, index: int
) -> tuple[Tensor, ChainStats]:
    st = ChainStats(chain=index, seed=chain_seed(seed, index))
    pyro.set_rng_seed(st.seed)
    potential = _Counted(log_density)
    kernel = NUTS(
        potential_fn=potential,
        adapt_step_size=True,
        adapt_mass_matrix=True,
        full_mass=False,
        target_accept_prob=settings.target_accept,
        max_tree_depth=settings.max_tree_depth,
    )
    total = settings.warmup + settings.samples
    every = max(1, total // 10)
    start = time.perf_counter()
    marks: dict[str, float] = {}

    def hook(kern: NUTS, params: Any, stage: str, i: int) -> None:
        t = settings.warmup + i + 1 if stage.startswith("Sample") else i + 1
        if stage.startswith("Warmup") and i == settings.warmup - 1:
            marks["warmup_seconds"] = time.perf_counter() - start
            marks["warmup_calls"] = potential.calls
            st.step_size = float(kern.step_size)
            log.info("chain %d/%d: warmup done in %.1f s, step size %.3g, %d gradient evaluations",
                     index + 1, settings.chains, marks["warmup_seconds"], st.step_size, potential.calls)
        if stage.startswith("Sample") and i == settings.samples - 1:
            diag = kern.diagnostics()
            st.divergences = len(diag.get("divergences", []))
            st.accept_prob = float(kern.logging()["acc. prob"])  # mean acceptance probability while sampling
            st.extra["acceptance_rate"] = float(diag.get("acceptance rate", float("nan")))
        if t % every == 0 and t < total:
            elapsed = time.perf_counter() - start
            log.info("chain %d/%d: %s %d/%d, %.1f s, ETA %.0f s, step size %.3g, %.1f gradients/iteration",
                     index + 1, settings.chains, "warmup" if t <= settings.warmup else "sampling",
                     t, total, elapsed, elapsed / t * (total - t), float(kern.step_size), potential.calls / t)

    mcmc = MCMC(
        kernel,
        num_samples=settings.samples,
        warmup_steps=settings.warmup,
        initial_params={"w": init.detach().clone()},
        num_chains=1,
        hook_fn=hook,
        disable_progbar=True,
    )
    mcmc.run()
    st.seconds = time.perf_counter() - start
    st.grad_evals = potential.calls
    st.warmup_seconds = marks.get("warmup_seconds", 0.0)
    if settings.warmup == 0:
        st.step_size = float(kernel.step_size)
    sampling_calls = potential.calls - int(marks.get("warmup_calls", 0))
    st.leapfrog_per_draw = sampling_calls / settings.samples
    draws = mcmc.get_samples()["w"].detach()
    draws = draws[settings.thin - 1 :: settings.thin][: settings.kept]
    log.info(
        "chain %d/%d: done in %.1f s (warmup %.1f s), step size %.3g, accept prob %.3f, "
        "%d divergences, %.1f gradient evaluations per draw (tree depth cap %d = %d)",
        index + 1, settings.chains, st.seconds, st.warmup_seconds, st.step_size, st.accept_prob,
        st.divergences, st.leapfrog_per_draw, settings.max_tree_depth, 2**settings.max_tree_depth - 1,
    )
    return draws, st


#: memory budget of one chunk of :func:`predictive_diagnostics`: pyro's ESS takes a
#: cumulative minimum through an (N/2, N/2, quantities) float64 tensor
_DIAGNOSTICS_BYTES = 2**28


def predictive_diagnostics(f: Tensor, chunk: int = 256) -> dict[str, Any]:
    """Split R-hat and ESS of predictions f: (chains, samples, T, ...) -> dict.

    Each quantity f[:, :, t, ...] is diagnosed separately (pyro's
    ``split_gelman_rubin`` and ``effective_sample_size``, in float64, at most ``chunk``
    test inputs at a time, fewer when needed to keep pyro's O(samples^2) ESS
    temporaries near 256 MB); a test input with several outputs (e.g. class
    probabilities) reports its worst output. Returns the per-input arrays ``rhat``
    and ``ess`` (numpy, length T), their summaries ``rhat_max``, ``rhat_mean``,
    ``ess_min``, ``ess_mean`` (floats over the inputs; NaN when a quantity never
    moves, which then fails :func:`check_diagnostics`), ``chains`` and ``draws``.
    """
    if f.dim() < 3:
        raise ValueError(f"f must be (chains, samples, T, ...), got shape {tuple(f.shape)}")
    chains, samples = f.shape[:2]
    if chains < 2:
        raise ValueError("R-hat needs at least 2 chains")
    if samples < 4:
        raise ValueError("split R-hat needs at least 4 draws per chain")
    per_input = math.prod(f.shape[3:]) * 2 * (samples // 2 + 1) ** 2 * 8
    chunk = max(1, min(chunk, _DIAGNOSTICS_BYTES // per_input))
    rhats, esss = [], []
    for i in range(0, f.shape[2], chunk):
        g = f[:, :, i : i + chunk].detach().to(torch.float64)
        g = g.reshape(chains, samples, g.shape[2], -1)
        rhat = split_gelman_rubin(g, chain_dim=0, sample_dim=1)  # (t, K)
        ess = effective_sample_size(g, chain_dim=0, sample_dim=1)
        # the worst output of each input; NaN propagates (a quantity that never moves)
        rhats.append(torch.where(torch.isnan(rhat).any(-1), torch.nan, rhat.amax(-1)))
        esss.append(torch.where(torch.isnan(ess).any(-1), torch.nan, ess.amin(-1)))
    return summarise_diagnostics(torch.cat(rhats).numpy(), torch.cat(esss).numpy(), chains, chains * samples)


def summarise_diagnostics(rhat: np.ndarray, ess: np.ndarray, chains: int, draws: int) -> dict[str, Any]:
    """The dict of :func:`predictive_diagnostics` from per-input ``rhat`` and ``ess``
    (e.g. concatenated over chunks of test inputs)."""
    rhat, ess = np.asarray(rhat, dtype=np.float64), np.asarray(ess, dtype=np.float64)

    def reduce(x: np.ndarray, op: Callable[[np.ndarray], Any]) -> float:
        return float("nan") if np.isnan(x).any() else float(op(x))

    return {
        "rhat_max": reduce(rhat, np.max),
        "rhat_mean": reduce(rhat, np.mean),
        "ess_min": reduce(ess, np.min),
        "ess_mean": reduce(ess, np.mean),
        "chains": int(chains),
        "draws": int(draws),
        "rhat": rhat,
        "ess": ess,
    }


def check_diagnostics(diag: Mapping[str, Any], settings: HMCSettings) -> None:
    """Raise :class:`HMCDiagnosticsError` unless rhat_max <= settings.rhat_max and
    ess_min >= settings.ess_min (NaN fails both)."""
    rhat, ess = float(diag["rhat_max"]), float(diag["ess_min"])
    problems = []
    if not rhat <= settings.rhat_max:
        problems.append(f"split R-hat max {rhat:.4g} > {settings.rhat_max:g}")
    if not ess >= settings.ess_min:
        problems.append(f"ESS min {ess:.4g} < {settings.ess_min:g}")
    if not problems:
        return
    draws = diag.get("draws")
    advice = []
    if not rhat <= settings.rhat_max or math.isnan(rhat):
        advice.append(
            f"the chains disagree (not mixed): increase hmc.warmup (now {settings.warmup}) and "
            f"hmc.samples (now {settings.samples}), or raise hmc.max_tree_depth (now {settings.max_tree_depth})"
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
