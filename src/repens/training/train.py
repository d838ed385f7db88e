"""The training loop shared by every experiment.

The loop steps a rule (:class:`repens.methods.rule.Rule`) from its state: each step is the
rule's ``update`` on the next minibatch, which moves the particles, one leaf tensor (n, D),
with the rule's optimizer ascending ``phi`` (``maximize=True``, fused; Adam is elementwise,
so one Adam over the stack equals one Adam per member) and adds the rule's noise (the
Langevin rules'). The loop logs progress (steps/s, ETA), checkpoints periodically and on SIGTERM or
SIGINT, resumes from its checkpoint when the checkpoint was made under the same
settings (its key, see :mod:`repens.core.jobkey`; others are set aside), and stops on a
non-finite update with a clear error.

The loop is made of parts, each tested on its own: :func:`init` makes the state of a run
(:class:`LoopState`: the rule, its state, the guard); :func:`step` is one step, exactly
what a CUDA graph captures (on a GPU, for a rule that declares itself graph-safe, it is
captured and replayed, :mod:`repens.training.step_graph`);
:class:`Checkpointer` saves and resumes under a key; :class:`FiniteGuard` stops a run on a
non-finite update; :func:`scheduled_lr` is the staircase schedule; :class:`Progress` logs;
:func:`stop_signals` and :func:`stop_if_signalled` turn SIGTERM / SIGINT into a checkpoint
and :class:`Interrupted`. :func:`run` composes them over the steps, and :func:`train` is
``init``, a resume and ``run``.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from repens.core.atomic import torch_save_atomic
from repens.core.environment import env_setting
from repens.core.jobkey import ENGINE_VERSION, load_keyed_checkpoint
from repens.methods.optimizers import OPTIMIZERS, make_optimizer
from repens.methods.rule import Rule, RuleState
from repens.methods.updates import Update, adam_preconditioner, preconditioned_repulsion_ratio, repulsion_ratio
from repens.models.posteriors import Batch
from repens.training.host_memory import keep_freed_memory
from repens.training.step_graph import StepGraphs, StepState, backend_for
from repens.training.turns import GPU_TURNS

__all__ = [
    "TrainSettings",
    "TrainState",
    "train",
    "learning_rate",
    "OPTIMIZERS",
    "make_optimizer",
    "direction_is_finite",
    "NonFiniteError",
    "Interrupted",
    "ENGINE_VERSION",
    "significant",
    "LoopState",
    "init",
    "step",
    "run",
    "FiniteGuard",
    "Checkpointer",
    "scheduled_lr",
    "apply_lr",
    "Progress",
    "Every",
    "stop_signals",
    "stop_if_signalled",
]


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

#: the stop read by runs on threads other than the main one (several stacks in one process,
#: :mod:`repens.experiments.streams`), where no handler can be set: the main thread's
#: :func:`stop_signals` handlers set it too, and clear it when they are taken down
_THREADS_STOP: dict[str, int | None] = {"signum": None}


@contextmanager
def stop_signals(catch: bool = True) -> Iterator[dict[str, int | None]]:
    """While inside, :data:`STOP_SIGNALS` set ``stop["signum"]`` of the yielded dict instead
    of ending the process, so a loop can checkpoint and stop at its next step; the previous
    handlers come back on exit. ``catch=False`` (a run without a checkpoint file) catches
    nothing. On a thread other than the main one (where handlers cannot be set) the yielded
    dict is the one the main thread's handlers set: a run there stops when the process is
    signalled while the main thread is inside :func:`stop_signals`."""
    if threading.current_thread() is not threading.main_thread():
        yield _THREADS_STOP if catch else {"signum": None}
        return
    stop: dict[str, int | None] = {"signum": None}
    previous: dict[int, Any] = {}
    if catch:

        def handler(signum: int, frame: Any) -> None:  # noqa: ARG001
            stop["signum"] = _THREADS_STOP["signum"] = signum

        for signum in STOP_SIGNALS:
            previous[signum] = signal.signal(signum, handler)
    try:
        yield stop
    finally:
        for signum, old in previous.items():
            signal.signal(signum, signal.SIG_DFL if old is None else old)
        if previous:
            _THREADS_STOP["signum"] = None


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
    #: graph-safe (:mod:`repens.training.step_graph`); needs ``nonfinite_check_every > 1``
    #: (env REPENS_CUDA_GRAPHS=0 turns it off, e.g. to time a run eagerly)
    cuda_graphs: bool = field(default_factory=lambda: os.environ.get("REPENS_CUDA_GRAPHS", "1") != "0")
    #: seconds between periodic checkpoints (env REPENS_CHECKPOINT_SECONDS, default 300)
    checkpoint_seconds: float = field(default_factory=lambda: env_setting("REPENS_CHECKPOINT_SECONDS"))


@dataclass
class TrainState:
    """What a run leaves: the particles, and the repulsion diagnostic of its log steps."""

    params: Tensor
    #: (step, ratio) at each log step: ``||repulsion|| / ||drift||`` of the update there, one
    #: value per set of a stack (see :func:`repens.methods.updates.repulsion_ratio`)
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
    text = (
        f"{checkpoint_key}|{settings.steps}|{settings.lr!r}|{settings.optimizer}|{tuple(params.shape)}"
        f"|engine{ENGINE_VERSION}"
    )
    if settings.lr_decay != 1.0:
        text += f"|decay{settings.lr_decay!r}/{settings.lr_decay_steps}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- the loop's parts
class FiniteGuard:
    """The non-finite guard: every update's direction is looked at, a bad one stops the run.

    On a CPU (``check_every == 1``) each direction is checked on the host before it is
    applied (:func:`direction_is_finite`). Otherwise a flag on the device (``flag``) is
    and-ed with each direction's finite sum, in place (so a captured step updates it too),
    and the host reads it every ``check_every`` steps, at the last step and before any
    checkpoint (:meth:`check`). ``checked`` is the step of the last check."""

    def __init__(self, settings: TrainSettings, device: torch.device, start: int) -> None:
        self.steps, self.lr = settings.steps, settings.lr
        self.every = settings.nonfinite_check_every or (1 if device.type == "cpu" else 50)
        self.flag = torch.ones((), dtype=torch.bool, device=device) if self.every > 1 else None
        self.checked = start

    def observe(self, direction: Tensor) -> None:
        """Inside the step: raise at once (per-step checks) or fold into the device flag."""
        if self.flag is None:
            if not direction_is_finite(direction):
                raise NonFiniteError(
                    f"non-finite update at step {self.checked + 1}/{self.steps} (lr={self.lr}); no result was written"
                )
        else:  # on the device; the host looks every ``every`` steps (see check())
            self.flag.logical_and_(_finite_sum(direction))

    def check(self, done: int) -> None:
        """Raise if an update since the last check had a non-finite sum: a NaN or infinite
        entry, or finite entries whose sum overflows (|sum| > 3e38 in float32: a diverged
        run either way; the per-step check of the CPU tells the two apart)."""
        if self.flag is not None and not bool(self.flag):
            raise NonFiniteError(
                f"non-finite update between steps {self.checked + 1} and {done}/{self.steps} "
                f"(lr={self.lr}); no result was written"
            )
        if self.flag is not None:
            self.flag.fill_(True)
        self.checked = done

    def stepped(self, done: int) -> None:
        """After step ``done`` (1-based): checked already (per step) or at the cadence."""
        if self.flag is None:
            self.checked = done
        elif done % self.every == 0 or done == self.steps:
            self.check(done)


@dataclass
class LoopState:
    """What a step reads and moves: the rule, its state (the particles, a leaf tensor the
    rule's optimizer steps in place, the optimizer, the run's generator), the guard, and the
    random streams a step draws from besides the run's (a seed stack's)."""

    rule: Rule
    state: RuleState
    guard: FiniteGuard
    streams: tuple[torch.Generator, ...] = ()

    @property
    def params(self) -> Tensor:
        return self.state.params

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.state.optimizer

    @property
    def generator(self) -> torch.Generator:
        return self.state.generator


def init(rule: Rule, state: RuleState, settings: TrainSettings, start: int = 0, streams: tuple = ()) -> LoopState:
    """The loop's state at step ``start`` for the rule's ``state`` (:meth:`Rule.init`)."""
    if state.params.device.type == "cpu":
        keep_freed_memory()  # a step's activations are reused, not page-faulted in again
    return LoopState(rule, state, FiniteGuard(settings, state.params.device, start), tuple(streams))


def step(loop: LoopState, batch: Batch | None) -> Update:
    """One step, exactly what a CUDA graph captures: the rule's update (its direction, the
    optimizer's step, its noise), then the finiteness flag of the direction. The rule moves
    its state in place (a captured step replays on the same tensors)."""
    loop.state, result = loop.rule.update(loop.state, batch)
    loop.guard.observe(result.direction)
    return result


@dataclass
class Checkpointer:
    """Saves and resumes a run under its key (:func:`_state_key`). ``path`` None: no checkpoints.
    ``sampler``: the batch sampler, checkpointed when it has a ``state_dict``."""

    path: Path | None
    key: str
    sampler: Any = None

    def resume(self, loop: LoopState) -> tuple[int, list[tuple[int, list[float]]]] | None:
        """Load a checkpoint made under this key into ``loop``: (its step, its logged ratios);
        None when there is none (one made under another key is set aside)."""
        saved = load_keyed_checkpoint(self.path, self.key, log) if self.path is not None else None
        if saved is None:
            return None
        with torch.no_grad():
            loop.params.copy_(saved["params"])
        loop.optimizer.load_state_dict(saved["optimizer"])
        loop.generator.set_state(saved["generator"])
        if getattr(self.sampler, "state_dict", None) is not None:
            self.sampler.load_state_dict(saved["sampler"])
        return saved["step"], [tuple(r) for r in saved.get("repulsion", [])]

    def save(self, loop: LoopState, done: int, repulsion: list) -> None:
        """Check the updates so far (a checkpoint only ever holds checked, finite states), then write."""
        loop.guard.check(done)
        if self.path is None:
            return
        sampler_state = getattr(self.sampler, "state_dict", None)
        torch_save_atomic(
            {
                "key": self.key,
                "step": done,
                "params": loop.params.detach(),
                "optimizer": loop.optimizer.state_dict(),
                "generator": loop.generator.get_state(),
                "repulsion": repulsion,
                **({"sampler": sampler_state()} if sampler_state is not None else {}),
            },
            self.path,
        )


def scheduled_lr(settings: TrainSettings, step: int, start: int) -> float | None:
    """The learning rate to set before step ``step`` of a run begun at ``start``: the staircase
    rate where it changes (and at the first step), None where it stays."""
    if settings.lr_decay != 1.0 and (step == start or step % settings.lr_decay_steps == 0):
        return learning_rate(settings, step)
    return None


def apply_lr(optimizer: torch.optim.Optimizer, lr: float | None) -> None:
    """Set ``lr`` on every parameter group (None: leave them)."""
    if lr is not None:
        for group in optimizer.param_groups:
            group["lr"] = lr


@dataclass
class Progress:
    """Progress lines (steps/s, ETA, ``on_log``'s figures and, for a repulsive rule, the
    repulsion ratio ``repulsion=``) every ``settings.log_every`` steps and at the last; the
    ratios are also kept, one per set of a stack."""

    settings: TrainSettings
    start: int
    on_log: Callable[[int, Tensor], dict] | None = None
    t0: float = field(default_factory=time.perf_counter)

    def due(self, done: int) -> bool:
        return done % self.settings.log_every == 0 or done == self.settings.steps

    def record(
        self,
        done: int,
        result: Update,
        params: Tensor,
        repulsion: list,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        forces = result.forces() if result.forces is not None else None  # once, for both ratios
        ratio = repulsion_ratio(result, forces)
        extra = self.on_log(done, params.detach()) if self.on_log else {}
        if ratio is not None:
            repulsion.append((done, [significant(float(r)) for r in ratio.flatten()]))
            extra = {**extra, "repulsion": float(ratio.mean())}  # a stack's sets: their mean
            # the same share after Adam's per-coordinate scaling, in weight space (for a
            # function-space rule on the MLP path the pull-back reads the particles after the
            # step, one step later than the forces: a diagnostic, not a replay of the step;
            # by autograd, other networks, it reads the step's own copy)
            scale = adam_preconditioner(optimizer, params)
            if scale is not None:
                extra["repulsion_adam"] = float(preconditioned_repulsion_ratio(result, scale, forces).mean())
        rate = (done - self.start) / max(time.perf_counter() - self.t0, 1e-9)
        fields = " ".join(f"{k}={v:.4g}" for k, v in extra.items())
        log.info(
            "step %d/%d  %.1f steps/s  ETA %.0fs  %s",
            done,
            self.settings.steps,
            rate,
            (self.settings.steps - done) / rate,
            fields,
        )


class Every:
    """A wall-clock cadence: :meth:`due` once ``seconds`` have passed since the start or the last :meth:`restart`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.last = time.perf_counter()

    def due(self) -> bool:
        return time.perf_counter() - self.last > self.seconds

    def restart(self) -> None:
        self.last = time.perf_counter()


