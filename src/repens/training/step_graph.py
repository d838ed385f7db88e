"""A training step replayed as a CUDA graph: one launch a step instead of a hundred.

A step of a small stack launches 100-160 kernels for a fraction of a millisecond of GPU
arithmetic, so on a GPU it is bound by kernel launches and by the host, not by the
arithmetic. :class:`StepGraphs` captures the whole step (the update rule, the finiteness
flag, the optimizer step and the Langevin noise) once and replays it every step:

* the step reads its minibatch from *static* buffers; each step copies the new batch
  into them (the batch itself is drawn outside the graph, on the device, from the run's
  generator, as in an eager step);
* the run's generator, and for a stack of seeds every seed's stream, is registered with
  the graph, so each replay advances each by what the captured draws took (prior draws,
  Langevin noise): their checkpointed states are as exact as an eager run's;
* a Python number baked into a graph is its learning rate (the optimizer's and the
  Langevin noise's): a step at a new learning rate (a staircase decay) captures a new
  graph and the old ones are freed; a new batch shape (the smaller last batch of an
  epoch) gets a graph of its own;
* the first :data:`WARMUP_STEPS` steps run eagerly (on a side stream: CUDA's lazy
  initialisation and the optimizer's state are made outside the capture);
* each new graph is checked before it is trusted: from one saved state two steps run
  eagerly on the batch, the state is put back, and the captured graph replays the same
  two steps; the particles, the optimizer's state, the finiteness flag and the
  generator's state must come out the same bit for bit (a replay that draws its random
  numbers at the wrong place in the stream, the same numbers at each replay, or computes
  anything else, is caught there; the check costs three steps a capture, and the run goes
  on from the first of the eager steps). If they do not, the
  eager step's state is kept and the run goes on eagerly, with a warning saying what
  differed (a step with non-deterministic kernels, atomics in a backward, would end
  up there too: eager, never wrong).

Only a rule that declares itself graph-safe is captured (``graph_safe`` of
:class:`repens.methods.rule.Rule`: nothing in its step waits for the host; SSGE's
``eigh`` checks its result on the host and is not). Everything here but
:class:`CudaCalls` is device-independent and tested on the CPU: :class:`StepGraphs` with
:class:`EagerBackend`, which "replays" by running the step again
(``tests/test_step_graph.py``); :class:`CudaGraphBackend`'s capture and its fallback with
a stand-in for :class:`CudaCalls`, and every op of every method's captured step, GPU code
paths included (:func:`repens.models.kernels.gpu_paths`), in ``tests/test_capture.py``. The CUDA
calls themselves run on the lent GPUs (docs/gpu.md); a capture that fails (the stream and the
graph's pool are given back) or replays anything but the eager step is logged once and the
run goes on eagerly.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import fields, replace
from typing import Protocol

import torch
from torch import Tensor

from repens.methods.updates import Update
from repens.models.posteriors import Batch
from repens.training.turns import GPU_TURNS

__all__ = [
    "StepGraphs",
    "StepState",
    "GraphBackend",
    "CudaGraphBackend",
    "CudaCalls",
    "EagerBackend",
    "backend_for",
    "WARMUP_STEPS",
]

log = logging.getLogger("repens.step_graph")

#: eager steps before the first capture (PyTorch's CUDA-graph examples warm up 3 iterations)
WARMUP_STEPS = 3

Replay = Callable[[], Update]


class GraphBackend(Protocol):
    def warm_up(self) -> AbstractContextManager[None]:
        """Where the eager warm-up steps run."""

    def capture(self, run: Replay, generators: tuple[torch.Generator, ...]) -> Replay:
        """Record ``run`` (without running it) and return what runs it again; ``generators``:
        the random streams the step draws from, each advanced by every replay."""


class CudaCalls:
    """The CUDA calls of a capture and of the warm-up, in one place: the only code here that
    needs a GPU (a test stands in for it on the CPU, ``tests/test_capture.py``)."""

    def graph(self) -> torch.cuda.CUDAGraph:
        return torch.cuda.CUDAGraph()

    def pool(self) -> tuple[int, int]:
        """A new memory pool for one graph (graphs replayed in any order share none)."""
        return torch.cuda.graph_pool_handle()

    def stream(self) -> torch.cuda.Stream:
        return torch.cuda.Stream()

    def current_stream(self) -> torch.cuda.Stream:
        return torch.cuda.current_stream()

    def set_stream(self, stream: torch.cuda.Stream) -> None:
        torch.cuda.set_stream(stream)

    def before_capture(self) -> None:
        """What ``torch.cuda.graph`` does before a capture: wait for the device (what the graph
        reads is written), collect Python's garbage (no tensor is freed by a collection that
        would fall inside the capture) and give the cached blocks back (memory for the
        graph's pool)."""
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()

    def end_allocating_to(self, pool: tuple[int, int]) -> bool:
        """Stop sending the device's allocations to ``pool``; False if they were not sent there.
        A failed ``capture_end`` may not have (torch's older ``CUDAGraph::capture_end`` raised
        on ``cudaStreamEndCapture`` before ``endAllocateToPool``; newer ones end it first)."""
        try:
            torch._C._cuda_endAllocateToPool(torch.cuda.current_device(), pool)
        except RuntimeError:  # "not currently recording to mempool_id": already ended
            return False
        return True


@contextmanager
def _on_stream(cuda: CudaCalls, stream) -> Iterator[None]:  # noqa: ANN001
    """Inside, ``stream`` is the current stream; the previous one comes back however the
    inside ends."""
    previous = cuda.current_stream()
    cuda.set_stream(stream)
    try:
        yield
    finally:
        cuda.set_stream(previous)


def _captured(graph, pool: tuple[int, int], run: Replay) -> Update:  # noqa: ANN001
    """``run()`` captured into ``graph`` (its memory from ``pool``) on the current stream, the
    capture ended whatever happens: when ``run`` raises (a host-to-device copy, a host wait:
    the capture is invalidated), ``capture_end`` still runs and ``run``'s error is the one
    raised (``capture_end``'s own, an invalidated capture, says less)."""
    graph.capture_begin(pool, capture_error_mode="thread_local")
    try:
        result = run()
    except BaseException:
        with suppress(Exception):
            graph.capture_end()
        raise
    graph.capture_end()
    return result


def _abandon(cuda: CudaCalls, graph, pool: tuple[int, int]) -> None:  # noqa: ANN001
    """After a failed capture: no allocation goes to the graph's pool any more, and the graph
    gives back what it holds (``reset``: its pool, the generator's capture state)."""
    if cuda.end_allocating_to(pool):
        log.debug("allocations were still sent to the failed capture's pool; ended")
    with suppress(Exception):
        graph.reset()


class CudaGraphBackend:
    """The CUDA graph capture, with explicit ``capture_begin`` / ``capture_end``: the
    ``torch.cuda.graph`` context ends the capture in its exit before it restores the stream,
    so a capture that failed at its end left the job on the capture stream (and, in older
    torch, the allocator sending its blocks to the graph's pool). Here a failed capture always
    ends, the stream it started from comes back, the pool is let go of (:func:`_abandon`) and
    the error goes up to :class:`StepGraphs`, which trains on eagerly.

    Args:
        cuda: the CUDA calls (:class:`CudaCalls`; a test's stand-in on the CPU).
    """

    def __init__(self, cuda: CudaCalls | None = None) -> None:
        self.cuda = cuda if cuda is not None else CudaCalls()
        self._capture_stream = None  # made at the first capture (a capture needs a side stream)

    @contextmanager
    def warm_up(self) -> Iterator[None]:
        side = self.cuda.stream()
        side.wait_stream(self.cuda.current_stream())
        with _on_stream(self.cuda, side):
            yield
        self.cuda.current_stream().wait_stream(side)

    def capture(self, run: Replay, generators: tuple[torch.Generator, ...]) -> Replay:
        cuda = self.cuda
        if self._capture_stream is None:
            self._capture_stream = cuda.stream()
        graph, pool = cuda.graph(), cuda.pool()
        # one capture at a time in a process, and no other CUDA call on the host meanwhile: the
        # process's exclusive turn (repens.training.turns), so runs on other threads, each on
        # its stream (repens.experiments.streams), wait for its end. The generators are
        # registered inside it: torch refuses a registration while another thread's capture
        # is under way ("Cannot register the state during capturing stage"). The capture is
        # begun in CUDA's thread_local mode too, and the allocator sends to the graph's pool
        # only what is allocated on the capture's stream
        with GPU_TURNS.exclusive():
            for generator in _streams(generators):  # each replay advances every stream the step draws from
                graph.register_generator_state(generator)
            cuda.before_capture()
            try:
                with _on_stream(cuda, self._capture_stream):
                    result = _captured(graph, pool, run)
            except BaseException:
                _abandon(cuda, graph, pool)
                raise

        def replay() -> Update:
            graph.replay()
            return result  # its tensors are the graph's outputs, rewritten by each replay

        return replay


class EagerBackend:
    """A stand-in with the graph's bookkeeping and no graph: a "replay" runs the step
    again (on the CPU, where the tests run :class:`StepGraphs`' logic)."""

    def warm_up(self) -> AbstractContextManager[None]:
        return nullcontext()

    def capture(self, run: Replay, generators: tuple[torch.Generator, ...]) -> Replay:  # noqa: ARG002
        return run


def backend_for(device: torch.device) -> GraphBackend | None:
    """The graph backend of a training device: CUDA graphs on a GPU, none elsewhere."""
    return CudaGraphBackend() if device.type == "cuda" else None


def _shapes(batch: Batch | None) -> tuple:
    if batch is None:
        return ()
    return tuple((f.name, tuple(getattr(batch, f.name).shape), getattr(batch, f.name).dtype) for f in fields(batch))


def _static_copy(batch: Batch | None) -> Batch | None:
    """Buffers of the batch's shapes that a captured step reads (filled by each step)."""
    if batch is None:
        return None
    return replace(batch, **{f.name: getattr(batch, f.name).clone() for f in fields(batch)})


def _fill(static: Batch | None, batch: Batch | None) -> None:
    if batch is not None:
        for f in fields(batch):
            getattr(static, f.name).copy_(getattr(batch, f.name))


def _streams(generator: torch.Generator | tuple[torch.Generator, ...] | list) -> tuple[torch.Generator, ...]:
    """A step's random streams as a tuple: one generator, or the run's and a stack's seeds'."""
    return tuple(generator) if isinstance(generator, tuple | list) else (generator,)


class StepState:
    """What a step changes, saved and put back in place (a captured graph keeps pointing at
    the same tensors): the particles, the optimizer's state tensors, other tensors the
    step updates (the finiteness flag) and the generators' states (a generator, or a tuple:
    the run's and, for a stack of seeds, each seed's stream)."""

    def __init__(
        self,
        params: Tensor,
        optimizer: torch.optim.Optimizer,
        generator: torch.Generator | tuple[torch.Generator, ...],
        extra: tuple[Tensor, ...] = (),
    ) -> None:
        self.generators = _streams(generator)
        self.params, self.optimizer, self.extra = params, optimizer, extra

    def tensors(self) -> list[Tensor]:
        """The tensors, in a fixed order (the optimizer's state exists from its first step on)."""
        return [
            self.params,
            *self.extra,
            *(v for state in self.optimizer.state.values() for v in state.values() if isinstance(v, Tensor)),
        ]

    def save(self) -> tuple[list[Tensor], list[Tensor]]:
        return [t.detach().clone() for t in self.tensors()], [g.get_state() for g in self.generators]

    def load(self, saved: tuple[list[Tensor], list[Tensor]]) -> None:
        values, generator_states = saved
        with torch.no_grad():
            for t, v in zip(self.tensors(), values, strict=True):
                t.copy_(v)
        for generator, state in zip(self.generators, generator_states, strict=True):
            generator.set_state(state)

    @staticmethod
    def difference(a: tuple[list[Tensor], list[Tensor]], b: tuple[list[Tensor], list[Tensor]]) -> str | None:
        """None if ``a`` and ``b`` are the same bit for bit (NaN included), else what differs."""
        for i, (x, y) in enumerate(zip(a[0], b[0], strict=True)):
            if x.shape != y.shape or not torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
                what = "the particles" if i == 0 else f"state tensor {i}"
                if x.shape != y.shape or not x.is_floating_point():
                    return what
                err = float((x.double() - y.double()).abs().max())
                return f"{what} (max difference {err:.3g}, largest entry {float(y.abs().max()):.3g})"
        for i, (x, y) in enumerate(zip(a[1], b[1], strict=True)):
            if not torch.equal(x, y):
                return "the random stream's state" if len(a[1]) == 1 else f"random stream {i}'s state"
        return None


class StepGraphs:
    """Runs ``step(batch) -> Update`` (one whole training step: it moves the particles)
    from captured graphs, one per (learning rate, batch shapes); see the module docstring.

    Args:
        step: the step; captured, it must not wait for the host.
        generator: the run's random stream, or a tuple of every stream the step draws from
            (a stack of seeds: the run's and each seed's), registered with each graph.
        backend: :class:`CudaGraphBackend` on a GPU, :class:`EagerBackend` in tests.
        state: what the step changes, for checking each new graph against an eager step.
        warmup: eager steps before the first capture (at least one).
    """

    def __init__(
        self,
        step: Callable[[Batch | None], Update],
        generator: torch.Generator | tuple[torch.Generator, ...],
        backend: GraphBackend,
        state: StepState,
        warmup: int = WARMUP_STEPS,
    ) -> None:
        self.generators = _streams(generator)
        self.step, self.backend, self.state = step, backend, state
        self.warmup_left = max(1, int(warmup))  # the optimizer's state exists from its first step on
        self.graphs: dict[tuple, tuple[Batch | None, Replay]] = {}
        self.captures = 0
        self.failed: str | None = None  # why capturing stopped (the run goes on eagerly)

    def _stop(self, reason: str) -> None:
        self.failed = reason
        self.graphs = {}
        log.warning("the step is not replayed from a graph (%s); training on eagerly", reason)

    def __call__(self, batch: Batch | None, lr: float) -> Update:
        if self.failed is not None:
            return self.step(batch)
        if self.warmup_left > 0:
            self.warmup_left -= 1
            with self.backend.warm_up():
                return self.step(batch)
        key = (lr, _shapes(batch))
        entry = self.graphs.get(key)
        if entry is None:
            if any(k[0] != lr for k in self.graphs):  # the learning rate moved on: free the old graphs
                self.graphs = {k: v for k, v in self.graphs.items() if k[0] == lr}
            static = _static_copy(batch)
            # two eager steps on this batch, then the graph replayed twice from the same state:
            # the second replay shows whether each replay draws new random numbers
            before = self.state.save()
            result = self.step(batch)  # the step itself, eagerly: the run goes on from it
            after_one = self.state.save()
            self.step(batch)
            eager = self.state.save()
            self.state.load(before)
            try:
                replay = self.backend.capture(lambda: self.step(static), self.generators)
                _fill(static, batch)
                replay()
                replay()
            except Exception as error:  # noqa: BLE001 - a step that cannot be captured still trains
                self.state.load(after_one)
                self._stop(f"capture failed: {type(error).__name__}: {error}")
                return result
            differs = StepState.difference(self.state.save(), eager)
            self.state.load(after_one)  # the run goes on from one step, as an eager run would
            if differs is not None:
                self._stop(f"two replays differ from two eager steps in {differs}")
                return result
            self.graphs[key] = (static, replay)
            self.captures += 1
            return result
        static, replay = entry
        _fill(static, batch)
        return replay()
