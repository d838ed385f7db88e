"""Several image stacks side by side in one process (repens.experiments.streams).

Each stack trains on a thread of its own (on a GPU, a CUDA stream of its own too). The
tolerance is zero, as for a stack against its one-seed jobs (test_image_stack.py): on the CPU
with one torch thread per op, a stack computes the same float operations whatever runs on the
other threads, so its particles, metrics and predictions equal those of the stack run alone.
The CUDA parts (a capture per thread, the process's one capture at a time with no other
thread's step beside it, each thread's stream) run here through a stand-in for the CUDA calls, as in test_capture.py.
"""

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

import repens.experiments.image as image
import repens.training.train as train
from experiments.test_image import tiny_sets  # noqa: F401  (the fixture)
from experiments.test_image_stack import _assert_same_results, _cli_args, _job, particles  # noqa: F401
from repens.cli import main
from repens.experiments.image import run_image_stack, stack_checkpoint
from repens.experiments.streams import run_image_stacks
from repens.jobs.job import SpecError
from repens.training.step_graph import CudaGraphBackend
from repens.training.train import Interrupted
from test_capture import FakeCuda, FakeGraph, FakeStream

#: a plain step (de, one seed: a stack of one), a rule that draws in its step (drle: prior
#: draws and Langevin noise) and a function-space rule (kde-fwgd), two seeds each
STACKS = {"de": (40,), "drle": (38, 39), "kde-fwgd": (38, 39)}


def _stacks(root: Path, **extra):
    return [
        (
            [_job(method, seed, **extra) for seed in seeds],
            [root / method / str(seed) / "metrics.json" for seed in seeds],
        )
        for method, seeds in STACKS.items()
    ]


def test_stacks_side_by_side_equal_each_stack_alone(tiny_sets, tmp_path, particles):
    together, alone = _stacks(tmp_path / "together"), _stacks(tmp_path / "alone")
    assert run_image_stacks(together, inputs=tiny_sets, device="cpu") == [None, None, None]
    for jobs, outs in alone:
        run_image_stack(jobs, outs, inputs=tiny_sets, device="cpu")
    for (_, outs), (_, reference) in zip(together, alone):
        for out, ref in zip(outs, reference):
            _assert_same_results(ref, out, particles)


def test_a_failing_stack_leaves_the_others_to_finish(tiny_sets, tmp_path, monkeypatch):
    stacks = _stacks(tmp_path)
    real = image._write_results

    def fail_for_drle(job, *args, **kwargs):
        if job.method == "drle":
            raise RuntimeError("disk full")
        return real(job, *args, **kwargs)

    monkeypatch.setattr(image, "_write_results", fail_for_drle)
    outcomes = run_image_stacks(stacks, inputs=tiny_sets, device="cpu")
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], RuntimeError) and "disk full" in str(outcomes[1])
    assert all(out.exists() for k in (0, 2) for out in stacks[k][1])


