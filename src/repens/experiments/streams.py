"""Several image stacks trained at once in one process, each on a thread and a CUDA stream of its own.

A GPU runs the kernels of one process at a time: processes time-slice it, so jobs in several
processes add little to one job alone, and one stack's step (a few small GEMMs and many small
elementwise kernels) leaves most of the device idle. Here every stack (one method's seeds,
:func:`repens.experiments.image.run_image_stack`) runs in a thread of one process with a CUDA
stream of its own; each step is one graph replay (:mod:`repens.training.step_graph`), so the
threads hand the GPU independent streams of work that it can overlap, and the Python of one
thread's step runs while the others' kernels do.

What makes a stack's numbers its own, whatever runs beside it:

* its random streams are its seeds' generators (batches, prior draws, Langevin noise),
  nothing else draws from them; the global RNG that :func:`run_image` seeds only fills the
  network's template weights, which the particles replace;
* each stack's tensors live on its stream from set-up to results; stacks share no tensor;
* a capture runs alone: each stack's thread holds a shared turn for all its GPU work and
  offers it between two steps; a capture takes the exclusive turn, so no other thread makes
  a CUDA call while it records (:mod:`repens.training.turns`), and it is begun in CUDA's
  ``thread_local`` mode;
* the float32 matmul precision is process-wide: stacks of different ``matmul_precision``
  are refused before anything starts.

On the CPU the threads share the cores (no streams): each stack's particles and metrics are
those of its stack run alone, bit for bit (``tests/experiments/test_streams.py``).

A stop signal (SIGTERM, SIGINT) reaches every stack: the main thread's handlers set the stop
that each thread's training loop reads (:func:`repens.training.train.stop_signals`); each
checkpoints at its next step and raises :class:`repens.training.train.Interrupted`. A stack
that fails leaves the others running; each stack's outcome is returned.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from repens.experiments.image import resolve_device, run_image_stack, stack_settings
from repens.jobs.job import ImageJob, SpecError
from repens.training.train import stop_signals
from repens.training.turns import GPU_TURNS

__all__ = ["run_image_stacks", "own_stream", "check_stacks"]

log = logging.getLogger("repens.streams")


@contextmanager
def own_stream(device: torch.device) -> Iterator[None]:
    """Inside, this thread's work on ``device`` goes to a new CUDA stream of its own (current
    device and current stream are per thread in torch); on a CPU, nothing changes."""
    if device.type != "cuda":
        yield
        return
    with torch.cuda.device(device), torch.cuda.stream(torch.cuda.Stream(device)):
        yield


def check_stacks(stacks: Sequence[tuple[Sequence[ImageJob], Sequence[Path]]]) -> None:
    """Refuse, in one line, what cannot train side by side in one process: a stack whose jobs
    differ but in seed or whose outputs do not match its jobs, an output named twice, float32
    matmul precisions that differ (a process-wide setting)."""
    seen: dict[Path, int] = {}
    for k, (jobs, outs) in enumerate(stacks):
        if not jobs or len(jobs) != len(outs):
            raise SpecError(f"stack {k + 1}: {len(jobs)} jobs but {len(outs)} outputs")
        stack_settings(list(jobs))
        for out in outs:
            if Path(out) in seen:
                raise SpecError(f"output {out} is in stack {seen[Path(out)] + 1} and stack {k + 1}")
            seen[Path(out)] = k
    precisions = {jobs[0].matmul_precision for jobs, _ in stacks}
    if len(precisions) > 1:
        raise SpecError(
            f"matmul_precision differs between the stacks ({', '.join(sorted(map(str, precisions)))}): "
            "it is set for the whole process; run them in processes of their own"
        )


def run_image_stacks(
    stacks: Sequence[tuple[Sequence[ImageJob | Mapping[str, Any]], Sequence[Path]]],
    *,
    inputs: dict[str, str] | None = None,
    device: str = "auto",
) -> list[BaseException | None]:
    """Train every stack of ``stacks`` (each ``(jobs, outs)`` as :func:`run_image_stack` takes
    them, with its checkpoint there) at once, one thread and CUDA stream per stack, and wait
    for all. Returns each stack's outcome in order: None where its results were written,
    else the exception it ended with (:class:`repens.training.train.Interrupted` after a stop
    signal, :class:`repens.training.train.NonFiniteError`, ...); a stack that fails does not
    stop the others."""
    stacks = [([ImageJob.of(j) for j in jobs], [Path(o) for o in outs]) for jobs, outs in stacks]
    check_stacks(stacks)
    dev = resolve_device(device)
    outcomes: list[BaseException | None] = [None] * len(stacks)

    def train(k: int) -> None:
        jobs, outs = stacks[k]
        try:
            with GPU_TURNS.shared(), own_stream(dev):
                run_image_stack(jobs, outs, inputs=inputs, device=device)
                if dev.type == "cuda":
                    torch.cuda.current_stream().synchronize()  # its files are written; its work is done
        except BaseException as err:  # noqa: BLE001 (the outcome of this stack, reported by the caller)
            outcomes[k] = err

    names = [f"{jobs[0].method}[{','.join(str(j.seed) for j in jobs)}]" for jobs, _ in stacks]
    log.info("%d stacks side by side on %s: %s", len(stacks), dev, "; ".join(names))
    # the main thread's handlers set the stop that every stack's loop reads
    with stop_signals():
        threads = [threading.Thread(target=train, args=(k,), name=names[k]) for k in range(len(stacks))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return outcomes