def stop_if_signalled(
    stop: dict[str, int | None], snapshot: Callable[[], None], where: str, checkpoint: Path | None
) -> None:
    """After a step: if a stop signal arrived (:func:`stop_signals`), snapshot and raise
    :class:`Interrupted` naming the signal and ``where`` the run stopped."""
    if stop["signum"] is not None:
        snapshot()
        name = signal.Signals(stop["signum"]).name
        raise Interrupted(f"{name} at {where}; checkpoint written to {checkpoint}", stop["signum"])


def _graphs_for(loop: LoopState, settings: TrainSettings) -> StepGraphs | None:
    """The step replayed as a CUDA graph, where the device, the settings and the rule allow."""
    backend = backend_for(loop.params.device) if settings.cuda_graphs and loop.guard.flag is not None else None
    if backend is None or not loop.rule.graph_safe:
        return None
    # the run's stream and any the step draws from besides (a seed stack's)
    generators = (loop.generator, *loop.streams)
    graphs = StepGraphs(
        partial(step, loop),
        generators,
        backend,
        StepState(loop.params, loop.optimizer, generators, (loop.guard.flag,)),
    )
    log.info("the step is captured as a graph after %d eager steps and replayed", graphs.warmup_left)
    return graphs


def _guarded_step(loop: LoopState, graphs: StepGraphs | None, batch: Batch | None, index: int) -> Update:
    """One step, eager or replayed; any other error first checks the updates so far (an
    unchecked non-finite update may be its cause: then that is what is raised)."""
    try:
        return step(loop, batch) if graphs is None else graphs(batch, loop.optimizer.param_groups[0]["lr"])
    except NonFiniteError:
        raise
    except Exception:
        loop.guard.check(index)
        raise