def test_a_signal_stops_every_stack_at_a_checkpoint_and_they_resume_to_the_same_results(
    tiny_sets, tmp_path, particles, monkeypatch
):
    """SIGTERM from one stack's thread at its step 4: the main thread's handler sets the stop
    every thread's loop reads; each stack checkpoints at the end of the step it is in and
    raises Interrupted; run again, each resumes to its results alone."""
    methods = ("drle", "kde-fwgd")
    together = [
        s for s in _stacks(tmp_path / "together", steps=20, checkpoint_seconds=0.0) if s[0][0]["method"] in methods
    ]
    real = image.SeedStreams.__call__
    calls: dict[str, int] = {}
    sent = threading.Event()

    def term_at_step_4(self, generator):
        name = threading.current_thread().name
        calls[name] = calls.get(name, 0) + 1
        if calls[name] == 4 and not sent.is_set():  # the first stack at step 4 signals
            sent.set()
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 10  # the handler runs on the main thread, soon
            while train._THREADS_STOP["signum"] is None and time.monotonic() < deadline:
                time.sleep(0.001)
        return real(self, generator)

    monkeypatch.setattr(image.SeedStreams, "__call__", term_at_step_4)
    outcomes = run_image_stacks(together, inputs=tiny_sets, device="cpu")
    assert all(isinstance(err, Interrupted) for err in outcomes), outcomes
    assert train._THREADS_STOP["signum"] is None  # cleared with the handlers
    steps = [int(re.search(r"SIGTERM at step (\d+);", str(err))[1]) for err in outcomes]
    assert 4 in steps and all(1 <= step < 20 for step in steps), steps  # each stack at its own next step
    for (_, outs), step in zip(together, steps):
        assert torch.load(stack_checkpoint(outs), weights_only=False)["step"] == step
        assert not any(out.exists() for out in outs)
    monkeypatch.setattr(image.SeedStreams, "__call__", real)
    assert run_image_stacks(together, inputs=tiny_sets, device="cpu") == [None, None]
    for jobs, outs in together:
        reference = [tmp_path / "alone" / job["method"] / str(job["seed"]) / "metrics.json" for job in jobs]
        run_image_stack(jobs, reference, inputs=tiny_sets, device="cpu")
        for out, ref in zip(outs, reference):
            _assert_same_results(ref, out, particles)


def test_stacks_that_cannot_share_a_process_are_refused_before_anything_runs(tiny_sets, tmp_path):
    stacks = _stacks(tmp_path)
    precision = [(stacks[0][0], stacks[0][1]), ([_job("svgd", 38, matmul_precision="high")], [tmp_path / "s.json"])]
    with pytest.raises(SpecError, match="matmul_precision differs between the stacks"):
        run_image_stacks(precision, inputs=tiny_sets, device="cpu")
    twice = [stacks[1], ([_job("de", 41)], [stacks[1][1][0]])]
    with pytest.raises(SpecError, match="is in stack 1 and stack 2"):
        run_image_stacks(twice, inputs=tiny_sets, device="cpu")
    assert not any(tmp_path.rglob("metrics.json*"))


def test_the_cli_trains_stacks_side_by_side_and_stamps_each_seed(tiny_sets, tmp_path, particles):
    stacks = _stacks(tmp_path / "cli")
    jobs = [job for stack_jobs, _ in stacks for job in stack_jobs]
    outs = [out for _, stack_outs in stacks for out in stack_outs]
    sizes = ",".join(str(len(stack_jobs)) for stack_jobs, _ in stacks)
    assert main([*_cli_args(jobs, outs, tiny_sets), "--stacks", sizes]) == 0
    for jobs_k, outs_k in _stacks(tmp_path / "alone"):
        run_image_stack(jobs_k, outs_k, inputs=tiny_sets, device="cpu")
    for out in outs:
        ref = tmp_path / "alone" / out.relative_to(tmp_path / "cli")
        _assert_same_results(ref, out, particles)
        assert "provenance" in json.loads(out.read_text())


@pytest.mark.parametrize(
    ("sizes", "message"),
    [("2,2", "adding up to the 5 --spec/--out pairs"), ("1,x", "is not a list of stack sizes"), ("0,5", "at least 1")],
)
def test_the_cli_refuses_stack_sizes_that_do_not_fit_in_one_line(tiny_sets, tmp_path, sizes, message):
    stacks = _stacks(tmp_path)
    jobs = [job for stack_jobs, _ in stacks for job in stack_jobs]
    outs = [out for _, stack_outs in stacks for out in stack_outs]
    with pytest.raises(SystemExit) as err:
        main([*_cli_args(jobs, outs, tiny_sets), "--stacks", sizes])
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not any(out.exists() for out in outs)


