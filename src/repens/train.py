"""The training loop shared by every experiment.

Particles are one leaf tensor (n, D) moved by a standard optimizer ascending ``phi`` (``maximize=True``, fused)
(Adam is elementwise, so one Adam over the stack equals one Adam per member).
An update may carry an ``after_step`` (the Langevin rules' noise, :func:`repens.updates.langevin`),
run after the optimizer step with the optimizer and the run's generator.
The loop logs progress (steps/s, ETA), checkpoints periodically and on SIGTERM or
SIGINT, resumes from its checkpoint when the checkpoint was made under the same
settings (its key, see :mod:`repens.jobkey`; others are set aside), and stops on a
non-finite update with a clear error. A step is one function (:func:`train`'s
``run_step``); on a GPU, for a rule that declares itself graph-safe, it is captured as a
CUDA graph and replayed (:mod:`repens.step_graph`).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from repens.atomic import torch_save_atomic
from repens.checks import env_setting
from repens.host_memory import keep_freed_memory
from repens.jobkey import load_keyed_checkpoint
from repens.optimizers import OPTIMIZERS, make_optimizer
from repens.posteriors import Batch
from repens.step_graph import StepGraphs, StepState, backend_for
from repens.updates import StepContext, Update, repulsion_ratio

__all__ = [
    "TrainSettings", "TrainState", "train", "learning_rate", "OPTIMIZERS", "make_optimizer", "direction_is_finite", "NonFiniteError",
    "Interrupted", "ENGINE_VERSION", "significant",
]

#: Part of every checkpoint's key: a checkpoint written by another version of the loop
#: (2: the optimizer maximises ``phi`` instead of minimising ``-phi``; 3: MLP likelihood
#: gradients written out, not by autograd, which rounds differently; 4: softmax of few classes
#: across a transposed copy, :func:`repens.posteriors.softmax_classes`; 5: large MLP stacks
#: in blocks of rows, :data:`repens.particles.BLOCK_BYTES`; 6: a one-output layer's bias added
#: after its product, not inside ``baddbmm``; 7: MLP activations feature-major, (n, H, B))
#: is not resumed.
ENGINE_VERSION = 7


def _finite_sum(direction: Tensor) -> Tensor:
    """0-d bool tensor on the device: the sum is finite (so, almost always, every entry is)."""
    return torch.isfinite(direction.sum())


def direction_is_finite(direction: Tensor) -> bool:
    """No NaN or infinity in ``direction``. The sum is NaN or infinite whenever an entry
    is, so one fast reduction decides in the common case; only a non-finite sum (a bad
    entry, or finite entries whose sum overflows) pays for the elementwise check.
    (Measured on 50 x 99,710 float32: sum 0.3 ms, ``isfinite(...).all()`` 9 ms,
    the max-norm 14 ms.)"""
    if math.isfinite(direction.sum().item()):  # one reduction and its value, no 0-d tensor ops
        return True
    return bool(torch.isfinite(direction).all())

log = logging.getLogger("repens.train")


class NonFiniteError(FloatingPointError):
    """The update produced NaN or inf: training stops and writes no result."""


class Interrupted(RuntimeError):
    """SIGTERM or SIGINT arrived; a checkpoint was written and the job can be resumed.

    ``signum`` is the signal (the command line exits with ``128 + signum``: 143, 130).
    """

    def __init__(self, message: str, signum: int = signal.SIGTERM) -> None:
        super().__init__(message)
        self.signum = int(signum)


#: signals that checkpoint and stop a run that has a checkpoint file
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_signals(catch: bool = True) -> Iterator[dict[str, int | None]]:
    """While inside, :data:`STOP_SIGNALS` set ``stop["signum"]`` of the yielded dict instead
    of ending the process, so a loop can checkpoint and stop at its next step; the previous
    handlers come back on exit. ``catch=False`` (a run without a checkpoint file) and a thread
    other than the main one (where handlers cannot be set) catch nothing."""
    stop: dict[str, int | None] = {"signum": None}
    previous: dict[int, Any] = {}
    if catch:
        def handler(signum: int, frame: Any) -> None:  # noqa: ARG001
            stop["signum"] = signum

        for signum in STOP_SIGNALS:
            try:
                previous[signum] = signal.signal(signum, handler)
            except ValueError:  # not the main thread
                break
    try:
        yield stop
    finally:
        for signum, old in previous.items():
            signal.signal(signum, signal.SIG_DFL if old is None else old)


@dataclass(frozen=True)
class TrainSettings:
    steps: int
    lr: float
    optimizer: str = "adam"
    #: the learning rate of step ``t`` is ``lr * lr_decay**(t // lr_decay_steps)`` (staircase;
    #: Pearce et al. 2020, Table 4 "Decay Rate"); 1: constant
    lr_decay: float = 1.0
    #: steps between decays (an epoch, ``ceil(N / B)``, or a fixed count); needed when
    #: ``lr_decay != 1``
    lr_decay_steps: int | None = None
    log_every: int = 500
    #: steps between finiteness checks (``None``: every step on a CPU, every 50 on a GPU,
    #: where each check is a host round-trip); a bad update is always caught before a
    #: checkpoint or the result is written
    nonfinite_check_every: int | None = None
    #: on a GPU, replay the step from a captured CUDA graph where the update rule is
    #: graph-safe (:mod:`repens.step_graph`); needs ``nonfinite_check_every > 1``
    #: (env REPENS_CUDA_GRAPHS=0 turns it off, e.g. to time a run eagerly)
    cuda_graphs: bool = field(default_factory=lambda: os.environ.get("REPENS_CUDA_GRAPHS", "1") != "0")
    #: seconds between periodic checkpoints (env REPENS_CHECKPOINT_SECONDS, default 300)
    checkpoint_seconds: float = field(default_factory=lambda: env_setting("REPENS_CHECKPOINT_SECONDS"))


@dataclass
class TrainState:
    params: Tensor
    anchors: Tensor | None = None
    #: (step, ratio) at each log step: ``||repulsion|| / ||drift||`` of the update there, one
    #: value per set of a stack (see :func:`repens.updates.repulsion_ratio`)
    repulsion: list[tuple[int, list[float]]] = field(default_factory=list)


def significant(value: float, digits: int = 6) -> float:
    """``value`` to ``digits`` significant digits, for the logged diagnostics: a ratio of
    1e-9 stays 1e-9 (six decimals made it 0, which reads as 'no repulsion at all')."""
    return float(f"{value:.{digits}g}")


def learning_rate(settings: TrainSettings, step: int) -> float:
    """The learning rate of step ``step`` (0-based): ``lr * lr_decay**(step // lr_decay_steps)``."""
    if settings.lr_decay == 1.0:
        return settings.lr
    if not settings.lr_decay_steps:
        raise ValueError("lr_decay needs lr_decay_steps")
    return settings.lr * settings.lr_decay ** (step // settings.lr_decay_steps)


def _state_key(checkpoint_key: str | None, settings: TrainSettings, params: Tensor) -> str:
    """The key stored in a checkpoint: the job's key and what ``train`` itself is given."""
    text = (f"{checkpoint_key}|{settings.steps}|{settings.lr!r}|{settings.optimizer}|{tuple(params.shape)}"
            f"|engine{ENGINE_VERSION}")
    if settings.lr_decay != 1.0:
        text += f"|decay{settings.lr_decay!r}/{settings.lr_decay_steps}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def train(
    state: TrainState,
    update: Callable[[Tensor, StepContext], Update],
    make_context: Callable[[Batch | None, Tensor | None], StepContext],
    settings: TrainSettings,
    generator: torch.Generator,
    next_batch: Callable[[torch.Generator], Batch | None] = lambda g: None,
    checkpoint: Path | None = None,
    on_log: Callable[[int, Tensor], dict] | None = None,
    checkpoint_key: str | None = None,
    optimizer_for: Callable[[str, Tensor, float], torch.optim.Optimizer] | None = None,
) -> TrainState:
    """Run ``settings.steps`` updates, resuming from ``checkpoint`` if it exists.

    Args:
        state: initial particles (and anchors for anchored ensembles).
        update: a bound update rule from :func:`repens.updates.make_update`.
        make_context: builds the rule's context from a batch and the anchors.
        settings: steps, learning rate, optimizer, logging and checkpoint cadence.
        generator: the one random stream (batches, prior draws, Langevin noise);
            its state is checkpointed so a resumed run equals an uninterrupted one.
        next_batch: draws the next minibatch from ``generator`` (``None`` if no data). A
            sampler with state of its own (``state_dict`` / ``load_state_dict``, e.g. the
            epoch sampler of :mod:`repens.minibatches`) has it checkpointed too.
        checkpoint: file for checkpoints (each carries its SHA-256, see
            :func:`repens.atomic.torch_save_atomic`); the runners remove it when the job's
            results are written. One that fails its checksum, holds a non-finite tensor or
            an object other than tensors and plain containers is set aside, not resumed
            (:func:`repens.jobkey.read_checkpoint`).
        on_log: optional extra figures (name -> value) added to each progress line.
        checkpoint_key: the settings that decide the result (``repens.jobkey.job_key``
            of the job). It is stored with ``settings.steps``/``lr``/``optimizer`` in
            every checkpoint; a checkpoint made under another key is not resumed but
            renamed to ``<checkpoint>.stale`` (one log line says so).
        optimizer_for: makes the optimizer from ``settings.optimizer``, the particles and
            the learning rate (default :func:`repens.optimizers.make_optimizer`); a stack
            of seeds steps each seed's block on its own
            (:class:`repens.experiments.image.SeedStackAdam`).
    """
    if state.params.device.type == "cpu":
        keep_freed_memory()  # a step's activations are reused, not page-faulted in again
    params = state.params.detach().clone().requires_grad_(True)
    optimizer = (optimizer_for or make_optimizer)(settings.optimizer, params, settings.lr)
    start = 0
    repulsion: list[tuple[int, list[float]]] = list(state.repulsion)
    sampler_state = getattr(next_batch, "state_dict", None)
    key = _state_key(checkpoint_key, settings, params)
    saved = load_keyed_checkpoint(checkpoint, key, log) if checkpoint is not None else None
    if saved is not None:
        with torch.no_grad():
            params.copy_(saved["params"])
        optimizer.load_state_dict(saved["optimizer"])
        generator.set_state(saved["generator"])
        if sampler_state is not None:
            next_batch.load_state_dict(saved["sampler"])
        repulsion = [tuple(r) for r in saved.get("repulsion", [])]
        start = saved["step"]
        log.info("resumed from %s at step %d/%d", checkpoint, start, settings.steps)

    def snapshot(step: int) -> None:
        check(step)  # a checkpoint only ever holds checked, finite states
        if checkpoint is not None:
            torch_save_atomic(
                {"key": key, "step": step, "params": params.detach(), "optimizer": optimizer.state_dict(),
                 "generator": generator.get_state(), "repulsion": repulsion,
                 **({"sampler": sampler_state()} if sampler_state is not None else {})},
                checkpoint,
            )

    check_every = settings.nonfinite_check_every or (1 if params.device.type == "cpu" else 50)
    # all updates since the last check had a finite sum: a flag on the device, updated in
    # place by each step (so a captured step updates it too), read by the host in check()
    finite = torch.ones((), dtype=torch.bool, device=params.device) if check_every > 1 else None
    checked = start  # the step of the last check

    def check(done: int) -> None:
        """Raise if an update since the last check had a non-finite sum: a NaN or infinite
        entry, or finite entries whose sum overflows (|sum| > 3e38 in float32: a diverged
        run either way; the per-step check of the CPU tells the two apart)."""
        nonlocal checked
        if finite is not None and not bool(finite):
            raise NonFiniteError(f"non-finite update between steps {checked + 1} and {done}/{settings.steps} "
                                 f"(lr={settings.lr}); no result was written")
        if finite is not None:
            finite.fill_(True)
        checked = done

    def run_step(batch: Batch | None) -> Update:
        """One step: the update, the finiteness flag, the optimizer step, the rule's noise."""
        result = update(params.detach(), make_context(batch, state.anchors))
        if finite is None:
            if not direction_is_finite(result.direction):
                raise NonFiniteError(f"non-finite update at step {checked + 1}/{settings.steps} "
                                     f"(lr={settings.lr}); no result was written")
        else:  # on the device; the host looks every check_every steps (see check())
            finite.logical_and_(_finite_sum(result.direction))
        params.grad = result.direction
        optimizer.step()
        if result.after_step is not None:
            with torch.no_grad():
                result.after_step(params, optimizer, generator)
        return result

    backend = backend_for(params.device) if settings.cuda_graphs and finite is not None else None
    graphs = None
    if backend is not None and getattr(update, "graph_safe", False):
        graphs = StepGraphs(run_step, generator, backend, StepState(params, optimizer, generator, (finite,)))
    if graphs is not None:
        log.info("the step is captured as a graph after %d eager steps and replayed", graphs.warmup_left)

    t0, last_ckpt = time.perf_counter(), time.perf_counter()
    with stop_signals(checkpoint is not None) as stop:
        for step in range(start, settings.steps):
            if settings.lr_decay != 1.0 and (step == start or step % settings.lr_decay_steps == 0):
                for group in optimizer.param_groups:
                    group["lr"] = learning_rate(settings, step)
            batch = next_batch(generator)
            try:
                result = run_step(batch) if graphs is None else graphs(batch, optimizer.param_groups[0]["lr"])
            except NonFiniteError:
                raise
            except Exception:
                check(step)  # an unchecked non-finite update may be the cause: say so
                raise
            done = step + 1
            if finite is None:
                checked = done
            if check_every > 1 and (done % check_every == 0 or done == settings.steps):
                check(done)
            if done % settings.log_every == 0 or done == settings.steps:
                ratio = repulsion_ratio(result)
                if ratio is not None:
                    repulsion.append((done, [significant(float(r)) for r in ratio.flatten()]))
                rate = (done - start) / max(time.perf_counter() - t0, 1e-9)
                extra = on_log(done, params.detach()) if on_log else {}
                fields = " ".join(f"{k}={v:.4g}" for k, v in extra.items())
                log.info("step %d/%d  %.1f steps/s  ETA %.0fs  %s", done, settings.steps, rate,
                         (settings.steps - done) / rate, fields)
            if stop["signum"] is not None:
                snapshot(done)
                name = signal.Signals(stop["signum"]).name
                raise Interrupted(f"{name} at step {done}; checkpoint written to {checkpoint}", stop["signum"])
            if checkpoint is not None and time.perf_counter() - last_ckpt > settings.checkpoint_seconds:
                snapshot(done)
                last_ckpt = time.perf_counter()
    return TrainState(params.detach(), state.anchors, repulsion)