def run(
    loop: LoopState,
    settings: TrainSettings,
    next_batch: Callable[[torch.Generator], Batch | None],
    checkpointer: Checkpointer,
    start: int = 0,
    repulsion: list | None = None,
    on_log: Callable[[int, Tensor], dict] | None = None,
) -> list[tuple[int, list[float]]]:
    """Steps ``start`` to ``settings.steps`` of ``loop``; returns the logged repulsion ratios."""
    repulsion = list(repulsion or [])
    graphs = _graphs_for(loop, settings)
    progress, periodic = Progress(settings, start, on_log), Every(settings.checkpoint_seconds)
    with stop_signals(checkpointer.path is not None) as stop:
        for index in range(start, settings.steps):
            apply_lr(loop.optimizer, scheduled_lr(settings, index, start))
            result = _guarded_step(loop, graphs, next_batch(loop.generator), index)
            done = index + 1
            loop.guard.stepped(done)
            if progress.due(done):
                progress.record(done, result, loop.params, repulsion, loop.optimizer)
            stop_if_signalled(
                stop,
                lambda: checkpointer.save(loop, done, repulsion),  # noqa: B023 (called at once)
                f"step {done}",
                checkpointer.path,
            )
            if checkpointer.path is not None and periodic.due():
                checkpointer.save(loop, done, repulsion)
                periodic.restart()
            GPU_TURNS.pause()  # another thread's capture, if one waits, runs here
        if checkpointer.path is not None and start < settings.steps:
            # the last step's state: a job stopped while it evaluates (a deadline's SIGTERM
            # after the handlers are gone kills it) reruns the evaluation, not the training
            checkpointer.save(loop, settings.steps, repulsion)
    return repulsion