# ------------------------------------------------------------------ CUDA graphs on threads
class ThreadedCuda(FakeCuda):
    """:class:`test_capture.FakeCuda` with CUDA's per-thread current stream, counting the
    captures under way at once."""

    def __init__(self) -> None:
        self.local = threading.local()
        super().__init__()
        self.lock = threading.Lock()
        self.under_way = self.most_at_once = 0
        self.modes: list[str] = []
        self.stepping: set[int] = set()  # the threads inside a training step now
        self.beside: list[set[int]] = []  # for each capture, the other threads inside a step

    def watch_steps(self, monkeypatch) -> None:
        """Keep :attr:`stepping` up to date: every training step, eager or captured (a thread
        that waits for its capture's turn is in none)."""
        real, cuda = train.step, self

        def step(*args, **kwargs):
            me = threading.get_ident()
            with cuda.lock:
                cuda.stepping.add(me)
            try:
                time.sleep(0.001)  # a step takes a while too: a capture would fall inside one
                return real(*args, **kwargs)
            finally:
                with cuda.lock:
                    cuda.stepping.discard(me)

        monkeypatch.setattr(train, "step", step)

    @property
    def current(self):
        return getattr(self.local, "current", self.default)

    @current.setter
    def current(self, stream):
        self.local.current = stream

    def stream(self) -> FakeStream:
        with self.lock:
            return super().stream()

    def graph(self) -> FakeGraph:
        cuda = self

        class Counted(FakeGraph):
            def capture_begin(self, pool, capture_error_mode="global"):
                super().capture_begin(pool, capture_error_mode)
                with cuda.lock:
                    cuda.under_way += 1
                    cuda.most_at_once = max(cuda.most_at_once, cuda.under_way)
                    cuda.modes.append(capture_error_mode)
                    # what another thread does meanwhile: none may be inside a step
                    cuda.beside.append(set(cuda.stepping) - {threading.get_ident()})
                time.sleep(0.01)  # a capture takes a while: another thread's would overlap it

            def capture_end(self):
                with cuda.lock:
                    cuda.under_way -= 1
                super().capture_end()

        with self.lock:
            self.graphs.append(Counted(self))
            return self.graphs[-1]


def test_stacks_on_threads_capture_one_at_a_time_each_from_its_own_stream(tiny_sets, tmp_path, particles, monkeypatch):
    """Every stack's step is captured (the stand-in records nothing, so each graph fails its
    check against the eager steps and the run goes on eagerly: the results stay exact); the
    process's captures never overlap, no other thread is inside a step while one captures
    (repens.training.turns), each capture is begun in the thread-local mode, and each thread
    ends on the stream it began on."""
    cuda = ThreadedCuda()
    backend = CudaGraphBackend(cuda)
    cuda.watch_steps(monkeypatch)
    monkeypatch.setattr(train, "backend_for", lambda device: backend)
    settings = image.train_settings  # the device's finiteness flag, as on a GPU: the step is capturable
    monkeypatch.setattr(image, "train_settings", lambda *a, **k: settings(*a, **{**k, "nonfinite_check_every": 5}))
    stacks = [s for s in _stacks(tmp_path / "together") if len(s[0]) > 1]
    assert run_image_stacks(stacks, inputs=tiny_sets, device="cpu") == [None, None]
    assert len(cuda.graphs) >= len(stacks) and cuda.most_at_once == 1
    assert len(cuda.beside) == len(cuda.graphs) and all(not others for others in cuda.beside), cuda.beside
    assert set(cuda.modes) == {"thread_local"}
    assert cuda.under_way == 0 and not cuda.capturing and cuda.routing == set()
    monkeypatch.setattr(train, "backend_for", lambda device: None)
    monkeypatch.setattr(image, "train_settings", settings)
    for jobs, outs in stacks:
        reference = [tmp_path / "alone" / job["method"] / str(job["seed"]) / "metrics.json" for job in jobs]
        run_image_stack(jobs, reference, inputs=tiny_sets, device="cpu")
        for out, ref in zip(outs, reference):
            _assert_same_results(ref, out, particles)