def train(
    rule: Rule,
    state: RuleState,
    settings: TrainSettings,
    next_batch: Callable[[torch.Generator], Batch | None] = lambda g: None,
    checkpoint: Path | None = None,
    on_log: Callable[[int, Tensor], dict] | None = None,
    checkpoint_key: str | None = None,
    streams: tuple[torch.Generator, ...] = (),
) -> TrainState:
    """Run ``settings.steps`` updates of ``rule`` from ``state``, resuming from ``checkpoint``
    if it exists.

    Args:
        rule: the update rule (:func:`repens.methods.rule.build`).
        state: its state at the start (:meth:`repens.methods.rule.Rule.init`): the particles,
            their optimizer, and the one random stream (batches, prior draws, Langevin
            noise), whose state is checkpointed so a resumed run equals an uninterrupted one.
        settings: steps, learning-rate schedule, logging and checkpoint cadence (``lr`` and
            ``optimizer`` there are the rule's, for the checkpoint's key and the schedule).
        next_batch: draws the next minibatch from the run's stream (``None`` if no data). A
            sampler with state of its own (``state_dict`` / ``load_state_dict``, e.g. the
            epoch sampler of :mod:`repens.methods.minibatches`) has it checkpointed too.
        checkpoint: file for checkpoints (each carries its SHA-256, see
            :func:`repens.core.atomic.torch_save_atomic`); the runners remove it when the job's
            results are written. One that fails its checksum, holds a non-finite tensor or
            an object other than tensors and plain containers is set aside, not resumed
            (:func:`repens.core.jobkey.read_checkpoint`).
        on_log: optional extra figures (name -> value) added to each progress line.
        checkpoint_key: the settings that decide the result (``repens.core.jobkey.job_key``
            of the job). It is stored with ``settings.steps``/``lr``/``optimizer`` in
            every checkpoint; a checkpoint made under another key is not resumed but
            renamed to ``<checkpoint>.stale`` (one log line says so).
        streams: random streams a step draws from besides the run's (a seed stack's, one
            per seed), registered with a captured step.
    """
    lr = state.optimizer.param_groups[0]["lr"]
    if lr != settings.lr:
        raise ValueError(f"the rule's optimizer steps at lr {lr!r} but the settings say {settings.lr!r}")
    loop = init(rule, state, settings, streams=streams)
    checkpointer = Checkpointer(checkpoint, _state_key(checkpoint_key, settings, loop.params), next_batch)
    start, repulsion = 0, []
    resumed = checkpointer.resume(loop)
    if resumed is not None:
        start, repulsion = resumed
        loop.guard.checked = start
        log.info("resumed from %s at step %d/%d", checkpoint, start, settings.steps)
    repulsion = run(loop, settings, next_batch, checkpointer, start, repulsion, on_log)
    return TrainState(loop.params.detach(), repulsion)
